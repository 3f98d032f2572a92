//! What leaves through the outbox as it arrived: a signed body the outbox can store and an
//! SQS message can carry, and the limits that decide it (a queue message's size, and the room
//! its attributes take).

use crate::response::{Problem, Rejection};

/// The function [`Effect::forward`](crate::prelude::Effect::forward) calls (migration V12): it inserts the signed body into the
/// outbox with the header that signed it, tagged with the claim's provider and event id.
pub const FORWARD_FUNCTION: &str = "claimonce_forward_v2";

/// The largest message an SQS queue takes, body and attributes together (1 MiB since AWS
/// raised the limit in August 2025; the template sets the outbox queue's `MaximumMessageSize`
/// to it).
pub const SQS_MESSAGE_LIMIT: usize = 1_048_576;

/// What a forwarded message's attributes may take beside its body: the relay's seven
/// attributes with their longest values (topic 128 bytes, signature header 64 and value 256,
/// provider and event id 255 each, as [`FORWARD_FUNCTION`] and [`crate::prelude::EventId`] bound
/// them) come to about 1,300 bytes with their names and types.
pub const FORWARD_ATTRIBUTE_ROOM: usize = 2048;

/// The largest message body a forward makes: a body that would make a longer one (its base64,
/// when it holds a character SQS refuses: [`crate::sqs::body`]) is answered 413 and writes
/// nothing, because the relay could never send it. This is the one place the limit is stated.
pub const FORWARD_BODY_LIMIT: usize = SQS_MESSAGE_LIMIT - FORWARD_ATTRIBUTE_ROOM;

/// A signed body the outbox can store and the relay can send: at most SQS's largest
/// message (1 MiB) less 2 KiB for its attributes, of UTF-8 JSON with no NUL in any string and no number outside `numeric`'s range
/// (PostgreSQL's `jsonb` refuses `\u0000`, and `1e-200000` or `1e200000` with 22003; a signed
/// event it refused would be answered 500 and retried forever).
#[derive(Debug, Clone)]
pub struct Forwardable {
    pub(crate) body: String,
    pub(crate) signature: Option<(String, String)>,
}

/// Longest signature header name and value kept with a forward (migration V12 bounds both).
const MAX_SIGNATURE_HEADER: usize = 64;
const MAX_SIGNATURE: usize = 256;

impl Forwardable {
    /// Checks `body`; a refusal is a 400 (`invalid-payload`), or a 413 (`payload-too-large`)
    /// for a longer body.
    pub fn new(body: &[u8]) -> Result<Self, Rejection> {
        // As the relay sends it: base64 when it holds a character SQS refuses.
        if crate::sqs::body::encoded_len(body) > FORWARD_BODY_LIMIT {
            return Err(Rejection::new(
                Problem::PayloadTooLarge,
                "a forwarded event is at most 1046528 bytes, what a queue message holds (three \
                 quarters of that when it holds a character SQS refuses, which travels base64)",
            ));
        }
        fn holds_nul(value: &serde_json::Value) -> bool {
            use serde_json::Value;
            match value {
                Value::String(s) => s.contains('\0'),
                Value::Array(items) => items.iter().any(holds_nul),
                Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || holds_nul(v)),
                _ => false,
            }
        }
        let invalid = |detail| Rejection::new(Problem::InvalidPayload, detail);
        let text = std::str::from_utf8(body).map_err(|_| invalid("the body is not UTF-8"))?;
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|_| invalid("the body is not JSON"))?;
        if holds_nul(&value) {
            return Err(invalid(
                "the body carries a NUL character, which cannot be stored",
            ));
        }
        if !numbers_fit_numeric(text) {
            return Err(invalid(
                "the body carries a number outside the range PostgreSQL can store",
            ));
        }
        Ok(Self {
            body: text.to_owned(),
            signature: None,
        })
    }

    /// Keeps the header that signed the body (its canonical name, such as
    /// `X-Hub-Signature-256`, and its value as it arrived), so a consumer can verify the
    /// message. A value too long to keep is a 400: no verifier accepts one that long.
    pub fn signed_by(mut self, header: &'static str, value: &str) -> Result<Self, Rejection> {
        if header.len() > MAX_SIGNATURE_HEADER || value.len() > MAX_SIGNATURE {
            return Err(Rejection::new(
                Problem::MalformedSignature,
                "the signature header is too long",
            ));
        }
        self.signature = Some((header.to_owned(), value.to_owned()));
        Ok(self)
    }
}

/// `numeric`'s limits (PostgreSQL, "Arbitrary Precision Numbers"): up to 131072 digits before
/// the decimal point and 16383 after it.
const NUMERIC_INTEGER_DIGITS: i64 = 131_072;
const NUMERIC_FRACTION_DIGITS: i64 = 16_383;

/// True when every number in `json` (already known to be valid JSON) fits `numeric`, which is
/// how `jsonb` stores numbers. serde_json has read them as `f64`, which loses exactly what
/// matters here, so the number literals are read from the text: outside strings, a number is
/// `-? int frac? exp?`.
fn numbers_fit_numeric(json: &str) -> bool {
    let b = json.as_bytes();
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        match c {
            b'"' => {
                // Skip the string, escapes included.
                i += 1;
                while let Some(&c) = b.get(i) {
                    i += if c == b'\\' { 2 } else { 1 };
                    if c == b'"' {
                        break;
                    }
                }
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                while b
                    .get(i)
                    .is_some_and(|c| c.is_ascii_digit() || b"+-.eE".contains(c))
                {
                    i += 1;
                }
                if !number_fits_numeric(json.get(start..i).unwrap_or("")) {
                    return false;
                }
            }
            _ => i += 1,
        }
    }
    true
}

/// One JSON number literal against `numeric`'s limits, with its leading and trailing zeros
/// (which PostgreSQL drops) left out of the count.
fn number_fits_numeric(literal: &str) -> bool {
    let literal = literal.trim_start_matches('-');
    let (mantissa, exponent) = match literal.find(['e', 'E']) {
        Some(at) => (
            literal.get(..at).unwrap_or(""),
            literal.get(at + 1..).unwrap_or("0"),
        ),
        None => (literal, "0"),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits: String = format!("{int}{frac}");
    let Some(first) = digits.find(|c: char| c != '0') else {
        return true; // zero, however written
    };
    let last = digits.rfind(|c: char| c != '0').unwrap_or(first);
    // An exponent too long for i64 is far outside the range either way.
    let Ok(exponent) = exponent.trim_start_matches('+').parse::<i64>() else {
        return false;
    };
    let int_len = i64::try_from(int.len()).unwrap_or(i64::MAX);
    let (first, last) = (
        i64::try_from(first).unwrap_or(i64::MAX),
        i64::try_from(last).unwrap_or(i64::MAX),
    );
    // Positions relative to the decimal point: the most significant digit's power of ten is
    // int_len - 1 - first + exponent; the least significant's is int_len - 1 - last + exponent.
    let highest = int_len
        .saturating_sub(1)
        .saturating_sub(first)
        .saturating_add(exponent);
    let lowest = int_len
        .saturating_sub(1)
        .saturating_sub(last)
        .saturating_add(exponent);
    highest < NUMERIC_INTEGER_DIGITS && lowest >= -NUMERIC_FRACTION_DIGITS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_json_the_outbox_can_store_is_forwardable() {
        assert!(Forwardable::new(br#"{"a":[1,"\u00e9",{"b":null}]}"#).is_ok());
        // Within numeric's range, however written; and number-like text inside strings.
        for ok in [
            &br#"{"n":[0, -0.0, 0e-999999, 1e-16383, 1e300, 12.5e3, -7]}"#[..],
            br#"{"s":"1e-200000 \"1e999999\""}"#,
        ] {
            assert!(
                Forwardable::new(ok).is_ok(),
                "{}",
                String::from_utf8_lossy(ok)
            );
        }
        for bad in [
            &b"not json"[..],
            b"{\"a\":\"\xff\"}",
            br#"{"a":"x\u0000y"}"#,
            br#"{"a":[{"b":"\u0000"}]}"#,
            br#"{"\u0000":1}"#,
            // Outside numeric's range: jsonb refuses them (22003).
            br#"{"n":1e-200000}"#,
            br#"{"n":[1, -1e200000]}"#,
            br#"{"n":0.1e-16383}"#,
            br#"{"n":1e131072}"#,
        ] {
            assert_eq!(
                Forwardable::new(bad).expect_err("refused").problem,
                Problem::InvalidPayload
            );
        }
    }

    #[test]
    fn a_forward_the_queue_could_not_hold_is_413_and_one_at_the_limit_is_kept() {
        let sized = |len: usize| {
            let mut body = br#"{"pad":""#.to_vec();
            body.resize(len - 2, b'x');
            body.extend_from_slice(br#""}"#);
            body
        };
        assert!(Forwardable::new(&sized(FORWARD_BODY_LIMIT)).is_ok());
        // With a character SQS refuses, the body travels base64: three quarters of the room.
        let refusing = |len: usize| {
            let mut body = sized(len);
            body.splice(2..5, "\u{FFFF}".bytes());
            body
        };
        assert!(Forwardable::new(&refusing(FORWARD_BODY_LIMIT / 4 * 3)).is_ok());
        assert_eq!(
            Forwardable::new(&refusing(FORWARD_BODY_LIMIT / 4 * 3 + 1))
                .expect_err("too large as base64")
                .problem,
            Problem::PayloadTooLarge
        );
        let refused = Forwardable::new(&sized(FORWARD_BODY_LIMIT + 1)).expect_err("too large");
        assert_eq!(refused.problem, Problem::PayloadTooLarge);
        assert!(
            refused.detail.contains(&FORWARD_BODY_LIMIT.to_string()),
            "the answer names the limit: {}",
            refused.detail
        );
        let signed = Forwardable::new(b"{}").expect("JSON");
        assert!(
            signed
                .clone()
                .signed_by("X-Hub-Signature-256", &"a".repeat(256))
                .is_ok()
        );
        assert_eq!(
            signed
                .signed_by("X-Hub-Signature-256", &"a".repeat(257))
                .expect_err("too long")
                .problem,
            Problem::MalformedSignature
        );
    }
}
