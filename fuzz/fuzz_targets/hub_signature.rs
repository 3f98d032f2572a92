//! The `X-Hub-Signature-256` scheme (GitHub) on arbitrary input: the header value is everything
//! up to the first newline, the body everything after it.
//!
//! Beyond "never panics", every verdict is checked against a model built from `sign`: the
//! verifier accepts exactly when the trimmed value is `sha256=` and the lower-case hex HMAC of
//! the body under a configured secret.
#![no_main]

use claimonce::prelude::Problem;
use claimonce::prelude::Verify;
use claimonce::verify::body_hmac::{self, BodyHmac};
use lambda_http::http::{HeaderMap, HeaderValue};
use libfuzzer_sys::fuzz_target;
use std::sync::LazyLock;

/// GitHub's published example secret, and a second one as during a rotation.
const SECRETS: [&str; 2] = ["It's a Secret to Everybody", "claimonce-local-github-secret"];
const HEADER: &str = "x-hub-signature-256";

static VERIFIER: LazyLock<BodyHmac> = LazyLock::new(|| {
    BodyHmac::new(HEADER, "sha256=", body_hmac::Encoding::LowerHex, &SECRETS).expect("secrets")
});

fn model(value: &HeaderValue, body: &[u8]) -> Result<(), Problem> {
    let value = value.to_str().map_err(|_| Problem::MalformedSignature)?.trim();
    let hex = value
        .strip_prefix("sha256=")
        .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
        .ok_or(Problem::MalformedSignature)?;
    if SECRETS
        .iter()
        .any(|secret| body_hmac::sign(secret, body) == format!("sha256={hex}"))
    {
        Ok(())
    } else {
        Err(Problem::SignatureMismatch)
    }
}

fuzz_target!(|data: &[u8]| {
    let (header, body) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let mut headers = HeaderMap::new();
    let Ok(value) = HeaderValue::from_bytes(header) else {
        let got = VERIFIER.verify(&headers, body, 0);
        assert_eq!(got.map_err(|r| r.problem), Err(Problem::MissingSignature));
        return;
    };
    headers.insert(HEADER, value.clone());
    let got = VERIFIER.verify(&headers, body, 0);
    if let Err(rejection) = &got {
        assert_eq!(rejection.problem.status(), 400);
    }
    // A value longer than the schemes' 4 KiB limit is malformed whatever it says.
    let expected = if value.len() > 4096 {
        Err(Problem::MalformedSignature)
    } else {
        model(&value, body)
    };
    assert_eq!(got.map(|_| ()).map_err(|r| r.problem), expected);

    headers.append(HEADER, value);
    let twice = VERIFIER.verify(&headers, body, 0);
    assert_eq!(twice.map_err(|r| r.problem), Err(Problem::MalformedSignature));
});
