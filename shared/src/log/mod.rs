//! Structured logging: one JSON object per line on stdout, which CloudWatch Logs indexes as is.
//! Callers pass only fields that are safe to keep: never a secret, a signature or a body.
//!
//! Every line is a Lambda log line in the shape AWS Lambda Powertools' logger writes:
//! `timestamp` (RFC 3339, milliseconds, UTC), `level` (`DEBUG`, `INFO`, `WARN`, `ERROR`, the
//! names Lambda's log-level filter reads), `message`, `service`, then what the process and the
//! current invocation are (`cold_start`, `function_name`, `function_memory_size`,
//! `function_arn`, `function_request_id`, `xray_trace_id`), then the caller's fields. A line
//! below `AWS_LAMBDA_LOG_LEVEL` (which Lambda sets from the function's `ApplicationLogLevel`;
//! `INFO` when unset) is not even built.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::config::ConfigError;

mod dependencies;
mod fields;

pub use self::dependencies::forward as forward_dependencies;
pub(crate) use self::dependencies::notice;
#[cfg(all(test, feature = "jobs"))]
pub(crate) use self::fields::Object;
pub use self::fields::{Field, Fields};
#[doc(inline)]
pub use crate::__log_fields as fields;
// For `fields!` in other crates: the trait its entries are written through.
#[doc(hidden)]
pub use self::fields::SerializeMap;

type Sink = Arc<dyn Fn(&str) + Send + Sync>;

/// How serious a line is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Level {
    /// Detail for a person debugging: off unless the log level says `DEBUG`.
    Debug,
    /// Normal operation: one line per delivery or job run.
    Info,
    /// Something to look at that did not fail a delivery.
    Warn,
    /// A failure on our side.
    Error,
}

impl Level {
    /// The level's name, as Lambda's log-level filter and Powertools spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Debug => "DEBUG",
            Level::Info => "INFO",
            Level::Warn => "WARN",
            Level::Error => "ERROR",
        }
    }

    /// The level `AWS_LAMBDA_LOG_LEVEL` asks for: `TRACE` counts as `DEBUG` and `FATAL` as
    /// `ERROR` (this code writes neither); unset or unknown is `INFO`, Lambda's default.
    pub fn from_env() -> Self {
        crate::config::optional("AWS_LAMBDA_LOG_LEVEL")
            .map_or(Level::Info, |v| Level::named(v.trim()))
    }

    /// The level a log-level setting names: `"debug"`, `"info"`, `"warn"`, `"error"`, in any
    /// case; anything else is `Info`. Only for reading a setting: code names its level as a
    /// [`Level`], so a typo cannot turn an error line into an info one.
    fn named(name: &str) -> Self {
        let is = |names: &[&str]| names.iter().any(|n| name.eq_ignore_ascii_case(n));
        if is(&["debug", "trace"]) {
            Level::Debug
        } else if is(&["warn", "warning"]) {
            Level::Warn
        } else if is(&["error", "fatal"]) {
            Level::Error
        } else {
            Level::Info
        }
    }
}

/// What every line of one invocation says about it, from the Runtime API's answer.
#[derive(Debug, Clone, Default)]
pub(crate) struct Invocation {
    /// True for the first invocation of this process (execution environment).
    pub cold_start: bool,
    /// The ARN the function was invoked by (`Lambda-Runtime-Invoked-Function-Arn`).
    pub function_arn: String,
    /// The Lambda request id (`Lambda-Runtime-Aws-Request-Id`), as in Lambda's REPORT line.
    pub function_request_id: String,
    /// The X-Ray trace header of the invocation (`Lambda-Runtime-Trace-Id`).
    pub xray_trace_id: Option<String>,
}

/// What every line of a process says about where it runs.
#[derive(Debug, Clone)]
struct Process {
    service: String,
    function_name: Option<String>,
    function_memory_size: Option<u32>,
}

impl Process {
    /// From the variables Lambda sets (`AWS_LAMBDA_FUNCTION_NAME`,
    /// `AWS_LAMBDA_FUNCTION_MEMORY_SIZE`) and Powertools' `POWERTOOLS_SERVICE_NAME`
    /// (default `claimonce`).
    fn from_env() -> Self {
        Self {
            service: crate::config::optional("POWERTOOLS_SERVICE_NAME")
                .unwrap_or_else(|| "claimonce".to_owned()),
            function_name: crate::config::optional("AWS_LAMBDA_FUNCTION_NAME"),
            function_memory_size: crate::config::optional("AWS_LAMBDA_FUNCTION_MEMORY_SIZE")
                .and_then(|v| v.trim().parse().ok()),
        }
    }
}

tokio::task_local! {
    /// The invocation the running task serves, when an execution environment serves several
    /// at once (Lambda Managed Instances): each line names its own ([`within`]).
    static CURRENT: Invocation;
}

/// The invocation this process is serving when it serves one at a time ([`begin`]): one slot
/// for the process is then exact, and costs a delivery no future of its own.
static INVOCATION: Mutex<Invocation> = Mutex::new(Invocation {
    // Before its first invocation a process is in its init phase, the cold start itself: the
    // warm-up's "cold start" line says so beside its ColdStart metric.
    cold_start: true,
    function_arn: String::new(),
    function_request_id: String::new(),
    xray_trace_id: None,
});

/// Set once this process has begun its first invocation.
static STARTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes `invocation`, the one the Runtime API just handed over, the one every line names from
/// now on, in a process that serves one at a time.
pub(crate) fn begin(invocation: Invocation) {
    *INVOCATION.lock().unwrap_or_else(PoisonError::into_inner) = invocation;
}

/// Runs `serve` as `invocation`, one of several a process serves at once: every line written
/// while it runs names that invocation, not the process's slot ([`begin`]).
pub(crate) fn within<F: std::future::Future>(
    invocation: Invocation,
    serve: F,
) -> impl std::future::Future<Output = F::Output> {
    CURRENT.scope(invocation, serve)
}

/// The invocation a task of its own is working for, shared with that task: a database
/// connection's, which outlives deliveries and writes the server's notices. A spawned task does
/// not inherit the invocation its spawner runs as ([`within`]), so without this its lines would
/// name none, and say `cold_start: true`, under Managed Instances.
#[derive(Debug, Clone, Default)]
pub(crate) struct Serving(Arc<Mutex<Option<Invocation>>>);

impl Serving {
    /// From now on, the invocation the calling task runs as ([`within`]); none in a process
    /// that serves one at a time, whose one slot names it already ([`begin`]).
    pub(crate) fn begin(&self) {
        let current = CURRENT.try_with(Invocation::clone).ok();
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = current;
    }

    /// No invocation from now on: the work for the last one is done.
    pub(crate) fn end(&self) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// Runs `write`, the lines it writes naming the invocation served, if any.
    pub(crate) fn scope<R>(&self, write: impl FnOnce() -> R) -> R {
        let served = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        match served {
            Some(invocation) => CURRENT.sync_scope(invocation, write),
            None => write(),
        }
    }
}

impl Invocation {
    /// The invocation the Runtime API just handed over, by the ARN it was invoked by, its
    /// request id and its trace header; the process's first is its cold start (ask once per
    /// invocation).
    pub(crate) fn next(
        function_arn: String,
        function_request_id: String,
        xray_trace_id: Option<String>,
    ) -> Self {
        let cold_start = !STARTED.swap(true, std::sync::atomic::Ordering::Relaxed);
        if cold_start {
            // Past its init phase: a line that names no invocation is no longer written during
            // the cold start (one process serving several at once never calls `begin`).
            INVOCATION
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .cold_start = false;
        }
        Self {
            cold_start,
            function_arn,
            function_request_id,
            xray_trace_id,
        }
    }
}

/// Where log lines go (stdout in a function, memory in a test), at which level, and what
/// every line says about the process.
#[derive(Clone)]
pub struct Log {
    sink: Sink,
    min: Level,
    process: Arc<Process>,
}

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Log").field("min", &self.min).finish()
    }
}

/// Lines kept by [`Log::capture`].
pub type Captured = Arc<Mutex<Vec<String>>>;

impl Log {
    fn with_sink(sink: Sink) -> Self {
        Self {
            sink,
            min: Level::from_env(),
            process: Arc::new(Process::from_env()),
        }
    }

    /// Writes each line to stdout. A line that cannot be written (stdout closed: a local run
    /// that went away before its functions) is dropped, never a panic.
    pub fn stdout() -> Self {
        Self::with_sink(Arc::new(|line| {
            use std::io::Write as _;
            let _ = writeln!(std::io::stdout().lock(), "{line}");
        }))
    }

    /// A function process's log: stdout, with the libraries' warnings and errors (the AWS
    /// SDK's, tokio-postgres', rustls', PostgreSQL's) forwarded to it in the same line shape
    /// ([`forward_dependencies`]).
    pub fn process() -> Self {
        let log = Self::stdout();
        forward_dependencies(&log);
        log
    }

    /// Builds every line and drops it: for benchmarks, which measure the work of logging but
    /// not the terminal.
    pub fn discard() -> Self {
        Self::with_sink(Arc::new(|_| {}))
    }

    /// Keeps every line in memory, for tests that read what was logged.
    pub fn capture() -> (Self, Captured) {
        let lines = Captured::default();
        let kept = Arc::clone(&lines);
        let sink: Sink = Arc::new(move |line| {
            if let Ok(mut lines) = kept.lock() {
                lines.push(line.to_owned());
            }
        });
        (Self::with_sink(sink), lines)
    }

    /// The same log at another level (tests, and a caller that knows better than the
    /// environment).
    pub fn at(mut self, min: Level) -> Self {
        self.min = min;
        self
    }

    /// The `service` every line names (and the EMF `service` dimension).
    pub fn service(&self) -> &str {
        &self.process.service
    }

    /// True when a line at `level` would be written.
    pub fn enabled(&self, level: Level) -> bool {
        level >= self.min
    }

    /// Logs a configuration error as one line (it names the variable, never the value) and
    /// hands the result back unchanged, so a function's `main` can stop before its first
    /// invocation with the reason in the logs.
    pub fn config<T>(&self, built: Result<T, ConfigError>) -> Result<T, ConfigError> {
        if let Err(e) = &built {
            self.write(Level::Error, &e.to_string(), ());
        }
        built
    }

    /// Writes one line with the given fields ([`fields!`](crate::log::fields)) after the common
    /// ones, if `level` is enabled.
    pub fn write(&self, level: Level, message: &str, fields: impl Fields) {
        if self.enabled(level) {
            self.write_line(level, message, &|line| fields.entries(line));
        }
    }

    /// Writes one line: its common keys, then what `fields` writes. The same code whatever
    /// the fields, which are the only part built for each kind of line.
    fn write_line(
        &self,
        level: Level,
        message: &str,
        fields: &dyn Fn(&mut Line<'_>) -> Result<(), serde_json::Error>,
    ) {
        use serde::ser::{SerializeMap as _, Serializer as _};
        let write = |invocation: &Invocation| {
            // Sized for a delivery line (about 700 bytes with its metrics) so that writing it
            // does not grow the buffer step by step.
            let mut serializer = serde_json::Serializer::new(Vec::with_capacity(1024));
            let mut line = (&mut serializer).serialize_map(None)?;
            line.serialize_entry("timestamp", &rfc3339_millis(SystemTime::now()))?;
            line.serialize_entry("level", level.as_str())?;
            line.serialize_entry("message", message)?;
            let process = &self.process;
            let common = crate::log::fields! {
                service: process.service.as_str(),
                function_name: process.function_name.as_deref(),
                function_memory_size: process.function_memory_size,
                cold_start: invocation.cold_start,
                function_arn: Some(invocation.function_arn.as_str()).filter(|a| !a.is_empty()),
                function_request_id: Some(invocation.function_request_id.as_str())
                    .filter(|id| !id.is_empty()),
                xray_trace_id: invocation.xray_trace_id.as_deref(),
            };
            common.entries(&mut line)?;
            fields(&mut line)?;
            line.end()?;
            Ok::<_, serde_json::Error>(serializer.into_inner())
        };
        // Written where the invocation is, rather than cloned out of it.
        let line = match CURRENT.try_with(write) {
            Ok(line) => line,
            // Written under the lock rather than cloned out of it: a process serving one
            // invocation at a time has nothing waiting on it.
            Err(_) => write(&INVOCATION.lock().unwrap_or_else(PoisonError::into_inner)),
        };
        if let Ok(Ok(line)) = line.map(String::from_utf8) {
            (self.sink)(&line);
        }
    }
}

/// A line as it is written: the JSON object its fields are entries of.
type Line<'a> = serde_json::ser::Compound<'a, Vec<u8>, serde_json::ser::CompactFormatter>;

/// `time` as RFC 3339 in UTC with milliseconds: `2026-11-30T20:31:02.123Z`.
pub(crate) fn rfc3339_millis(time: SystemTime) -> String {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = i64::try_from(since.as_secs()).unwrap_or(i64::MAX);
    let millis = i64::from(since.subsec_millis());
    let mut text = String::with_capacity(24);
    if crate::timestamp::push_date_time(&mut text, secs) {
        text.push('.');
        crate::timestamp::push_digits(&mut text, millis, 3);
        text.push('Z');
        return text;
    }
    // Past year 9999, which four digits cannot hold: the year is written in full.
    let (year, month, day, rem) = crate::timestamp::civil(secs);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn timestamps_are_rfc3339_utc_with_milliseconds() {
        let at = |secs: u64, ms: u64| {
            rfc3339_millis(UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(ms))
        };
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000Z");
        // `date -u -d @1796070269` and a leap day.
        assert_eq!(at(1_796_070_269, 463), "2026-11-30T20:24:29.463Z");
        assert_eq!(at(1_709_208_000, 7), "2024-02-29T12:00:00.007Z");
        assert_eq!(at(951_782_400, 999), "2000-02-29T00:00:00.999Z");
        // The last second of 9999 and the first of 10000, written the long way.
        assert_eq!(at(253_402_300_799, 1), "9999-12-31T23:59:59.001Z");
        assert_eq!(at(253_402_300_800, 10), "10000-01-01T00:00:00.010Z");
    }

    #[tokio::test]
    async fn lines_below_the_level_are_not_written_and_every_line_has_the_common_keys() {
        let (log, lines) = Log::capture();
        let log = log.at(Level::Info);
        let invocation = Invocation {
            cold_start: true,
            function_arn: "arn:aws:lambda:us-east-1:1:function:f".into(),
            function_request_id: "req-1".into(),
            xray_trace_id: Some("Root=1-2-3".into()),
        };
        CURRENT
            .scope(invocation, async {
                log.write(Level::Debug, "hidden", ());
                log.write(Level::Warn, "shown", crate::log::fields! { k: 1 });
            })
            .await;
        log.write(Level::Warn, "outside", ());
        let lines = lines.lock().expect("lines");
        assert_eq!(lines.len(), 2);
        let outside: serde_json::Value = serde_json::from_str(&lines[1]).expect("json");
        assert!(outside.get("function_request_id").is_none(), "{outside}");
        let line: serde_json::Value = serde_json::from_str(&lines[0]).expect("json");
        assert_eq!(line["level"], "WARN");
        assert_eq!(line["message"], "shown");
        assert_eq!(line["function_request_id"], "req-1");
        assert_eq!(line["xray_trace_id"], "Root=1-2-3");
        assert_eq!(line["cold_start"], true);
        assert_eq!(line["k"], 1);
        assert!(line["service"].is_string());
        assert_eq!(line["timestamp"].as_str().map(str::len), Some(24));
    }
}
