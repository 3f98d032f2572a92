//! Paddle Billing's signature, a scheme claimonce does not ship, written against claimonce's
//! public verification API: `Paddle-Signature: ts=<unix>;h1=<hex>`, the HMAC-SHA256, keyed
//! with the notification destination's whole secret key, of `<ts>:<raw body>`, lower-case hex.
//! During a secret rotation the header carries one `h1` per secret; any may match.
//!
//! The same type verifies (the receiver, the spill drain) and signs (this crate's tests and the
//! local run, through `src/bin/paddle-sign.rs`), so the two cannot disagree.

use claimonce::prelude::*;
use claimonce::verify::{
    HeaderMap, MAX_SIGNATURES, SigningKeys, Verified, decode_lower_hex, lower_hex, signature_header,
};

/// The header Paddle signs with (lower case).
pub const HEADER: &str = "paddle-signature";

/// Verifies and signs `Paddle-Signature`.
#[derive(Debug, Clone)]
pub struct PaddleSignature {
    keys: SigningKeys,
    tolerance: u64,
}

impl PaddleSignature {
    /// Accepts a signature made with any of `secrets` (several during a rotation) whose `ts` is
    /// within `tolerance` seconds of the receiver's clock. `None` without a secret.
    pub fn new(secrets: &[&str], tolerance: u64) -> Option<Self> {
        let keys = SigningKeys::new(secrets.iter().map(|s| s.as_bytes().to_vec()).collect())?;
        Some(Self { keys, tolerance })
    }

    fn tag(&self, ts: u64, body: &[u8]) -> [u8; 32] {
        self.keys
            .first_tag(&[ts.to_string().as_bytes(), b":", body])
    }
}

fn malformed(detail: &'static str) -> Rejection {
    Rejection::new(Problem::MalformedSignature, detail)
}

/// The header's `ts` and its `h1` values, decoded. Other keys are skipped (a later scheme
/// version would add its own); a missing or repeated `ts`, or no usable `h1`, is malformed.
pub fn parse_header(value: &str) -> Result<(u64, Vec<[u8; 32]>), Rejection> {
    let mut ts = None;
    let mut h1 = Vec::new();
    for item in value.split(';') {
        let Some((key, val)) = item.trim().split_once('=') else {
            continue;
        };
        match key {
            "ts" if ts.is_some() => return Err(malformed("the signature has two timestamps")),
            "ts" => {
                let parsed = val
                    .parse::<u64>()
                    .map_err(|_| malformed("the signature's ts is not a unix time"))?;
                ts = Some(parsed);
            }
            "h1" if h1.len() < MAX_SIGNATURES => {
                // Not 64 lower-case hex digits: it can never match, so it is not a candidate.
                if let Some(tag) = decode_lower_hex(val) {
                    h1.push(tag);
                }
            }
            _ => {}
        }
    }
    let ts = ts.ok_or_else(|| malformed("the signature has no ts"))?;
    if h1.is_empty() {
        return Err(malformed("the signature has no h1"));
    }
    Ok((ts, h1))
}

impl Verify for PaddleSignature {
    fn authenticate(&self, headers: &HeaderMap, body: &[u8]) -> Result<Verified, Rejection> {
        let value = signature_header(headers, HEADER)?.ok_or_else(|| {
            Rejection::new(Problem::MissingSignature, "Paddle-Signature is missing")
        })?;
        let (ts, candidates) = parse_header(value)?;
        self.keys
            .check(&[ts.to_string().as_bytes(), b":", body], &candidates)?;
        Ok(Verified::at(ts))
    }

    fn tolerance(&self) -> u64 {
        self.tolerance
    }

    fn signature_headers(&self) -> &[&'static str] {
        &[HEADER]
    }
}

impl Sign for PaddleSignature {
    fn sign(&self, body: &[u8], now: u64, _id: &str) -> Vec<(String, String)> {
        let h1 = lower_hex(&self.tag(now, body));
        vec![(HEADER.to_owned(), format!("ts={now};h1={h1}"))]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_796_050_800;
    const BODY: &[u8] = br#"{"event_id":"evt_01hv8wptq8987qeep44cyrewp9"}"#;

    fn headers(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(HEADER, value.parse().expect("a header value"));
        headers
    }

    fn signed_by(secret: &str, at: u64) -> String {
        let signer = PaddleSignature::new(&[secret], 0).expect("a secret");
        let (_, value) = signer.sign(BODY, at, "").remove(0);
        value
    }

    #[test]
    fn the_signature_is_paddle_s_documented_construction() {
        // HMAC-SHA256("secret", "1796050800:" + body), computed independently of the type
        // (python3 -c 'import hmac,hashlib; print(hmac.new(b"secret",
        // b"1796050800:{\"event_id\":\"evt_01hv8wptq8987qeep44cyrewp9\"}",
        // hashlib.sha256).hexdigest())').
        assert_eq!(
            signed_by("secret", NOW),
            "ts=1796050800;h1=cb0352fd8dde0fd6e6c8cbf1468107ab107725f963c0fada720723d7def6e370"
        );
    }

    #[test]
    fn any_h1_of_a_rotation_matches_and_a_stale_ts_is_refused() {
        let verifier = PaddleSignature::new(&["new-secret"], 5).expect("a secret");
        let old = signed_by("old-secret", NOW);
        let new = signed_by("new-secret", NOW);
        let h1 = |v: &str| v.split_once(";h1=").expect("an h1").1.to_owned();
        // Paddle sends one h1 per secret while a rotation lasts.
        let both = format!("ts={NOW};h1={};h1={}", h1(&old), h1(&new));
        assert!(verifier.verify(&headers(&both), BODY, NOW).is_ok());
        assert_eq!(
            verifier
                .verify(&headers(&old), BODY, NOW)
                .map_err(|r| r.problem),
            Err(Problem::SignatureMismatch)
        );
        assert_eq!(
            verifier
                .verify(&headers(&new), b"{}", NOW)
                .map_err(|r| r.problem),
            Err(Problem::SignatureMismatch)
        );
        assert!(verifier.verify(&headers(&new), BODY, NOW + 5).is_ok());
        assert_eq!(
            verifier
                .verify(&headers(&new), BODY, NOW + 6)
                .map_err(|r| r.problem),
            Err(Problem::StaleTimestamp)
        );
        // Authenticated without the clock, as the spill drain checks it hours later.
        assert_eq!(
            verifier
                .authenticate(&headers(&new), BODY)
                .map(|v| v.signed_at),
            Ok(Some(NOW))
        );
    }

    #[test]
    fn a_malformed_or_missing_header_is_refused_as_such() {
        let verifier = PaddleSignature::new(&["secret"], 5).expect("a secret");
        let tag = "a".repeat(64);
        for (value, problem) in [
            (format!("h1={tag}"), Problem::MalformedSignature),
            (format!("ts=1;ts=2;h1={tag}"), Problem::MalformedSignature),
            (format!("ts=soon;h1={tag}"), Problem::MalformedSignature),
            (format!("ts={NOW};h1=ABC"), Problem::MalformedSignature),
            (format!("ts={NOW}"), Problem::MalformedSignature),
        ] {
            assert_eq!(
                verifier
                    .verify(&headers(&value), BODY, NOW)
                    .map_err(|r| r.problem),
                Err(problem),
                "{value}"
            );
        }
        assert_eq!(
            verifier
                .verify(&HeaderMap::new(), BODY, NOW)
                .map_err(|r| r.problem),
            Err(Problem::MissingSignature)
        );
        assert!(PaddleSignature::new(&[], 5).is_none());
    }
}
