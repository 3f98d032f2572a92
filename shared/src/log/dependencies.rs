//! What the libraries under us report, in the process's own log. The AWS SDK and aws-config
//! speak `tracing` (a credential provider that failed, a bad endpoint setting, STS refusing a
//! role); tokio-postgres and rustls speak `log`; PostgreSQL's warnings arrive as notices on
//! the connection ([`notice`]). At WARN and above each becomes one line in the shape every
//! other line has, with `target` naming the library's module and `fields` what it attached;
//! below that, a callsite is switched off once and nothing is built.
//!
//! A field whose name says it holds a credential (`token`, `secret`, `password`, `key`,
//! `authorization`, `signature`, `credential`) is written as `[redacted]`: aws-config, for
//! one, names a refused container credentials token in its warning.

use std::fmt;
use std::sync::OnceLock;

use serde_json::{Map, Value};
use tracing_core::field::{Field, Visit};
use tracing_core::span::{Attributes, Id, Record};
use tracing_core::subscriber::Interest;
use tracing_core::{Event, LevelFilter, Metadata};

use super::{Level, Log};

/// Sends every library's WARN and ERROR events to `log` (ERROR only when `log` is at ERROR),
/// for the rest of the process. The first call wins; later ones change nothing.
pub fn forward(log: &Log) {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let errors_only = log.min >= Level::Error;
        let tracing_max = if errors_only {
            LevelFilter::ERROR
        } else {
            LevelFilter::WARN
        };
        let log_max = if errors_only {
            log::LevelFilter::Error
        } else {
            log::LevelFilter::Warn
        };
        let dispatch = tracing_core::Dispatch::new(Subscriber {
            log: log.clone(),
            max: tracing_max,
        });
        // Either can have been taken already (a test harness's own logger); what is left
        // still forwards.
        let _ = tracing_core::dispatcher::set_global_default(dispatch);
        let logger: &'static Logger = Box::leak(Box::new(Logger {
            log: log.clone(),
            max: log_max,
        }));
        if log::set_logger(logger).is_ok() {
            log::set_max_level(log_max);
        }
    });
}

/// Reports a PostgreSQL notice (what the server sends beside a statement's answer: a
/// `WARNING`, or a `NOTICE` such as "relation already exists, skipping") through `log`:
/// a warning at WARN, the others at DEBUG, so only warnings reach the log. The line carries
/// the severity, the SQLSTATE and the server's message.
pub(crate) fn notice(notice: &tokio_postgres::error::DbError) {
    let level = if notice.severity().eq_ignore_ascii_case("WARNING") {
        log::Level::Warn
    } else {
        log::Level::Debug
    };
    log::log!(
        target: "postgres",
        level,
        "{} {}: {}",
        notice.severity(),
        notice.code().code(),
        notice.message()
    );
}

fn redacted(name: &str) -> bool {
    const SECRET: [&str; 7] = [
        "token",
        "secret",
        "password",
        "key",
        "authorization",
        "signature",
        "credential",
    ];
    let name = name.to_ascii_lowercase();
    SECRET.iter().any(|s| name.contains(s))
}

/// The `tracing` side.
struct Subscriber {
    log: Log,
    max: LevelFilter,
}

impl tracing_core::Subscriber for Subscriber {
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        if self.enabled(metadata) {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        // Spans carry no report of their own: only events are lines.
        metadata.is_event() && *metadata.level() <= self.max
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(self.max)
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let metadata = event.metadata();
        let mut fields = Fields::default();
        event.record(&mut fields);
        let level = match *metadata.level() {
            tracing_core::Level::ERROR => Level::Error,
            tracing_core::Level::WARN => Level::Warn,
            tracing_core::Level::INFO => Level::Info,
            _ => Level::Debug,
        };
        self.log.write(
            level,
            &fields.message,
            // The event's own fields as one member, `fields`, when it has any.
            crate::log::fields! {
                target: metadata.target(),
                fields: Some(fields.rest).filter(|rest| !rest.is_empty()),
            },
        );
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

/// An event's fields: `message` apart, the others by name.
#[derive(Default)]
struct Fields {
    message: String,
    rest: Map<String, Value>,
}

impl Fields {
    fn put(&mut self, field: &Field, value: Value) {
        match field.name() {
            "message" => {
                self.message = match value {
                    Value::String(s) => s,
                    other => other.to_string(),
                }
            }
            name if redacted(name) => {
                self.rest.insert(name.to_owned(), "[redacted]".into());
            }
            name => {
                self.rest.insert(name.to_owned(), value);
            }
        }
    }
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, Value::String(format!("{value:?}")));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, value.into());
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, value.into());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, value.into());
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, Value::String(value.to_string()));
    }
}

/// The `log` side.
struct Logger {
    log: Log,
    max: log::LevelFilter,
}

impl log::Log for Logger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= self.max
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let level = match record.level() {
            log::Level::Error => Level::Error,
            log::Level::Warn => Level::Warn,
            log::Level::Info => Level::Info,
            _ => Level::Debug,
        };
        self.log.write(
            level,
            &record.args().to_string(),
            crate::log::fields! { target: record.target() },
        );
    }

    fn flush(&self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines_of(captured: &super::super::Captured) -> Vec<Value> {
        captured
            .lock()
            .expect("lines")
            .iter()
            .map(|l| serde_json::from_str(l).expect("json"))
            .collect()
    }

    #[test]
    fn tracing_events_at_warn_and_above_become_lines_with_their_fields_and_secrets_redacted() {
        let (log, captured) = Log::capture();
        let log = log.at(Level::Debug);
        let dispatch = tracing_core::Dispatch::new(Subscriber {
            log,
            max: LevelFilter::WARN,
        });
        tracing_core::dispatcher::with_default(&dispatch, || {
            tracing::info!(attempt = 2, "below the bar");
            tracing::warn!(target: "aws_config::ecs", token = "abc123", uri = %"http://x", "invalid auth token");
            tracing::error!(attempts = 3_u64, retryable = true, "gave up");
            let span = tracing::warn_span!("a span is not a line");
            let _entered = span.enter();
        });
        let lines = lines_of(&captured);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(lines[0]["level"], "WARN");
        assert_eq!(lines[0]["message"], "invalid auth token");
        assert_eq!(lines[0]["target"], "aws_config::ecs");
        assert_eq!(lines[0]["fields"]["token"], "[redacted]");
        assert_eq!(lines[0]["fields"]["uri"], "http://x");
        assert!(!captured.lock().expect("lines")[0].contains("abc123"));
        assert_eq!(lines[1]["level"], "ERROR");
        assert_eq!(lines[1]["fields"]["attempts"], 3);
        assert_eq!(lines[1]["fields"]["retryable"], true);
        // The common members, as on every line.
        assert!(lines[1]["service"].is_string());
        assert!(lines[1]["timestamp"].is_string());
    }

    #[test]
    fn log_records_at_warn_and_above_become_lines_and_the_rest_are_not_built() {
        let (log, captured) = Log::capture();
        let logger = Logger {
            log: log.at(Level::Debug),
            max: log::LevelFilter::Warn,
        };
        let record = |level, message: fmt::Arguments<'_>| {
            log::Log::log(
                &logger,
                &log::Record::builder()
                    .level(level)
                    .target("tokio_postgres::connection")
                    .args(message)
                    .build(),
            );
        };
        record(log::Level::Info, format_args!("NOTICE: skipping"));
        record(
            log::Level::Warn,
            format_args!("WARNING 25P01: no transaction"),
        );
        let lines = lines_of(&captured);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert_eq!(lines[0]["level"], "WARN");
        assert_eq!(lines[0]["message"], "WARNING 25P01: no transaction");
        assert_eq!(lines[0]["target"], "tokio_postgres::connection");
        assert!(lines[0].get("fields").is_none());
    }

    #[test]
    fn credential_like_names_are_redacted_and_others_are_not() {
        for name in [
            "token",
            "auth_token",
            "secret_id",
            "password",
            "api_key",
            "Authorization",
        ] {
            assert!(redacted(name), "{name}");
        }
        for name in ["uri", "provider", "error", "attempts", "region"] {
            assert!(!redacted(name), "{name}");
        }
    }
}
