//! CloudWatch metrics as Embedded Metric Format: a log line carries its own metric directive,
//! and CloudWatch Logs extracts the metrics from it. No SDK call, no extra line and no extra
//! network trip on the hot path.
//!
//! Every metric is published once, by the line's own dimensions (which the template's alarms
//! and dashboard name). Powertools adds a `service` dimension set to each metric as well, which
//! doubles the custom metrics CloudWatch bills; here that is opt-in
//! (`CLAIMONCE_METRICS_SERVICE_DIMENSION=true`, for dashboards built on Powertools' shape).
//! The line carries `service` as a member either way, for Logs Insights.

use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::value::RawValue;

/// The metric namespace.
pub const NAMESPACE: &str = "claimonce";

/// One metric on a line.
#[derive(Debug, Clone, Copy)]
pub struct Metric<'a> {
    /// Metric name, e.g. `Deliveries`, `SweptRows`.
    pub name: &'a str,
    /// CloudWatch unit, e.g. `Count`, `Milliseconds`.
    pub unit: &'a str,
    /// The value.
    pub value: f64,
}

/// A metric's name and unit, as the directive declares it.
#[derive(Debug, Serialize)]
struct Definition<'a> {
    #[serde(rename = "Name")]
    name: &'a str,
    #[serde(rename = "Unit")]
    unit: &'a str,
}

/// The `_aws` member of an EMF line: which members of the line are metrics, in which
/// namespace, by which dimensions. The one place the directive's shape is written.
#[derive(Debug, Serialize)]
struct Directive<S: Serialize> {
    #[serde(rename = "Timestamp")]
    timestamp: u64,
    /// `[Set]`: one metric set.
    #[serde(rename = "CloudWatchMetrics")]
    sets: S,
}

#[derive(Debug, Serialize)]
struct Set<'a, D: Serialize> {
    #[serde(rename = "Namespace")]
    namespace: &'static str,
    #[serde(rename = "Dimensions")]
    dimensions: Dimensions<'a>,
    #[serde(rename = "Metrics")]
    metrics: D,
}

/// The dimension sets: the line's own, and `service` alone when
/// `CLAIMONCE_METRICS_SERVICE_DIMENSION` is `true`. Written straight from the names, with
/// nothing allocated.
#[derive(Debug)]
struct Dimensions<'a>(&'a [&'a str]);

impl Serialize for Dimensions<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if service_set() {
            [self.0, &["service"]].serialize(serializer)
        } else {
            [self.0].serialize(serializer)
        }
    }
}

/// True when the process publishes every metric by `service` too, read once.
fn service_set() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        crate::config::optional("CLAIMONCE_METRICS_SERVICE_DIMENSION")
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
    })
}

impl<S: Serialize> Directive<S> {
    /// The directive of a line written now.
    fn new(sets: S) -> Self {
        let timestamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(0));
        Self { timestamp, sets }
    }
}

/// The one metric set of a line, by `dimensions`.
fn sets<'a, D: Serialize>(dimensions: &'a [&'a str], metrics: D) -> [Set<'a, D>; 1] {
    [Set {
        namespace: NAMESPACE,
        dimensions: Dimensions(dimensions),
        metrics,
    }]
}

/// The metric set of a line whose dimensions and metrics never change, as JSON written once per
/// process: serialised anew, its dozen fixed names cost each line about 1,900 instructions.
fn written_once(
    cell: &'static OnceLock<Box<RawValue>>,
    dimensions: &'static [&'static str],
    metrics: &'static [Definition<'static>],
) -> &'static RawValue {
    // Names cannot fail to serialise; `null` would stand in should that ever change.
    cell.get_or_init(|| {
        serde_json::value::to_raw_value(&sets(dimensions, metrics)).unwrap_or_default()
    })
}

/// Metrics embedded in a line ([`crate::log::Fields`]): the `_aws` directive that names them,
/// each dimension's value, and each metric's value, in the embedded metric format.
#[derive(Debug)]
pub struct Embedded<'a> {
    /// The one dimension, by name and value (`Provider` or `Function`).
    pub dimension: (&'a str, &'a str),
    /// The metrics.
    pub metrics: &'a [Metric<'a>],
}

impl crate::log::Fields for Embedded<'_> {
    fn entries<M: serde::ser::SerializeMap>(&self, map: &mut M) -> Result<(), M::Error> {
        let names = [self.dimension.0];
        let definitions: Vec<Definition<'_>> = self
            .metrics
            .iter()
            .map(|m| Definition {
                name: m.name,
                unit: m.unit,
            })
            .collect();
        map.serialize_entry("_aws", &Directive::new(sets(&names, definitions)))?;
        map.serialize_entry(self.dimension.0, self.dimension.1)?;
        for m in self.metrics {
            map.serialize_entry(m.name, &m.value)?;
        }
        Ok(())
    }
}

/// The metric members of a drained spill record's log line: `Drained` (count, always 1), by
/// `Provider` and `Disposition`.
#[derive(Debug)]
pub struct Drained<'a> {
    directive: Directive<&'static RawValue>,
    provider: &'a str,
    disposition: &'a str,
    drained: u8,
}

impl<'a> Drained<'a> {
    /// The metric of one drained record.
    pub fn new(provider: &'a str, disposition: &'a str) -> Self {
        static SETS: OnceLock<Box<RawValue>> = OnceLock::new();
        Self {
            directive: Directive::new(written_once(
                &SETS,
                &["Provider", "Disposition"],
                &[Definition {
                    name: "Drained",
                    unit: "Count",
                }],
            )),
            provider,
            disposition,
            drained: 1,
        }
    }
}

/// The metric members of a delivery's log line: `Deliveries` (count, always 1) and
/// `LatencyMs`, by `Provider` and `Disposition`. Flattened into the line, it writes the same
/// members [`embed`] would, without building them as JSON values first.
#[derive(Debug)]
pub struct Delivery<'a> {
    directive: Directive<&'static RawValue>,
    provider: &'a str,
    disposition: &'a str,
    deliveries: u8,
    latency_ms: f64,
}

impl<'a> Delivery<'a> {
    /// The metrics of one delivery.
    pub fn new(provider: &'a str, disposition: &'a str, latency_ms: f64) -> Self {
        static SETS: OnceLock<Box<RawValue>> = OnceLock::new();
        Self {
            directive: Directive::new(written_once(
                &SETS,
                &["Provider", "Disposition"],
                &[
                    Definition {
                        name: "Deliveries",
                        unit: "Count",
                    },
                    Definition {
                        name: "LatencyMs",
                        unit: "Milliseconds",
                    },
                ],
            )),
            provider,
            disposition,
            deliveries: 1,
            latency_ms,
        }
    }
}

impl crate::log::Fields for Drained<'_> {
    fn entries<M: serde::ser::SerializeMap>(&self, map: &mut M) -> Result<(), M::Error> {
        map.serialize_entry("_aws", &self.directive)?;
        map.serialize_entry("Provider", self.provider)?;
        map.serialize_entry("Disposition", self.disposition)?;
        map.serialize_entry("Drained", &self.drained)
    }
}

impl crate::log::Fields for Delivery<'_> {
    fn entries<M: serde::ser::SerializeMap>(&self, map: &mut M) -> Result<(), M::Error> {
        map.serialize_entry("_aws", &self.directive)?;
        map.serialize_entry("Provider", self.provider)?;
        map.serialize_entry("Disposition", self.disposition)?;
        map.serialize_entry("Deliveries", &self.deliveries)?;
        map.serialize_entry("LatencyMs", &self.latency_ms)
    }
}
