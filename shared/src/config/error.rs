//! The one error type of configuration, [`ConfigError`](crate::prelude::ConfigError).

use std::fmt;
use std::sync::Arc;

/// A configuration problem, reported once at start-up: what is wrong, in words that name the
/// variable and never its value, and the error that caused it when there is one.
#[derive(Debug, Clone)]
pub struct ConfigError {
    message: String,
    source: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

impl ConfigError {
    /// A problem with no underlying error.
    pub fn new(message: String) -> Self {
        Self {
            message,
            source: None,
        }
    }

    /// A problem caused by `source` (kept, for [`std::error::Error::source`]).
    pub fn caused(message: String, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self {
            message,
            source: Some(Arc::new(source)),
        }
    }

    /// What is wrong.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// Two configuration errors are the same problem when they say the same thing.
impl PartialEq for ConfigError {
    fn eq(&self, other: &Self) -> bool {
        self.message == other.message
    }
}

impl Eq for ConfigError {}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "configuration error: {}", self.message)
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}
