//! What a provider may ask of its sender's API before an event's claim
//! ([`Provider::complete`](crate::prelude::Provider::complete)): a GET of a path under the configured
//! base URL, with the configured key, within the configured time. Used by an event that carries
//! only a reference to its data (Stripe's thin events). It runs before the claim's transaction
//! opens, so no database connection waits on the network, and its failure is a failure of the
//! delivery (500, or a record received again), never a claim.
//!
//! A function has one when its registry entry names the key's variable (`api_key_var`, with
//! `api_base_var` and its default `api_base`) and that variable, or `<var>_ARN`, is set. The
//! HTTPS client exists only with the shared crate's `sender-api` feature, which such a provider
//! crate turns on; it brings no database connection.

use std::time::Duration;

use crate::config::{self, ConfigError};

/// The variable bounding one GET, in milliseconds (default 3000): within the function's
/// timeout beside the database's deadline and a spill.
pub const TIMEOUT_VAR: &str = "SENDER_API_TIMEOUT_MS";

/// The bound on one GET, from [`TIMEOUT_VAR`] (milliseconds, default 3000, more than 0).
pub fn timeout_from_env() -> Result<Duration, ConfigError> {
    match config::number(TIMEOUT_VAR, 3000)? {
        0 => Err(ConfigError::new(format!(
            "{TIMEOUT_VAR} must be greater than 0"
        ))),
        ms => Ok(Duration::from_millis(ms)),
    }
}

/// A GET answered: its status and body.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The HTTP status.
    pub status: u16,
    /// The body, read whole.
    pub body: bytes::Bytes,
}

/// Why an event could not be completed, in our own words (never a key or a body): the
/// delivery fails, and its retry tries again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incomplete(pub String);

/// The sender's API as a provider sees it before a claim.
#[derive(Debug)]
pub struct SenderApi {
    #[cfg(feature = "sender-api")]
    api: crate::sender_api::Api,
    #[cfg(feature = "sender-api")]
    key: crate::sender_api::ApiKey,
    timeout: Duration,
}

impl SenderApi {
    /// `api` with `key`, each GET bounded by `timeout`: a function that already reaches the
    /// sender's API (a recover function) completes through the same client.
    #[cfg(feature = "sender-api")]
    pub fn new(api: crate::sender_api::Api, key: &str, timeout: Duration) -> Self {
        Self {
            api,
            key: crate::sender_api::ApiKey::new(key),
            timeout,
        }
    }

    /// From the environment, for a registry entry that names the variables: `None` when the
    /// entry names none or the key's variable (and `<var>_ARN`) is unset.
    pub(crate) async fn from_env(
        entry: &crate::registry::Entry,
    ) -> Result<Option<Self>, ConfigError> {
        let Some(api) = entry.api else {
            return Ok(None);
        };
        if config::optional(api.key_var).is_none()
            && config::optional(&format!("{}_ARN", api.key_var)).is_none()
        {
            return Ok(None);
        }
        let timeout = timeout_from_env()?;
        #[cfg(feature = "sender-api")]
        {
            let key = crate::secrets::WebhookSecrets::from_env(api.key_var)
                .await?
                .read()
                .await?;
            let base = config::optional(api.base_var).unwrap_or_else(|| api.base.to_owned());
            let sender = crate::sender_api::Api::new(&base)
                .map_err(|why| ConfigError::new(format!("{}: {why}", api.base_var)))?;
            Ok(Some(Self::new(sender, &key, timeout)))
        }
        #[cfg(not(feature = "sender-api"))]
        {
            let _ = timeout;
            Err(ConfigError::new(format!(
                "{} is set, but this function was built without claimonce's sender-api feature",
                api.key_var
            )))
        }
    }

    /// How long one GET may take.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// GETs `path` (it starts with `/` and may carry a query) with `headers` beside the key
    /// (a sender's account context, say: `("stripe-context", "acct_…")`), within the configured
    /// time. Any status is the caller's to judge; no answer (unreachable, too slow, rate
    /// limited), or a header that cannot be sent, is an error.
    pub async fn get(&self, path: &str, headers: &[(&str, &str)]) -> Result<Fetched, Incomplete> {
        if !path.starts_with('/') {
            return Err(Incomplete("a path under the API starts with /".into()));
        }
        #[cfg(feature = "sender-api")]
        {
            let mut sent_headers = vec![self.key.bearer().map_err(Incomplete)?];
            for (name, value) in headers {
                let name = http::HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| Incomplete(format!("{name:?} is not a header name")))?;
                let value = http::HeaderValue::from_str(value)
                    .map_err(|_| Incomplete(format!("the {name} header's value cannot be sent")))?;
                sent_headers.push((name, value));
            }
            let headers = sent_headers;
            let sent = self.api.send(http::Method::GET, path, &headers, None);
            let answer = tokio::time::timeout(self.timeout, sent)
                .await
                .map_err(|_| {
                    Incomplete(format!(
                        "the sender's API gave no answer within {} ms",
                        self.timeout.as_millis()
                    ))
                })?
                .map_err(|e| Incomplete(format!("the sender's API: {e}")))?;
            Ok(Fetched {
                status: answer.status.as_u16(),
                body: answer.body,
            })
        }
        #[cfg(not(feature = "sender-api"))]
        {
            let _ = (self.timeout, headers);
            Err(Incomplete(
                "built without claimonce's sender-api feature".into(),
            ))
        }
    }
}
