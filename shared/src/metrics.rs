//! CloudWatch metrics as Embedded Metric Format: the delivery's log line itself carries the
//! metric directive, and CloudWatch Logs extracts the metrics from it. No SDK call, no extra
//! line and no extra network trip on the hot path.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

/// The metric namespace.
pub const NAMESPACE: &str = "claimonce";

/// Adds the `Deliveries` (count) and `LatencyMs` metrics, by `Provider` and `Disposition`,
/// to a delivery's log line.
pub fn delivery(line: &mut Map<String, Value>, provider: &str, disposition: &str, latency_ms: f64) {
    let timestamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(0));
    line.insert(
        "_aws".into(),
        json!({
            "Timestamp": timestamp,
            "CloudWatchMetrics": [{
                "Namespace": NAMESPACE,
                "Dimensions": [["Provider", "Disposition"]],
                "Metrics": [
                    {"Name": "Deliveries", "Unit": "Count"},
                    {"Name": "LatencyMs", "Unit": "Milliseconds"}
                ]
            }]
        }),
    );
    line.insert("Provider".into(), provider.into());
    line.insert("Disposition".into(), disposition.into());
    line.insert("Deliveries".into(), 1.into());
    line.insert("LatencyMs".into(), latency_ms.into());
}
