//! CloudWatch metrics as Embedded Metric Format: a log line carries its own metric directive,
//! and CloudWatch Logs extracts the metrics from it. No SDK call, no extra line and no extra
//! network trip on the hot path.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

/// The metric namespace.
pub const NAMESPACE: &str = "claimonce";

/// One metric on a line.
#[derive(Debug, Clone)]
pub struct Metric<'a> {
    /// Metric name, e.g. `Deliveries`, `SweptRows`.
    pub name: &'a str,
    /// CloudWatch unit, e.g. `Count`, `Milliseconds`.
    pub unit: &'a str,
    /// The value, as written on the line (a count stays an integer if given as one).
    pub value: Value,
}

/// Adds `metrics` in [`NAMESPACE`], by the given `dimensions` (one dimension set, name and
/// value each), to `line`: the `_aws` directive plus every dimension and metric as a member.
pub fn embed(line: &mut Map<String, Value>, dimensions: &[(&str, &str)], metrics: &[Metric<'_>]) {
    let timestamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(0));
    let names: Vec<&str> = dimensions.iter().map(|(name, _)| *name).collect();
    let definitions: Vec<Value> = metrics
        .iter()
        .map(|m| json!({"Name": m.name, "Unit": m.unit}))
        .collect();
    line.insert(
        "_aws".into(),
        json!({
            "Timestamp": timestamp,
            "CloudWatchMetrics": [{
                "Namespace": NAMESPACE,
                "Dimensions": [names],
                "Metrics": definitions
            }]
        }),
    );
    for (name, value) in dimensions {
        line.insert((*name).into(), (*value).into());
    }
    for m in metrics {
        line.insert(m.name.into(), m.value.clone());
    }
}

/// Adds the `Deliveries` (count) and `LatencyMs` metrics, by `Provider` and `Disposition`,
/// to a delivery's log line.
pub fn delivery(line: &mut Map<String, Value>, provider: &str, disposition: &str, latency_ms: f64) {
    embed(
        line,
        &[("Provider", provider), ("Disposition", disposition)],
        &[
            Metric {
                name: "Deliveries",
                unit: "Count",
                value: 1.into(),
            },
            Metric {
                name: "LatencyMs",
                unit: "Milliseconds",
                value: latency_ms.into(),
            },
        ],
    );
}
