//! Why a connection or a delivery failed. Each error keeps its cause (`source()`), and its
//! message never carries a password or event data.

use crate::auth::AuthError;
use crate::pg_error::{io_error, statement_summary, tls_refused};

/// Why a connection could not be made.
#[derive(Debug)]
#[non_exhaustive]
pub enum ConnectError {
    /// The server refused, TLS verification failed, or authentication failed.
    Failed(tokio_postgres::Error),
    /// No credentials: an IAM token could not be made, or the secret could not be read.
    Credentials(AuthError),
    /// Nothing answered within the connect timeout.
    TimedOut,
}

impl ConnectError {
    /// True when the server refused the credentials (SQLSTATE class 28).
    pub(super) fn refused_credentials(&self) -> bool {
        matches!(self, ConnectError::Failed(e)
            if e.as_db_error().is_some_and(|db| db.code().code().starts_with("28")))
    }
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // tokio-postgres' messages name the failing step and its cause (for TLS, the
            // certificate problem), never the password.
            ConnectError::Failed(e) => {
                write!(f, "connect failed: {e}")?;
                let mut source = std::error::Error::source(e);
                while let Some(cause) = source {
                    write!(f, ": {cause}")?;
                    source = cause.source();
                }
                Ok(())
            }
            ConnectError::Credentials(e) => write!(f, "connect failed: {e}"),
            ConnectError::TimedOut => f.write_str("connect timed out"),
        }
    }
}

impl std::error::Error for ConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConnectError::Failed(e) => Some(e),
            ConnectError::Credentials(e) => Some(e),
            ConnectError::TimedOut => None,
        }
    }
}

/// Why a delivery's statement did not complete.
#[derive(Debug)]
#[non_exhaustive]
pub enum DeliveryError {
    /// No connection could be made.
    Connect(ConnectError),
    /// The statement failed: the server rolled it back, or the connection was lost after it
    /// was sent and a retry was not possible.
    Failed(tokio_postgres::Error),
    /// The delivery did not finish before its deadline. The statement, if it was sent, was
    /// cancelled on the server and the connection closed; whether it had committed first is
    /// not known here (a retry answers duplicate if it had).
    TimedOut,
    /// A Rust effect failed on its own terms (its reason, or a statement its handle refused);
    /// the transaction rolled back.
    Effect(crate::effect::EffectError),
}

impl DeliveryError {
    /// A short, data-free description for logs: a category and, for database errors, the
    /// SQLSTATE and constraint name (never the server's message, which can quote values).
    pub fn summary(&self) -> String {
        match self {
            DeliveryError::Connect(e) => e.to_string(),
            DeliveryError::TimedOut => "delivery timed out".into(),
            DeliveryError::Failed(e) => statement_summary(e),
            DeliveryError::Effect(e) => e.to_string(),
        }
    }
}

impl DeliveryError {
    /// Why the database could not take the delivery, when that is the reason it failed: the
    /// cases in which a receiver with a spill queue keeps the delivery there instead of
    /// answering 500. `None` for a failure of the delivery itself (a constraint, an effect's
    /// error, a refused login or certificate), which stays a 500.
    ///
    /// | name | what | how it shows |
    /// | --- | --- | --- |
    /// | `connect-timeout` | nothing answered the connect in time | [`ConnectError::TimedOut`] |
    /// | `connect-failed` | refused, reset, unreachable, name not found | an I/O error while connecting, but not a TLS refusal (a certificate not trusted, a name it does not carry) |
    /// | `too-many-connections` | the server or proxy has no connection to give | SQLSTATE 53300 |
    /// | `server-unavailable` | the server is starting, shutting down or in recovery | SQLSTATE 57P01, 57P02, 57P03 |
    /// | `connection-lost` | the connection closed or failed under the statement | SQLSTATE class 08, a closed connection, an I/O error |
    /// | `statement-timeout` | the server's `statement_timeout` ended the statement | SQLSTATE 57014 |
    /// | `deadline` | `DB_DELIVERY_TIMEOUT_MS` passed before or after the statement was sent | [`DeliveryError::TimedOut`] |
    pub fn unavailable(&self) -> Option<&'static str> {
        let by_code = unavailable_by_code;
        match self {
            DeliveryError::TimedOut => Some("deadline"),
            DeliveryError::Connect(ConnectError::TimedOut) => Some("connect-timeout"),
            DeliveryError::Connect(ConnectError::Failed(e)) => match e.as_db_error() {
                Some(db) => by_code(db.code().code()),
                // A certificate refused is a configuration to fix, never an outage to wait out.
                None if tls_refused(e) => None,
                None if io_error(e) || e.is_closed() => Some("connect-failed"),
                None => None,
            },
            DeliveryError::Connect(ConnectError::Credentials(_)) => None,
            DeliveryError::Failed(e) => match e.as_db_error() {
                Some(db) => by_code(db.code().code()),
                None if e.is_closed() || io_error(e) => Some("connection-lost"),
                None => None,
            },
            DeliveryError::Effect(_) => None,
        }
    }
}

/// The reason a server's SQLSTATE names for the database being unavailable (the table of
/// [`DeliveryError::unavailable`]), or `None` for an error of the delivery's own.
fn unavailable_by_code(code: &str) -> Option<&'static str> {
    match code {
        "53300" => Some("too-many-connections"),
        "57P01" | "57P02" | "57P03" => Some("server-unavailable"),
        "57014" => Some("statement-timeout"),
        c if c.starts_with("08") => Some("connection-lost"),
        _ => None,
    }
}

impl std::fmt::Display for DeliveryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.summary())
    }
}

impl std::error::Error for DeliveryError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DeliveryError::Connect(e) => Some(e),
            DeliveryError::Failed(e) => Some(e),
            DeliveryError::Effect(e) => Some(e),
            DeliveryError::TimedOut => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;
    use std::str::FromStr;

    use super::*;

    /// A real driver error, made without a server: a connection string it cannot parse.
    fn driver_error() -> tokio_postgres::Error {
        tokio_postgres::Config::from_str("host=h port=notaport").expect_err("bad port")
    }

    /// True when `source` is the very error `inner`, not merely one of its type.
    fn is<T: std::error::Error + 'static>(
        source: Option<&(dyn std::error::Error + 'static)>,
        inner: &T,
    ) -> bool {
        source
            .and_then(|s| s.downcast_ref::<T>())
            .is_some_and(|s| std::ptr::eq(s, inner))
    }

    /// What waiting heals is queued; what it cannot is a 500: a refused password (28P01), a
    /// permission (42501), a constraint or an effect's own exception.
    #[test]
    fn only_what_waiting_heals_is_unavailable() {
        for (code, reason) in [
            ("53300", "too-many-connections"),
            ("57P01", "server-unavailable"),
            ("57P02", "server-unavailable"),
            ("57P03", "server-unavailable"),
            ("57014", "statement-timeout"),
            ("08006", "connection-lost"),
            ("08001", "connection-lost"),
        ] {
            assert_eq!(unavailable_by_code(code), Some(reason), "{code}");
        }
        for code in [
            "28P01", "28000", "42501", "23505", "P0001", "22003", "57P04", "53200",
        ] {
            assert_eq!(unavailable_by_code(code), None, "{code}");
        }
        assert_eq!(DeliveryError::TimedOut.unavailable(), Some("deadline"));
        assert_eq!(
            DeliveryError::Connect(ConnectError::TimedOut).unavailable(),
            Some("connect-timeout")
        );
        assert_eq!(
            DeliveryError::Connect(ConnectError::Credentials(AuthError::new("x".into())))
                .unavailable(),
            None
        );
        // A driver error with neither a server's code nor a lost connection: a 500.
        assert_eq!(DeliveryError::Failed(driver_error()).unavailable(), None);
    }

    #[test]
    fn a_connect_error_keeps_its_cause() {
        let failed = ConnectError::Failed(driver_error());
        let ConnectError::Failed(inner) = &failed else {
            unreachable!()
        };
        assert!(is(failed.source(), inner), "{failed:?}");

        let credentials = ConnectError::Credentials(AuthError::new("no token".into()));
        let ConnectError::Credentials(inner) = &credentials else {
            unreachable!()
        };
        assert!(is(credentials.source(), inner), "{credentials:?}");

        assert!(ConnectError::TimedOut.source().is_none());
    }

    #[test]
    fn a_delivery_error_keeps_its_cause() {
        let connect = DeliveryError::Connect(ConnectError::Credentials(AuthError::new("x".into())));
        let DeliveryError::Connect(inner) = &connect else {
            unreachable!()
        };
        assert!(is(connect.source(), inner), "{connect:?}");
        // And the cause's own cause, one level further down.
        let ConnectError::Credentials(auth) = inner else {
            unreachable!()
        };
        assert!(is(connect.source().and_then(|s| s.source()), auth));

        let failed = DeliveryError::Failed(driver_error());
        let DeliveryError::Failed(inner) = &failed else {
            unreachable!()
        };
        assert!(is(failed.source(), inner), "{failed:?}");

        assert!(DeliveryError::TimedOut.source().is_none());
    }
}
