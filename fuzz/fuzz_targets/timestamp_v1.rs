//! The `t=<unix>,v1=<hex>` scheme (Stripe) on arbitrary input: the header value is everything
//! up to the first newline, the body everything after it.
//!
//! Beyond "never panics", every verdict is checked against a model built from the header's
//! parse and `sign`: the verifier accepts exactly when one `v1` is the HMAC of the body under
//! a configured secret and the timestamp is within tolerance of the fixed clock.
#![no_main]

use claimonce::prelude::Problem;
use claimonce::prelude::Verify;
use claimonce::verify::timestamp_v1::{self, TimestampV1, parse_header};
use lambda_http::http::{HeaderMap, HeaderValue};
use libfuzzer_sys::fuzz_target;
use std::sync::LazyLock;

/// The secret of the unit tests' fixed vector, and a second one as during a rotation.
const SECRETS: [&str; 2] = ["whsec_test_secret", "whsec_claimonce_local_dev"];
/// The unit tests' vector is signed at this time; the clock stands still there.
const NOW: u64 = 1_700_000_000;
const TOLERANCE: u64 = 300;
const HEADER: &str = "stripe-signature";

static VERIFIER: LazyLock<TimestampV1> =
    LazyLock::new(|| TimestampV1::new(HEADER, &SECRETS, TOLERANCE).expect("secrets"));

fn hex(bytes: &[u8; 32]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn model(value: &HeaderValue, body: &[u8]) -> Result<(), Problem> {
    let value = value.to_str().map_err(|_| Problem::MalformedSignature)?;
    let header = parse_header(value).map_err(|r| r.problem)?;
    let matched = SECRETS.iter().any(|secret| {
        let expected = timestamp_v1::sign(secret, header.timestamp, body);
        header.signatures.iter().any(|sig| hex(sig) == expected)
    });
    if !matched {
        return Err(Problem::SignatureMismatch);
    }
    if header.timestamp.abs_diff(NOW) > TOLERANCE {
        return Err(Problem::StaleTimestamp);
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let (header, body) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };

    // The parser alone, on any string.
    if let Ok(text) = std::str::from_utf8(header)
        && let Ok(parsed) = parse_header(text)
    {
        assert!(!parsed.signatures.is_empty() && parsed.signatures.len() <= 8);
    }

    // The verifier, on any header value HTTP can carry (and on none).
    let mut headers = HeaderMap::new();
    let Ok(value) = HeaderValue::from_bytes(header) else {
        let got = VERIFIER.verify(&headers, body, NOW);
        assert_eq!(got.map_err(|r| r.problem), Err(Problem::MissingSignature));
        return;
    };
    headers.insert(HEADER, value.clone());
    let got = VERIFIER.verify(&headers, body, NOW);
    if let Err(rejection) = &got {
        assert_eq!(rejection.problem.status(), 400);
    }
    assert_eq!(
        got.map(|v| v.message_id).map_err(|r| r.problem),
        model(&value, body).map(|()| None)
    );

    // The same header twice is refused, whatever it says.
    headers.append(HEADER, value);
    let twice = VERIFIER.verify(&headers, body, NOW);
    assert_eq!(
        twice.map_err(|r| r.problem),
        Err(Problem::MalformedSignature)
    );
});
