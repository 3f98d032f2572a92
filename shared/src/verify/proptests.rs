//! Property tests for both signature schemes: a valid signature over any body, secret and
//! timestamp verifies, and any single change to what was signed is refused.
//!
//! The fixed vectors in each scheme's own tests pin the exact bytes; these pin the shape of the
//! check: nothing the sender signed can be altered, one edit at a time, without the verifier
//! noticing.

use http::{HeaderMap, HeaderName, HeaderValue};
use proptest::prelude::*;
use proptest::sample::Index;

use super::standard_webhooks::{self, StandardWebhooks};
use super::timestamp_v1::{self, TimestampV1};
use super::{Verified, Verify};
use crate::response::{Problem, Rejection};

const TOLERANCE: u64 = 300;
const CASES: u32 = 256;
const HEADER: &str = "x-signature";

/// A signing situation: the timestamp on the signature and a clock within tolerance of it.
#[derive(Debug, Clone)]
struct Clock {
    signed_at: u64,
    now: u64,
}

fn clock() -> impl Strategy<Value = Clock> {
    // Up to the year 2286; the lower bound keeps `now - TOLERANCE` from wrapping.
    (2 * TOLERANCE..10_000_000_000u64, -300i64..=300).prop_map(|(signed_at, skew)| Clock {
        signed_at,
        now: signed_at.saturating_add_signed(skew),
    })
}

/// Another timestamp that is still within tolerance of `now` but is not `signed_at`: the
/// tolerance check alone would let it through, so only the signature can refuse it.
fn shifted(clock: &Clock, pick: Index) -> u64 {
    let low = clock.now - TOLERANCE;
    let candidate = low + pick.index(2 * TOLERANCE as usize) as u64;
    if candidate >= clock.signed_at {
        candidate + 1
    } else {
        candidate
    }
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..512)
}

/// Stripe-style secrets: printable ASCII, short and (past HMAC's 64-byte block) long.
fn printable_secret() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::char::range('!', '~'), 1..100).prop_map(String::from_iter)
}

/// Message ids: what Svix and Standard Webhooks senders use, without the whitespace the
/// verifier trims from header values.
fn message_id() -> impl Strategy<Value = String> {
    let chars = prop::sample::select(
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"
            .chars()
            .collect::<Vec<_>>(),
    );
    prop::collection::vec(chars, 1..64).prop_map(String::from_iter)
}

/// One edit to a byte string.
#[derive(Debug, Clone)]
enum Edit {
    /// XOR the byte at a position with a non-zero mask.
    Flip(Index, u8),
    /// Insert a byte at a position (the end included).
    Insert(Index, u8),
    /// Delete the byte at a position.
    Delete(Index),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<Index>(), 1..=255u8).prop_map(|(at, mask)| Edit::Flip(at, mask)),
        (any::<Index>(), any::<u8>()).prop_map(|(at, byte)| Edit::Insert(at, byte)),
        any::<Index>().prop_map(Edit::Delete),
    ]
}

/// Applies the edit; `None` when it cannot apply (flipping or deleting in an empty body).
fn edited(bytes: &[u8], edit: &Edit) -> Option<Vec<u8>> {
    let mut out = bytes.to_vec();
    match edit {
        Edit::Flip(at, mask) if !out.is_empty() => out[at.index(bytes.len())] ^= mask,
        Edit::Insert(at, byte) => out.insert(at.index(bytes.len() + 1), *byte),
        Edit::Delete(at) if !out.is_empty() => {
            out.remove(at.index(bytes.len()));
        }
        _ => return None,
    }
    Some(out)
}

/// Replaces one character of `s` with a different one a header value may carry (visible
/// ASCII or space).
fn with_char_changed(s: &str, at: Index, replacement: char) -> String {
    let mut chars: Vec<char> = s.chars().collect();
    let i = at.index(chars.len());
    chars[i] = if chars[i] == replacement {
        // Deterministic and still in range: step to the neighbour.
        if replacement == '~' {
            ' '
        } else {
            (replacement as u8 + 1) as char
        }
    } else {
        replacement
    };
    chars.into_iter().collect()
}

fn header_char() -> impl Strategy<Value = char> {
    prop::char::range(' ', '~')
}

fn problem(result: Result<Verified, Rejection>) -> Option<Problem> {
    result.err().map(|r| r.problem)
}

// --- t=<unix>,v1=<hex> (Stripe) ---------------------------------------------------------------

fn stripe_headers(value: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(HEADER, HeaderValue::from_str(value).expect("visible ASCII"));
    headers
}

fn stripe_verifier(secret: &str) -> TimestampV1 {
    TimestampV1::new(HEADER, &[secret], TOLERANCE).expect("non-empty secret")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn timestamp_v1_valid_signature_verifies(
        secret in printable_secret(),
        body in body(),
        clock in clock(),
    ) {
        let sig = timestamp_v1::sign(&secret, clock.signed_at, &body);
        let headers = stripe_headers(&format!("t={},v1={sig}", clock.signed_at));
        prop_assert_eq!(
            stripe_verifier(&secret).verify(&headers, &body, clock.now),
            Ok(Verified { message_id: None, signed_at: Some(clock.signed_at) })
        );
    }

    #[test]
    fn timestamp_v1_body_edit_is_refused(
        secret in printable_secret(),
        body in body(),
        clock in clock(),
        edit in edit(),
    ) {
        let sig = timestamp_v1::sign(&secret, clock.signed_at, &body);
        let headers = stripe_headers(&format!("t={},v1={sig}", clock.signed_at));
        let Some(tampered) = edited(&body, &edit) else { return Ok(()) };
        prop_assert_eq!(
            problem(stripe_verifier(&secret).verify(&headers, &tampered, clock.now)),
            Some(Problem::SignatureMismatch)
        );
    }

    #[test]
    fn timestamp_v1_signature_edit_is_refused(
        secret in printable_secret(),
        body in body(),
        clock in clock(),
        at in any::<Index>(),
        replacement in header_char(),
    ) {
        // The whole `v1=<hex>` entry is fair game: a changed digit is another signature, a
        // changed `v1=` or a non-hex character leaves no usable v1 at all.
        let entry = format!("v1={}", timestamp_v1::sign(&secret, clock.signed_at, &body));
        let entry = with_char_changed(&entry, at, replacement);
        let headers = stripe_headers(&format!("t={},{entry}", clock.signed_at));
        let got = problem(stripe_verifier(&secret).verify(&headers, &body, clock.now));
        prop_assert!(
            matches!(got, Some(Problem::SignatureMismatch | Problem::MalformedSignature)),
            "{got:?} for {entry}"
        );
    }

    #[test]
    fn timestamp_v1_shifted_timestamp_is_refused(
        secret in printable_secret(),
        body in body(),
        clock in clock(),
        pick in any::<Index>(),
    ) {
        let sig = timestamp_v1::sign(&secret, clock.signed_at, &body);
        let moved = shifted(&clock, pick);
        let headers = stripe_headers(&format!("t={moved},v1={sig}"));
        prop_assert_eq!(
            problem(stripe_verifier(&secret).verify(&headers, &body, clock.now)),
            Some(Problem::SignatureMismatch)
        );
    }

    #[test]
    fn timestamp_v1_other_secret_is_refused(
        secret in printable_secret(),
        body in body(),
        clock in clock(),
        at in any::<Index>(),
        replacement in prop::char::range('!', '~'),
    ) {
        // One character off: the closest another secret can be.
        let other = with_char_changed(&secret, at, replacement);
        prop_assume!(other != secret && !other.contains(' '));
        let sig = timestamp_v1::sign(&secret, clock.signed_at, &body);
        let headers = stripe_headers(&format!("t={},v1={sig}", clock.signed_at));
        prop_assert_eq!(
            problem(stripe_verifier(&other).verify(&headers, &body, clock.now)),
            Some(Problem::SignatureMismatch)
        );
    }
}

// --- Standard Webhooks (Resend, Svix) ---------------------------------------------------------

/// Decoded key bytes; Svix issues 24 to 32, anything from 1 to 64 is exercised.
fn key() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 1..=64)
}

fn whsec(key: &[u8]) -> String {
    use base64::Engine;
    format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(key)
    )
}

fn spelling() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["webhook", "svix"])
}

fn sw_headers(prefix: &str, id: &str, timestamp: &str, signature: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (name, value) in [
        ("id", id),
        ("timestamp", timestamp),
        ("signature", signature),
    ] {
        let name = HeaderName::try_from(format!("{prefix}-{name}")).expect("header name");
        headers.insert(name, HeaderValue::from_str(value).expect("visible ASCII"));
    }
    headers
}

fn sw_verifier(key: &[u8]) -> StandardWebhooks {
    StandardWebhooks::new(&[&whsec(key)], TOLERANCE).expect("valid secret")
}

fn sw_sign(key: &[u8], id: &str, timestamp: u64, body: &[u8]) -> String {
    standard_webhooks::sign(&whsec(key), id, timestamp, body).expect("valid secret")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn standard_webhooks_valid_signature_verifies(
        key in key(),
        id in message_id(),
        body in body(),
        clock in clock(),
        prefix in spelling(),
    ) {
        let sig = sw_sign(&key, &id, clock.signed_at, &body);
        let headers = sw_headers(prefix, &id, &clock.signed_at.to_string(), &sig);
        prop_assert_eq!(
            sw_verifier(&key).verify(&headers, &body, clock.now),
            Ok(Verified {
                message_id: Some(crate::ids::EventId::new(id).expect("a valid id")),
                signed_at: Some(clock.signed_at),
            })
        );
    }

    #[test]
    fn standard_webhooks_body_edit_is_refused(
        key in key(),
        id in message_id(),
        body in body(),
        clock in clock(),
        prefix in spelling(),
        edit in edit(),
    ) {
        let sig = sw_sign(&key, &id, clock.signed_at, &body);
        let headers = sw_headers(prefix, &id, &clock.signed_at.to_string(), &sig);
        let Some(tampered) = edited(&body, &edit) else { return Ok(()) };
        prop_assert_eq!(
            problem(sw_verifier(&key).verify(&headers, &tampered, clock.now)),
            Some(Problem::SignatureMismatch)
        );
    }

    #[test]
    fn standard_webhooks_signature_edit_is_refused(
        key in key(),
        id in message_id(),
        body in body(),
        clock in clock(),
        prefix in spelling(),
        at in any::<Index>(),
        replacement in header_char(),
    ) {
        // Any character of `v1,<base64>`: base64 is decoded strictly (canonical padding and
        // trailing bits), so no other spelling of the same digest exists to slip through.
        let sig = with_char_changed(&sw_sign(&key, &id, clock.signed_at, &body), at, replacement);
        let headers = sw_headers(prefix, &id, &clock.signed_at.to_string(), &sig);
        let got = problem(sw_verifier(&key).verify(&headers, &body, clock.now));
        prop_assert!(
            matches!(got, Some(Problem::SignatureMismatch | Problem::MalformedSignature)),
            "{got:?} for {sig}"
        );
    }

    #[test]
    fn standard_webhooks_shifted_timestamp_is_refused(
        key in key(),
        id in message_id(),
        body in body(),
        clock in clock(),
        prefix in spelling(),
        pick in any::<Index>(),
    ) {
        let sig = sw_sign(&key, &id, clock.signed_at, &body);
        let moved = shifted(&clock, pick);
        let headers = sw_headers(prefix, &id, &moved.to_string(), &sig);
        prop_assert_eq!(
            problem(sw_verifier(&key).verify(&headers, &body, clock.now)),
            Some(Problem::SignatureMismatch)
        );
    }

    #[test]
    fn standard_webhooks_other_message_id_is_refused(
        key in key(),
        id in message_id(),
        other in message_id(),
        body in body(),
        clock in clock(),
        prefix in spelling(),
    ) {
        prop_assume!(other != id);
        let sig = sw_sign(&key, &id, clock.signed_at, &body);
        let headers = sw_headers(prefix, &other, &clock.signed_at.to_string(), &sig);
        prop_assert_eq!(
            problem(sw_verifier(&key).verify(&headers, &body, clock.now)),
            Some(Problem::SignatureMismatch)
        );
    }

    #[test]
    fn standard_webhooks_other_secret_is_refused(
        key in key(),
        id in message_id(),
        body in body(),
        clock in clock(),
        prefix in spelling(),
        at in any::<Index>(),
        mask in 1..=255u8,
    ) {
        // One bit pattern off in one byte, same length: HMAC pads short keys with zeros, so a
        // key and the same key plus trailing zero bytes are the same HMAC key; changing a byte
        // in place is the closest genuinely different key.
        let mut other = key.clone();
        other[at.index(key.len())] ^= mask;
        let sig = sw_sign(&key, &id, clock.signed_at, &body);
        let headers = sw_headers(prefix, &id, &clock.signed_at.to_string(), &sig);
        prop_assert_eq!(
            problem(sw_verifier(&other).verify(&headers, &body, clock.now)),
            Some(Problem::SignatureMismatch)
        );
    }
}
