//! What a signature scheme is: [`Verify`] checks a delivery, [`Sign`] signs one as its sender
//! would, and [`Scheme`] is both; a provider crate reaches them through the prelude.

use http::HeaderMap;

use super::{Verified, reject, within_tolerance};
use crate::response::{Problem, Rejection};

/// A signature scheme configured with its secrets and tolerance.
///
/// A scheme says what its signature proves ([`authenticate`](Self::authenticate), with no
/// clock) and how fresh a signed timestamp must be ([`tolerance`](Self::tolerance));
/// [`verify`](Self::verify) puts the two together for a delivery as it arrives. A spilled
/// delivery is authenticated again when its drain applies it, hours later perhaps: the MAC
/// does not expire, and a replay of an event still in the ledger is answered as a duplicate.
pub trait Verify: Send + Sync {
    /// Checks the signature over the exact `body` bytes against the configured secrets, and
    /// nothing that depends on the time: a malformed or missing header, or a signature that
    /// matches no secret, is refused. Returns what the signed headers said, the signed
    /// timestamp included for a scheme that signs one.
    fn authenticate(&self, headers: &HeaderMap, body: &[u8]) -> Result<Verified, Rejection>;

    /// The most seconds a signed timestamp may be from the receiver's clock, either way. Only
    /// consulted for a scheme whose [`Verified::signed_at`] is set.
    fn tolerance(&self) -> u64;

    /// The headers (lower-case names) the scheme reads: a spilled delivery keeps those it
    /// arrived with, so that the drain can authenticate it again.
    fn signature_headers(&self) -> &[&'static str];

    /// Checks a delivery as it arrives: [`authenticate`](Self::authenticate), then the signed
    /// timestamp, if any, within [`tolerance`](Self::tolerance) of `now` (unix seconds). The
    /// signature is checked first, so a stale answer is only ever given to a genuine one.
    fn verify(&self, headers: &HeaderMap, body: &[u8], now: u64) -> Result<Verified, Rejection> {
        let verified = self.authenticate(headers, body)?;
        if let Some(signed_at) = verified.signed_at
            && !within_tolerance(signed_at, now, self.tolerance())
        {
            return Err(reject(
                Problem::StaleTimestamp,
                "signature timestamp is outside the tolerance window",
            ));
        }
        Ok(verified)
    }
}

/// A scheme that signs deliveries as their sender would, with its first configured secret: how
/// the local run, the test harness and the fuzzers sign what they send, through the same type
/// that verifies it. A scheme written in a provider crate of its own implements it too: its
/// tests sign through it, and the local run signs its samples through it by running the
/// crate's signer binary ([`signer_command`](crate::verify::signer_command)).
pub trait Sign {
    /// The headers (lower-case names, values) that sign `body` at `now` (unix seconds). `id`
    /// is the message id, for a scheme that signs one (Standard Webhooks); the others ignore
    /// it.
    fn sign(&self, body: &[u8], now: u64, id: &str) -> Vec<(String, String)>;

    /// [`Sign::sign`]'s headers added to `headers`, as a request would carry them (a pair
    /// that is not a valid header is left out, and then fails verification).
    fn sign_into(&self, headers: &mut HeaderMap, body: &[u8], now: u64, id: &str) {
        for (name, value) in self.sign(body, now, id) {
            if let (Ok(name), Ok(value)) = (
                http::HeaderName::from_bytes(name.as_bytes()),
                http::HeaderValue::from_str(&value),
            ) {
                headers.insert(name, value);
            }
        }
    }
}

/// A signature scheme as one value: what verifies a delivery also signs one, so a provider's
/// tests, the local run and the fuzzers sign through the very type the receiver checks with.
/// Every type that implements [`Verify`] and [`Sign`] is one; [`crate::prelude::Provider::verifier`]
/// returns it.
pub trait Scheme: Verify + Sign {}

impl<T: Verify + Sign> Scheme for T {}

/// Splits a comma-separated secrets variable into its non-empty, trimmed entries.
pub fn split_secrets(raw: &str) -> Vec<&str> {
    raw.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect()
}
