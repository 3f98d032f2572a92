//! Configuration read from the environment at cold start. A bad value is a startup error that
//! names the variable and never echoes its value (it may be a secret).

pub(crate) mod error;

pub(crate) use self::error::ConfigError;

/// The value of a variable that must be set and non-empty.
pub fn required(name: &str) -> Result<String, ConfigError> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => Ok(v),
        _ => Err(ConfigError::new(format!("{name} must be set"))),
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
            .map_err(|_| ConfigError::new(format!("{name} must be a non-negative integer"))),
    }
}

/// The largest `WEBHOOK_TOLERANCE_SECONDS` accepted: one hour. A signed request can be
/// replayed for as long as its timestamp is within the tolerance, so the tolerance must stay
/// far below the ledger's retention window (at least 31 days), or a replay could outlive its
/// claim and be applied again. The senders' own default is 300 s.
pub const MAX_TOLERANCE_SECONDS: u64 = 3600;

/// `WEBHOOK_TOLERANCE_SECONDS`: how far a signature timestamp may be from now (default 300,
/// at most [`MAX_TOLERANCE_SECONDS`]).
pub fn tolerance_seconds() -> Result<u64, ConfigError> {
    check_tolerance(number("WEBHOOK_TOLERANCE_SECONDS", 300)?)
}

/// Checks a tolerance against [`MAX_TOLERANCE_SECONDS`].
pub fn check_tolerance(seconds: u64) -> Result<u64, ConfigError> {
    if seconds > MAX_TOLERANCE_SECONDS {
        return Err(ConfigError::new(format!(
            "WEBHOOK_TOLERANCE_SECONDS must be at most {MAX_TOLERANCE_SECONDS}: a signature \
             accepted for longer could be replayed for longer"
        )));
    }
    Ok(seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caused_error_keeps_its_cause_and_compares_by_message() {
        let cause = std::io::Error::other("underneath");
        let error = ConfigError::caused("DB_SECRET_ARN: unreadable".into(), cause);
        let source = std::error::Error::source(&error).expect("kept");
        assert_eq!(
            source
                .downcast_ref::<std::io::Error>()
                .map(ToString::to_string),
            Some("underneath".to_owned())
        );
        assert_eq!(error, ConfigError::new("DB_SECRET_ARN: unreadable".into()));
        assert!(std::error::Error::source(&ConfigError::new("x".into())).is_none());
    }

    #[test]
    fn the_tolerance_stays_far_below_the_retention_window() {
        assert_eq!(check_tolerance(300), Ok(300));
        assert_eq!(check_tolerance(3600), Ok(3600));
        let refused = check_tolerance(86_400).expect_err("a day is too long");
        assert!(
            refused.message().contains("WEBHOOK_TOLERANCE_SECONDS"),
            "{refused}"
        );
    }
}
