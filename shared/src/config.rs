//! Configuration read from the environment at cold start. A bad value is a startup error that
//! names the variable and never echoes its value (it may be a secret).

use std::fmt;

/// A configuration problem, reported once at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "configuration error: {}", self.0)
    }
}

impl std::error::Error for ConfigError {}

/// The value of a variable that must be set and non-empty.
pub fn required(name: &str) -> Result<String, ConfigError> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => Ok(v),
        _ => Err(ConfigError(format!("{name} must be set"))),
    }
}

/// An optional variable; unset and empty are the same.
pub fn optional(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// A non-negative integer variable with a default.
pub fn number(name: &str, default: u64) -> Result<u64, ConfigError> {
    match optional(name) {
        None => Ok(default),
        Some(v) => v
            .trim()
            .parse()
            .map_err(|_| ConfigError(format!("{name} must be a non-negative integer"))),
    }
}

/// `WEBHOOK_TOLERANCE_SECONDS`: how far a signature timestamp may be from now (default 300).
pub fn tolerance_seconds() -> Result<u64, ConfigError> {
    number("WEBHOOK_TOLERANCE_SECONDS", 300)
}
