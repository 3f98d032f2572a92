//! Standard Webhooks (Resend, Svix) on arbitrary input: one control byte, then the message id,
//! the timestamp, the signature header and the body, separated by the first three newlines.
//!
//! The control byte picks, per header, the `webhook-*` or `svix-*` spelling (bits 0-2),
//! leaves a header out (bits 3-5) or sends the signature header twice (bit 6), so mixed,
//! missing and repeated headers are reached as well as the well-formed case. Accepting is
//! checked both ways against a model: whatever verifies was really signed, in time, under one
//! spelling; and a clean request that carries the right signature verifies.
#![no_main]

use claimonce::prelude::Problem;
use claimonce::prelude::Verify;
use claimonce::verify::standard_webhooks::{self, StandardWebhooks};
use lambda_http::http::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;
use std::sync::LazyLock;

/// The two published test vectors' secrets, and Resend's local development secret.
const SECRETS: [&str; 3] = [
    "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
    "whsec_Y2xhaW1vbmNlLWxvY2FsLWRldmVsb3BtZW50LWtleSE=",
];
/// Five seconds after the first published vector was signed.
const NOW: u64 = 1_614_265_335;
const TOLERANCE: u64 = 300;
const SPELLINGS: [&str; 2] = ["webhook", "svix"];
const PARTS: [&str; 3] = ["id", "timestamp", "signature"];

static VERIFIER: LazyLock<StandardWebhooks> =
    LazyLock::new(|| StandardWebhooks::new(&SECRETS, TOLERANCE).expect("secrets"));

/// The request as the control byte shaped it.
struct Shape {
    spelling: [usize; 3],
    present: [bool; 3],
    repeated_signature: bool,
}

impl Shape {
    fn new(control: u8) -> Self {
        let bit = |n: u8| control & (1 << n) != 0;
        Self {
            spelling: [0, 1, 2].map(|i| usize::from(bit(i))),
            present: [3, 4, 5].map(|i| !bit(i)),
            repeated_signature: bit(6),
        }
    }

    /// All three headers, once each, in one spelling: the only shape that can verify.
    fn clean(&self) -> bool {
        self.present.iter().all(|&p| p)
            && self.spelling.iter().all(|&s| s == self.spelling[0])
            && !self.repeated_signature
    }
}

/// The input, split: the control byte, the three header values and the body.
struct Input<'a> {
    control: u8,
    values: [&'a [u8]; 3],
    body: &'a [u8],
}

fn split(data: &[u8]) -> Option<Input<'_>> {
    let (&control, rest) = data.split_first()?;
    let mut parts = rest.splitn(4, |&b| b == b'\n');
    let id = parts.next()?;
    let timestamp = parts.next().unwrap_or_default();
    let signature = parts.next().unwrap_or_default();
    let body = parts.next().unwrap_or_default();
    Some(Input {
        control,
        values: [id, timestamp, signature],
        body,
    })
}

/// The signature token each secret would have produced, when the timestamp is written the
/// way `sign` writes it (the MAC covers the header's exact text).
fn expected_tokens(id: &str, timestamp: &str, body: &[u8]) -> Vec<String> {
    match timestamp.parse::<u64>() {
        Ok(t) if t.to_string() == timestamp => SECRETS
            .iter()
            .filter_map(|secret| standard_webhooks::sign(secret, id, t, body).ok())
            .collect(),
        _ => Vec::new(),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some(Input {
        control,
        values,
        body,
    }) = split(data)
    else {
        return;
    };
    let shape = Shape::new(control);

    let mut headers = HeaderMap::new();
    let mut texts: [Option<&str>; 3] = [None; 3];
    for (i, raw) in values.iter().enumerate() {
        let Ok(value) = HeaderValue::from_bytes(raw) else {
            continue;
        };
        texts[i] = value
            .to_str()
            .ok()
            .map(|_| std::str::from_utf8(raw).unwrap_or_default());
        if !shape.present[i] {
            continue;
        }
        let name = format!("{}-{}", SPELLINGS[shape.spelling[i]], PARTS[i]);
        let name = HeaderName::try_from(name).expect("header name");
        if i == 2 && shape.repeated_signature {
            headers.append(name.clone(), value.clone());
        }
        headers.append(name, value);
    }

    let got = VERIFIER.verify(&headers, body, NOW);
    match &got {
        Err(rejection) => {
            assert_eq!(rejection.problem.status(), 400);
            assert!(matches!(
                rejection.problem,
                Problem::MissingSignature
                    | Problem::MalformedSignature
                    | Problem::SignatureMismatch
                    | Problem::StaleTimestamp
            ));
        }
        Ok(verified) => {
            // Whatever verifies was sent cleanly, names its id, and is in time.
            assert!(
                shape.clean(),
                "accepted with mixed, missing or repeated headers"
            );
            let [Some(id), Some(timestamp), Some(signature)] = texts.map(|t| t.map(str::trim))
            else {
                panic!("accepted a header that is not text");
            };
            assert_eq!(verified.message_id.as_ref().map(|m| m.as_str()), Some(id));
            let t: u64 = timestamp.parse().expect("accepted timestamp is a number");
            assert!(t.abs_diff(NOW) <= TOLERANCE);
            let expected = expected_tokens(id, timestamp, body);
            if !expected.is_empty() {
                assert!(
                    signature
                        .split(' ')
                        .any(|token| expected.iter().any(|e| e == token))
                );
            }
        }
    }

    // And the converse: a clean request carrying the right signature is accepted.
    if shape.clean()
        && let [Some(id), Some(timestamp), Some(signature)] = texts.map(|t| t.map(str::trim))
        && !id.is_empty()
        && id.len() <= 255
        // Every header's value, untrimmed, within the schemes' 4 KiB limit.
        && texts.iter().flatten().all(|raw| raw.len() <= 4096)
        && signature.split(' ').count() <= 8
        && timestamp
            .parse::<u64>()
            .is_ok_and(|t| t.abs_diff(NOW) <= TOLERANCE)
    {
        let expected = expected_tokens(id, timestamp, body);
        if signature
            .split(' ')
            .any(|token| expected.iter().any(|e| e == token))
        {
            assert!(got.is_ok(), "refused a correctly signed request: {got:?}");
        }
    }
});
