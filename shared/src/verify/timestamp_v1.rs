//! The `t=<unix>,v1=<hex>` scheme: HMAC-SHA256 keyed with the whole secret string over
//! `{t}.{raw body}`, lower-case hex, any `v1` may match, other schemes (`v0`, ...) ignored.

use http::HeaderMap;

use super::{
    MAX_HEADER_LEN, MAX_SIGNATURES, Sign, SigningKeys, Verified, Verify, decode_lower_hex,
    lower_hex, reject, signature_header,
};
use crate::response::{Problem, Rejection};

/// Verifier for a `t=…,v1=…` signature header.
#[derive(Debug, Clone)]
pub struct TimestampV1 {
    header: &'static str,
    keys: SigningKeys,
    tolerance: u64,
}

impl TimestampV1 {
    /// `header` is the lower-case header name; each secret string is used whole as the key.
    pub fn new(header: &'static str, secrets: &[&str], tolerance: u64) -> Option<Self> {
        let keys = SigningKeys::new(secrets.iter().map(|s| s.as_bytes().to_vec()).collect())?;
        Some(Self {
            header,
            keys,
            tolerance,
        })
    }
}

/// A parsed header: the signed timestamp and the `v1` digests.
#[derive(Debug, PartialEq, Eq)]
pub struct Header {
    /// The `t=` value.
    pub timestamp: u64,
    /// Every well-formed `v1=` value, decoded.
    pub signatures: Vec<[u8; 32]>,
}

/// Parses the header value. Unknown schemes are skipped; a missing or repeated `t`, or no
/// usable `v1`, is malformed.
pub fn parse_header(value: &str) -> Result<Header, Rejection> {
    if value.len() > MAX_HEADER_LEN {
        return Err(reject(
            Problem::MalformedSignature,
            "signature header is too long",
        ));
    }
    let mut timestamp = None;
    let mut signatures = Vec::new();
    for item in value.split(',') {
        let Some((key, val)) = item.trim().split_once('=') else {
            continue;
        };
        match key {
            "t" => {
                if timestamp.is_some() {
                    return Err(reject(
                        Problem::MalformedSignature,
                        "signature header has more than one timestamp",
                    ));
                }
                let t = val.parse::<u64>().map_err(|_| {
                    reject(
                        Problem::MalformedSignature,
                        "signature timestamp is not an integer",
                    )
                })?;
                timestamp = Some(t);
            }
            "v1" if signatures.len() < MAX_SIGNATURES => {
                // A candidate that is not 64 lower-case hex digits can never match; skip it.
                if let Some(sig) = decode_lower_hex(val) {
                    signatures.push(sig);
                }
            }
            _ => {}
        }
    }
    let timestamp = timestamp.ok_or_else(|| {
        reject(
            Problem::MalformedSignature,
            "signature header has no timestamp",
        )
    })?;
    if signatures.is_empty() {
        return Err(reject(
            Problem::MalformedSignature,
            "signature header has no v1 signature",
        ));
    }
    Ok(Header {
        timestamp,
        signatures,
    })
}

/// Computes the lower-case hex `v1` signature of `body` at `timestamp` with `secret`.
pub fn sign(secret: &str, timestamp: u64, body: &[u8]) -> String {
    SigningKeys::new(vec![secret.as_bytes().to_vec()])
        .map_or_else(String::new, |keys| signature(&keys, timestamp, body))
}

fn signature(keys: &SigningKeys, timestamp: u64, body: &[u8]) -> String {
    lower_hex(&keys.first_tag(&[timestamp.to_string().as_bytes(), b".", body]))
}

impl Sign for TimestampV1 {
    fn sign(&self, body: &[u8], now: u64, _id: &str) -> Vec<(String, String)> {
        let v1 = signature(&self.keys, now, body);
        vec![(self.header.to_owned(), format!("t={now},v1={v1}"))]
    }
}

impl Verify for TimestampV1 {
    fn authenticate(&self, headers: &HeaderMap, body: &[u8]) -> Result<Verified, Rejection> {
        let value = signature_header(headers, self.header)?
            .ok_or_else(|| reject(Problem::MissingSignature, "signature header is missing"))?;
        let header = parse_header(value)?;
        let timestamp = header.timestamp.to_string();
        self.keys
            .check(&[timestamp.as_bytes(), b".", body], &header.signatures)?;
        Ok(Verified::at(header.timestamp))
    }

    fn tolerance(&self) -> u64 {
        self.tolerance
    }

    fn signature_headers(&self) -> &[&'static str] {
        std::slice::from_ref(&self.header)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_test_secret";
    const BODY: &[u8] = b"{\n  \"id\": \"evt_test_webhook\",\n  \"object\": \"event\"\n}";
    // Computed with the provider's own libraries for this secret, timestamp and body.
    const VECTOR: &str = "4f1cd7feda9826e746b7d482c4badebb657398df1099e1046364f6196a230150";
    const T: u64 = 1_700_000_000;

    fn headers(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("x-sig", value.parse().expect("header value"));
        h
    }

    fn verifier(secrets: &[&str]) -> TimestampV1 {
        TimestampV1::new("x-sig", secrets, 300).expect("secrets")
    }

    fn problem(r: Result<Verified, Rejection>) -> Problem {
        r.expect_err("must be rejected").problem
    }

    #[test]
    fn signs_the_fixed_vector() {
        assert_eq!(sign(SECRET, T, BODY), VECTOR);
    }

    #[test]
    fn accepts_the_fixed_vector() {
        let h = headers(&format!("t={T},v1={VECTOR}"));
        assert_eq!(
            verifier(&[SECRET]).verify(&h, BODY, T + 10),
            Ok(Verified {
                message_id: None,
                signed_at: Some(T),
            })
        );
    }

    #[test]
    fn authenticating_waives_only_the_tolerance() {
        let h = headers(&format!("t={T},v1={VECTOR}"));
        // A day late: stale as a delivery, genuine as a spilled one.
        assert_eq!(
            problem(verifier(&[SECRET]).verify(&h, BODY, T + 86_400)),
            Problem::StaleTimestamp
        );
        assert_eq!(
            verifier(&[SECRET])
                .authenticate(&h, BODY)
                .map(|v| v.signed_at),
            Ok(Some(T))
        );
        assert_eq!(
            problem(verifier(&[SECRET]).authenticate(&h, b"{}")),
            Problem::SignatureMismatch
        );
        assert_eq!(
            problem(verifier(&["whsec_other"]).authenticate(&h, BODY)),
            Problem::SignatureMismatch
        );
    }

    #[test]
    fn any_v1_may_match_and_v0_is_ignored() {
        let other = "0".repeat(64);
        let h = headers(&format!(
            "t={T}, v0={VECTOR}, v1={other}, v1={VECTOR}, x1=zz"
        ));
        assert!(verifier(&[SECRET]).verify(&h, BODY, T).is_ok());
        let only_v0 = headers(&format!("t={T},v0={VECTOR}"));
        assert_eq!(
            problem(verifier(&[SECRET]).verify(&only_v0, BODY, T)),
            Problem::MalformedSignature
        );
    }

    #[test]
    fn any_secret_may_match() {
        let h = headers(&format!("t={T},v1={VECTOR}"));
        assert!(verifier(&["whsec_new", SECRET]).verify(&h, BODY, T).is_ok());
        assert_eq!(
            problem(verifier(&["whsec_new"]).verify(&h, BODY, T)),
            Problem::SignatureMismatch
        );
    }

    #[test]
    fn tolerance_applies_in_both_directions() {
        let h = headers(&format!("t={T},v1={VECTOR}"));
        let v = verifier(&[SECRET]);
        assert!(v.verify(&h, BODY, T + 300).is_ok());
        assert!(v.verify(&h, BODY, T - 300).is_ok());
        assert_eq!(
            problem(v.verify(&h, BODY, T + 301)),
            Problem::StaleTimestamp
        );
        assert_eq!(
            problem(v.verify(&h, BODY, T - 301)),
            Problem::StaleTimestamp
        );
    }

    #[test]
    fn any_change_to_the_body_is_refused() {
        let h = headers(&format!("t={T},v1={VECTOR}"));
        let mut body = BODY.to_vec();
        body.push(b'\n');
        assert_eq!(
            problem(verifier(&[SECRET]).verify(&h, &body, T)),
            Problem::SignatureMismatch
        );
    }

    #[test]
    fn upper_case_hex_is_not_the_signature() {
        let h = headers(&format!("t={T},v1={}", VECTOR.to_uppercase()));
        assert_eq!(
            problem(verifier(&[SECRET]).verify(&h, BODY, T)),
            Problem::MalformedSignature
        );
    }

    #[test]
    fn malformed_headers_are_specific_rejections() {
        let v = verifier(&[SECRET]);
        let cases = [
            (format!("v1={VECTOR}"), Problem::MalformedSignature),
            (format!("t=abc,v1={VECTOR}"), Problem::MalformedSignature),
            (
                format!("t={T},t={T},v1={VECTOR}"),
                Problem::MalformedSignature,
            ),
            (format!("t={T}"), Problem::MalformedSignature),
            (",,,=,=".to_string(), Problem::MalformedSignature),
            ("x".repeat(5000), Problem::MalformedSignature),
        ];
        for (value, expected) in cases {
            assert_eq!(
                problem(v.verify(&headers(&value), BODY, T)),
                expected,
                "{value:.40}"
            );
        }
        assert_eq!(
            problem(v.verify(&HeaderMap::new(), BODY, T)),
            Problem::MissingSignature
        );
    }
}
