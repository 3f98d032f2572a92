//! Signature verification: pure functions of the raw body bytes, the headers and an injected
//! clock. Nothing here parses the body, logs, or touches the database.

pub mod hub_signature;
#[cfg(test)]
mod proptests;
pub mod standard_webhooks;
pub mod timestamp_v1;

use hmac::{Hmac, KeyInit, Mac};
use http::HeaderMap;
use sha2::Sha256;

use crate::provider::EventId;
use crate::response::{Problem, Rejection};

/// Longest header value any scheme reads. Real signature headers carry a timestamp and two or
/// three signatures; a longer one is malformed, and refusing it bounds the work an attacker
/// can ask for.
pub const MAX_HEADER_LEN: usize = 4096;
/// At most this many signature candidates are compared per key (a rotation needs two).
pub const MAX_SIGNATURES: usize = 8;

/// What a successful verification learned from the signed headers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Verified {
    /// The sender's message id when the scheme signs one (Standard Webhooks' `webhook-id`).
    pub message_id: Option<EventId>,
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

    /// Ok when, for some key, the HMAC-SHA256 of the concatenated `parts` equals one of the
    /// `candidates`; every scheme's `signature-mismatch` otherwise. The message is hashed once
    /// per key; each candidate is then a constant-time compare. At most [`MAX_SIGNATURES`]
    /// candidates are looked at.
    pub(crate) fn check(&self, parts: &[&[u8]], candidates: &[[u8; 32]]) -> Result<(), Rejection> {
        let matched = self.0.iter().any(|key| {
            let mac = keyed_mac(key, parts);
            candidates
                .iter()
                .take(MAX_SIGNATURES)
                .any(|sig| mac.clone().verify_slice(sig).is_ok())
        });
        if !matched {
            return Err(reject(
                Problem::SignatureMismatch,
                "no signature matches any configured secret",
            ));
        }
        Ok(())
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

/// Why a header could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderFault {
    /// The header appears more than once.
    Repeated,
    /// Its value is not visible ASCII.
    NotAscii,
    /// Its value is longer than [`MAX_HEADER_LEN`].
    TooLong,
}

/// The one value of header `name`, trimmed: `Ok(None)` when absent, a [`HeaderFault`] when it
/// appears more than once, is not ASCII or is longer than [`MAX_HEADER_LEN`]. Every scheme and
/// every unsigned header a provider reads goes through this one check.
pub fn one_header<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, HeaderFault> {
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(HeaderFault::Repeated);
    }
    if value.len() > MAX_HEADER_LEN {
        return Err(HeaderFault::TooLong);
    }
    value
        .to_str()
        .map(|v| Some(v.trim()))
        .map_err(|_| HeaderFault::NotAscii)
}

/// [`one_header`] for a signature header: a fault is a malformed signature.
pub(crate) fn signature_header<'a>(
    headers: &'a HeaderMap,
    name: &str,
) -> Result<Option<&'a str>, Rejection> {
    one_header(headers, name).map_err(|fault| {
        reject(
            Problem::MalformedSignature,
            match fault {
                HeaderFault::Repeated => "a signature header appears more than once",
                HeaderFault::NotAscii => "a signature header is not ASCII",
                HeaderFault::TooLong => "a signature header is too long",
            },
        )
    })
}

/// Decodes exactly 64 lower-case hex digits.
pub(crate) fn decode_lower_hex(s: &str) -> Option<[u8; 32]> {
    fn nibble(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        }
    }
    let bytes = s.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (slot, pair) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        let [hi, lo] = pair else { return None };
        *slot = (nibble(*hi)? << 4) | nibble(*lo)?;
    }
    Some(out)
}

/// Lower-case hex of `bytes`.
pub fn lower_hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut out, byte| {
            use std::fmt::Write;
            let _ = write!(out, "{byte:02x}");
            out
        })
}
