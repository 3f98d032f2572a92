//! Signature verification: pure functions of the raw body bytes, the headers and an injected
//! clock. Nothing here parses the body, logs, or touches the database.

pub mod body_hmac;
#[cfg(test)]
mod proptests;
pub(crate) mod scheme;
pub mod signer_command;
pub mod standard_webhooks;
pub mod timestamp_v1;

use hmac::{Hmac, KeyInit, Mac};
/// The headers a scheme reads, as [`Verify`] and [`signature_header`] take them.
pub use http::HeaderMap;
use sha2::Sha256;

pub(crate) use self::scheme::{Scheme, Sign, Verify};
pub use crate::headers::{HeaderFault, MAX_HEADER_LEN, one_header};
use crate::ids::EventId;
use crate::response::{Problem, Rejection};

/// At most this many signature candidates are compared per key (a rotation needs two).
pub const MAX_SIGNATURES: usize = 8;

/// What a successful verification learned from the signed headers. It grows with the schemes
/// (`signed_at` came with the drain's check), so outside this crate it is built with
/// [`Verified::at`] (a scheme that signs a time), `Verified::default()` (one that signs the
/// body alone) and [`Verified::with_message_id`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Verified {
    /// The sender's message id when the scheme signs one (Standard Webhooks' `webhook-id`).
    pub message_id: Option<EventId>,
    /// The unix time the signature covers, when the scheme signs one: what
    /// [`Verify::verify`] holds to the scheme's tolerance.
    pub signed_at: Option<u64>,
}

impl Verified {
    /// A signature that covers the unix time `signed_at`, held to the scheme's tolerance.
    pub const fn at(signed_at: u64) -> Self {
        Self {
            message_id: None,
            signed_at: Some(signed_at),
        }
    }

    /// The same, with the message id the signature covers.
    #[must_use]
    pub fn with_message_id(self, message_id: EventId) -> Self {
        Self {
            message_id: Some(message_id),
            ..self
        }
    }
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

    /// The HMAC-SHA256 of the concatenated `parts` under the first configured key: what a
    /// [`Sign`] implementation signs with.
    pub fn first_tag(&self, parts: &[&[u8]]) -> [u8; 32] {
        let key = self.0.first().map_or(&[][..], Vec::as_slice);
        keyed_mac(key, parts).finalize().into_bytes().into()
    }

    /// Ok when, for some key, the HMAC-SHA256 of the concatenated `parts` equals one of the
    /// `candidates`; every scheme's `signature-mismatch` otherwise. The message is hashed once
    /// per key; each candidate is then a constant-time compare. At most [`MAX_SIGNATURES`]
    /// candidates are looked at.
    pub fn check(&self, parts: &[&[u8]], candidates: &[[u8; 32]]) -> Result<(), Rejection> {
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

/// [`one_header`] for a signature header: a fault is a malformed signature.
pub fn signature_header<'a>(
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

/// Decodes exactly 64 lower-case hex digits (an HMAC-SHA256 tag as most schemes write it);
/// `None` for anything else, which a scheme treats as a candidate that cannot match.
pub fn decode_lower_hex(s: &str) -> Option<[u8; 32]> {
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

#[cfg(test)]
mod sign_tests {
    use super::body_hmac::{BodyHmac, Encoding};
    use super::standard_webhooks::StandardWebhooks;
    use super::timestamp_v1::TimestampV1;
    use super::*;

    trait Both: Verify + Sign {}
    impl<T: Verify + Sign> Both for T {}
    type Build = fn(&[&str]) -> Box<dyn Both>;

    #[test]
    fn every_scheme_verifies_what_it_signs_and_nothing_else() {
        let schemes: [(&str, Build); 4] = [
            ("timestamp-v1", |s| {
                Box::new(TimestampV1::new("stripe-signature", s, 300).expect("keys"))
            }),
            ("standard-webhooks", |s| {
                Box::new(StandardWebhooks::new(s, 300).expect("keys"))
            }),
            ("body-hmac hex", |s| {
                Box::new(BodyHmac::github(s).expect("keys"))
            }),
            ("body-hmac base64", |s| {
                Box::new(
                    BodyHmac::new("x-shopify-hmac-sha256", "", Encoding::Base64, s).expect("keys"),
                )
            }),
        ];
        let now = 1_700_000_000;
        let body = br#"{"id":"evt_1"}"#;
        for (name, build) in schemes {
            // Keys valid for every scheme (Standard Webhooks wants base64).
            let (first, second) = ("whsec_c2VjcmV0LW9uZQ==", "whsec_c2VjcmV0LXR3bw==");
            let signer = build(&[first]);
            let mut headers = HeaderMap::new();
            for (header, value) in signer.sign(body, now, "msg_1") {
                let header = http::HeaderName::from_bytes(header.as_bytes()).expect("name");
                headers.insert(header, value.parse().expect("value"));
            }
            let during_rotation = build(&[second, first]);
            assert!(
                during_rotation.verify(&headers, body, now).is_ok(),
                "{name}"
            );
            let other = build(&[second]);
            assert_eq!(
                other.verify(&headers, body, now).map_err(|r| r.problem),
                Err(Problem::SignatureMismatch),
                "{name}"
            );
            assert_eq!(
                during_rotation
                    .verify(&headers, b"{}", now)
                    .map_err(|r| r.problem),
                Err(Problem::SignatureMismatch),
                "{name}"
            );
        }
    }
}
