//! The `X-Hub-Signature-256` scheme (GitHub): `sha256=<hex>`, the lower-case hex HMAC-SHA256
//! of the raw body, keyed with the whole secret string.
//!
//! The scheme signs the body and nothing else: no timestamp, no message id. A captured
//! delivery stays valid for as long as the secret does, so replay protection is the ledger's
//! job (the provider keys its claims by what the signature covers; see ARCHITECTURE.md).

use hmac::Mac;
use http::HeaderMap;

use super::{
    SigningKeys, Verified, Verify, decode_lower_hex, keyed_mac, lower_hex, reject, signature_header,
};
use crate::response::{Problem, Rejection};

/// Verifier for a `sha256=<hex>` body signature.
#[derive(Debug, Clone)]
pub struct HubSignature256 {
    header: &'static str,
    keys: SigningKeys,
}

impl HubSignature256 {
    /// `header` is the lower-case header name (`x-hub-signature-256`); each secret string is
    /// used whole as a key.
    pub fn new(header: &'static str, secrets: &[&str]) -> Option<Self> {
        let keys = SigningKeys::new(secrets.iter().map(|s| s.as_bytes().to_vec()).collect())?;
        Some(Self { header, keys })
    }
}

/// The header value, `sha256=<lower-case hex>`, for `body` signed with `secret`.
pub fn sign(secret: &str, body: &[u8]) -> String {
    let tag = keyed_mac(secret.as_bytes(), &[body])
        .finalize()
        .into_bytes();
    format!("sha256={}", lower_hex(&tag))
}

impl Verify for HubSignature256 {
    fn verify(&self, headers: &HeaderMap, body: &[u8], _now: u64) -> Result<Verified, Rejection> {
        let value = signature_header(headers, self.header)?
            .ok_or_else(|| reject(Problem::MissingSignature, "signature header is missing"))?;
        let signature = value
            .strip_prefix("sha256=")
            .and_then(decode_lower_hex)
            .ok_or_else(|| {
                reject(
                    Problem::MalformedSignature,
                    "signature header is not sha256= and 64 lower-case hex digits",
                )
            })?;
        self.keys.check(&[body], &[signature])?;
        Ok(Verified::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // GitHub's published example ("Validating webhook deliveries").
    const SECRET: &str = "It's a Secret to Everybody";
    const BODY: &[u8] = b"Hello, World!";
    const VECTOR: &str = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

    fn headers(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("x-hub-signature-256", value.parse().expect("header value"));
        h
    }

    fn verifier(secrets: &[&str]) -> HubSignature256 {
        HubSignature256::new("x-hub-signature-256", secrets).expect("secrets")
    }

    fn problem(r: Result<Verified, Rejection>) -> Problem {
        r.expect_err("must be rejected").problem
    }

    #[test]
    fn signs_and_accepts_githubs_published_vector() {
        assert_eq!(sign(SECRET, BODY), VECTOR);
        assert_eq!(
            verifier(&[SECRET]).verify(&headers(VECTOR), BODY, 0),
            Ok(Verified::default())
        );
    }

    #[test]
    fn any_configured_secret_may_match() {
        assert!(
            verifier(&["the new one", SECRET])
                .verify(&headers(VECTOR), BODY, 0)
                .is_ok()
        );
        assert_eq!(
            problem(verifier(&["the new one"]).verify(&headers(VECTOR), BODY, 0)),
            Problem::SignatureMismatch
        );
    }

    #[test]
    fn a_changed_body_is_refused() {
        assert_eq!(
            problem(verifier(&[SECRET]).verify(&headers(VECTOR), b"Hello, World?", 0)),
            Problem::SignatureMismatch
        );
    }

    #[test]
    fn malformed_and_missing_headers_are_specific_rejections() {
        let v = verifier(&[SECRET]);
        let hex = VECTOR.trim_start_matches("sha256=");
        for bad in [
            hex.to_owned(),
            format!("sha1={hex}"),
            format!("sha256={}", hex.to_uppercase()),
            format!("sha256={}", &hex[..63]),
            "sha256=".to_owned(),
            "x".repeat(5000),
        ] {
            assert_eq!(
                problem(v.verify(&headers(&bad), BODY, 0)),
                Problem::MalformedSignature,
                "{bad:.40}"
            );
        }
        let mut twice = headers(VECTOR);
        twice.append("x-hub-signature-256", VECTOR.parse().expect("value"));
        assert_eq!(
            problem(v.verify(&twice, BODY, 0)),
            Problem::MalformedSignature
        );
        assert_eq!(
            problem(v.verify(&HeaderMap::new(), BODY, 0)),
            Problem::MissingSignature
        );
    }
}
