//! Signature verification: pure functions of the raw body bytes, the headers and an injected
//! clock. Nothing here parses the body, logs, or touches the database.

#[cfg(test)]
mod proptests;
pub mod standard_webhooks;
pub mod timestamp_v1;

use hmac::{Hmac, KeyInit, Mac};
use http::HeaderMap;
use sha2::Sha256;

use crate::response::{Problem, Rejection};

/// What a successful verification learned from the signed headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The sender's message id when the scheme signs one (Standard Webhooks' `webhook-id`).
    pub message_id: Option<String>,
}

/// A signature scheme configured with its secrets and tolerance.
pub trait Verify: Send + Sync {
    /// Checks the signature over the exact `body` bytes. `now` is unix seconds.
    fn verify(&self, headers: &HeaderMap, body: &[u8], now: u64) -> Result<Verified, Rejection>;
}

/// One or more HMAC keys, tried in order (several during a secret rotation).
///
/// The key bytes never appear in `Debug` output.
#[derive(Clone)]
pub struct SigningKeys(Vec<Vec<u8>>);

impl SigningKeys {
    /// Wraps already-decoded keys. Returns `None` when there are none.
    pub fn new(keys: Vec<Vec<u8>>) -> Option<Self> {
        (!keys.is_empty() && keys.iter().all(|k| !k.is_empty())).then_some(Self(keys))
    }

    fn iter(&self) -> impl Iterator<Item = &[u8]> {
        self.0.iter().map(Vec::as_slice)
    }
}

impl std::fmt::Debug for SigningKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SigningKeys({} redacted)", self.0.len())
    }
}

/// Splits a comma-separated secrets variable into its non-empty, trimmed entries.
pub fn split_secrets(raw: &str) -> Vec<&str> {
    raw.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect()
}

pub(crate) type HmacSha256 = Hmac<Sha256>;

/// HMAC-SHA256 of the concatenated parts, ready to be finalised or compared.
pub(crate) fn keyed_mac(key: &[u8], parts: &[&[u8]]) -> HmacSha256 {
    // HMAC takes keys of any length, so this cannot fail; an empty MAC state would only make
    // every comparison fail, which is the safe direction.
    let mut mac = <HmacSha256 as KeyInit>::new_from_slice(key)
        .unwrap_or_else(|_| <HmacSha256 as KeyInit>::new(&Default::default()));
    for part in parts {
        mac.update(part);
    }
    mac
}

/// True when `timestamp` is within `tolerance` seconds of `now`, in either direction.
pub(crate) fn within_tolerance(timestamp: u64, now: u64, tolerance: u64) -> bool {
    timestamp.abs_diff(now) <= tolerance
}

pub(crate) fn reject(problem: Problem, detail: &'static str) -> Rejection {
    Rejection::new(problem, detail)
}
