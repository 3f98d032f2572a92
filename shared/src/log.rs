//! Structured logging: one JSON object per line on stdout, which CloudWatch Logs indexes as is.
//! Callers pass only fields that are safe to keep: never a secret, a signature or a body.

use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::Map;

use crate::config::ConfigError;

type Sink = Arc<dyn Fn(&str) + Send + Sync>;

/// Where log lines go: stdout in a function, memory in a test.
#[derive(Clone)]
pub struct Log {
    sink: Sink,
}

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Log")
    }
}

/// Lines kept by [`Log::capture`].
pub type Captured = Arc<Mutex<Vec<String>>>;

impl Log {
    /// Writes each line to stdout.
    pub fn stdout() -> Self {
        Self {
            sink: Arc::new(|line| println!("{line}")),
        }
    }

    /// Builds every line and drops it: for benchmarks, which measure the work of logging but
    /// not the terminal.
    pub fn discard() -> Self {
        Self {
            sink: Arc::new(|_| {}),
        }
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
        (Self { sink }, lines)
    }

    /// Logs a configuration error as one line (it names the variable, never the value) and
    /// hands the result back unchanged, so a function's `main` can stop before its first
    /// invocation with the reason in the logs.
    pub fn config<T>(&self, built: Result<T, ConfigError>) -> Result<T, ConfigError> {
        if let Err(e) = &built {
            self.write("error", &e.to_string(), Map::new());
        }
        built
    }

    /// Writes one line with `level`, `message` and the given fields: a JSON map, or a struct
    /// that serialises as one (the hot path's typed lines).
    pub fn write(&self, level: &str, message: &str, fields: impl Serialize) {
        #[derive(Serialize)]
        struct Line<'a, F> {
            level: &'a str,
            message: &'a str,
            #[serde(flatten)]
            fields: F,
        }
        if let Ok(line) = serde_json::to_string(&Line {
            level,
            message,
            fields,
        }) {
            (self.sink)(&line);
        }
    }
}
