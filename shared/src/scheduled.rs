//! What the scheduled (non-HTTP) functions share: a time budget taken from the invocation's
//! deadline, and their one report line in CloudWatch Embedded Metric Format.
//!
//! A scheduled job (the retention sweep, the outbox relay) works in small units, each its own
//! short transaction, and starts another only while its budget allows, so it finishes and
//! reports before Lambda would kill it. What it did not get to, the next run does.

use std::time::{Duration, Instant};

use crate::budget::Budget;

pub use crate::metrics::Metric;

/// A scheduled job: one run per invocation, within a budget that ends its margin before the
/// invocation's deadline, answered with its report. `lambda::serve_job` serves one.
pub trait Job: Sync {
    /// What a run did: the invocation's answer, as JSON.
    type Report: serde::Serialize + Send;

    /// Kept before the invocation's deadline: the longest unit of work and the report.
    fn margin(&self) -> Duration;

    /// One run within `budget`, for the invocation's `event` (the schedule's, or an operator's
    /// with options). A failure was logged; the invocation answers it as an error.
    fn run(
        &self,
        budget: Budget,
        event: serde_json::Value,
    ) -> impl std::future::Future<Output = Result<Self::Report, JobFailed>> + Send;
}

/// The function's name as Lambda sets it (`AWS_LAMBDA_FUNCTION_NAME`), else `default`: the
/// value of the `Function` dimension, which the template's alarms name with `!Ref`.
pub fn function_name(default: &str) -> String {
    crate::config::optional("AWS_LAMBDA_FUNCTION_NAME").unwrap_or_else(|| default.to_owned())
}

/// What every job's report line carries after its own counts: `duration_ms` since `started`,
/// the `error` if the run failed, and `metrics` by the single dimension `Function`.
pub fn report_end<'a>(
    started: Instant,
    error: Option<&'a str>,
    function: &'a str,
    metrics: &'a [Metric<'a>],
) -> impl crate::log::Fields + 'a {
    let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    crate::log::fields! {
        duration_ms: ms,
        error: error;
        ..crate::metrics::Embedded { dimension: ("Function", function), metrics }
    }
}

/// What a recover function's run found and did, for its report line's metrics (by the single
/// dimension `Provider`, which the template's recovery alarms name).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Events applied (Stripe: read from its API) or redeliveries requested (GitHub).
    pub recovered: u64,
    /// Events found already applied (their webhook did arrive); `None` where the function
    /// applies nothing itself (GitHub's asks for redeliveries), and the metric is left out.
    pub duplicates: Option<u64>,
    /// Failures seen and not recovered by this run: the apply failed, or the run stopped
    /// (budget, rate limit, the per-run cap) before it got to them.
    pub still_failing: u64,
    /// Age in seconds of the oldest failure seen and not recovered, or of the oldest one a
    /// redelivery was just asked for (GitHub's outcome is known only at the next run); 0
    /// when there is none. The alarm on it fires well before the sender's window closes.
    pub oldest_failure_age_seconds: u64,
}

/// Writes a recover function's one line per run: `line` (what the run saw and did) with the
/// `provider`, `duration_ms`, the `error` if the run failed (then at ERROR), and the metrics
/// `Recovered`, `RecoveredDuplicates`, `RecoveryStillFailing` and
/// `RecoveryOldestFailureAgeSeconds` by `Provider`.
pub fn write_recovery_report(
    log: &crate::log::Log,
    message: &str,
    provider: &str,
    line: impl crate::log::Fields,
    started: Instant,
    error: Option<&str>,
    counts: &Recovery,
) {
    let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let count = |name, value: u64| Metric {
        name,
        unit: "Count",
        value: value as f64,
    };
    let mut metrics = vec![
        count("Recovered", counts.recovered),
        count("RecoveryStillFailing", counts.still_failing),
        Metric {
            name: "RecoveryOldestFailureAgeSeconds",
            unit: "Seconds",
            value: counts.oldest_failure_age_seconds as f64,
        },
    ];
    if let Some(duplicates) = counts.duplicates {
        metrics.push(count("RecoveredDuplicates", duplicates));
    }
    let metrics = crate::metrics::Embedded {
        dimension: ("Provider", provider),
        metrics: &metrics,
    };
    let level = if error.is_some() {
        crate::log::Level::Error
    } else {
        crate::log::Level::Info
    };
    let line = crate::log::fields! { provider: provider, duration_ms: ms, error: error; ..(line, metrics) };
    log.write(level, message, line);
}

/// A scheduled job's run that failed, after its line was logged: what the invocation answers
/// with, so Lambda counts it in `Errors` (the jobs' errors alarms).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobFailed {
    /// The job, as the text names it (`retention sweep`).
    pub job: &'static str,
    /// Why, data-free.
    pub reason: String,
}

impl std::fmt::Display for JobFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} failed: {}", self.job, self.reason)
    }
}

impl std::error::Error for JobFailed {}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_report_line_is_embedded_metric_format() {
        let metric = Metric {
            name: "SweptRows",
            unit: "Count",
            value: 3.0,
        };
        let metrics = [metric];
        let end = report_end(
            Instant::now(),
            Some("connection refused"),
            "sweep-fn",
            &metrics,
        );
        let line = serde_json::to_value(crate::log::Object(end)).expect("a JSON object");
        assert!(line["duration_ms"].as_u64().is_some());
        assert_eq!(line["error"], "connection refused");
        let directive = &line["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(directive["Namespace"], "claimonce");
        assert_eq!(directive["Dimensions"], json!([["Function"]]));
        assert_eq!(
            directive["Metrics"],
            json!([{"Name": "SweptRows", "Unit": "Count"}])
        );
        assert_eq!(line["Function"], "sweep-fn");
        assert_eq!(line["SweptRows"], 3.0);
        assert!(line["_aws"]["Timestamp"].as_u64().is_some_and(|t| t > 0));
    }
}
