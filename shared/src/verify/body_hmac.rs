//! Body signatures: the HMAC-SHA256 of the raw body alone, keyed with the whole secret string,
//! in one header as a prefix and an encoding. GitHub's `X-Hub-Signature-256` is `sha256=` and
//! lower-case hex ([`BodyHmac::github`]); Shopify's `X-Shopify-Hmac-Sha256` is base64 with no
//! prefix ([`Encoding::Base64`]). One verifier, configured by those two, for every sender that
//! signs this way.
//!
//! The scheme signs the body and nothing else: no timestamp, no message id. A captured
//! delivery stays valid for as long as the secret does, so replay protection is the ledger's
//! job (the provider keys its claims by what the signature covers; see ARCHITECTURE.md).

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use http::HeaderMap;

use super::{
    Sign, SigningKeys, Verified, Verify, decode_lower_hex, lower_hex, reject, signature_header,
};
use crate::response::{Problem, Rejection};

/// How the 32-byte tag is written in the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Encoding {
    /// 64 lower-case hex digits (GitHub).
    LowerHex,
    /// Standard base64 with padding, 44 characters (Shopify).
    Base64,
}

impl Encoding {
    fn encode(self, tag: &[u8]) -> String {
        match self {
            Encoding::LowerHex => lower_hex(tag),
            Encoding::Base64 => STANDARD.encode(tag),
        }
    }

    fn decode(self, text: &str) -> Option<[u8; 32]> {
        match self {
            Encoding::LowerHex => decode_lower_hex(text),
            // 44 characters are exactly 32 bytes with one `=`; anything else cannot match.
            Encoding::Base64 if text.len() == 44 => STANDARD.decode(text).ok()?.try_into().ok(),
            Encoding::Base64 => None,
        }
    }
}

/// Verifier (and signer) for an HMAC-SHA256 of the body in one header.
#[derive(Debug, Clone)]
pub struct BodyHmac {
    header: &'static str,
    prefix: &'static str,
    encoding: Encoding,
    keys: SigningKeys,
}

impl BodyHmac {
    /// `header` is the lower-case header name, `prefix` what precedes the encoded tag (`""`
    /// for none); each secret string is used whole as a key. `None` when there is no secret.
    pub fn new(
        header: &'static str,
        prefix: &'static str,
        encoding: Encoding,
        secrets: &[&str],
    ) -> Option<Self> {
        let keys = SigningKeys::new(secrets.iter().map(|s| s.as_bytes().to_vec()).collect())?;
        Some(Self {
            header,
            prefix,
            encoding,
            keys,
        })
    }

    /// GitHub's `X-Hub-Signature-256`: `sha256=` and lower-case hex.
    pub fn github(secrets: &[&str]) -> Option<Self> {
        Self::new(
            "x-hub-signature-256",
            "sha256=",
            Encoding::LowerHex,
            secrets,
        )
    }

    fn value(&self, body: &[u8]) -> String {
        let tag = self.keys.first_tag(&[body]);
        format!("{}{}", self.prefix, self.encoding.encode(&tag))
    }
}

/// The `X-Hub-Signature-256` value, `sha256=<lower-case hex>`, for `body` signed with `secret`.
pub fn sign(secret: &str, body: &[u8]) -> String {
    BodyHmac::github(&[secret]).map_or_else(String::new, |github| github.value(body))
}

impl Verify for BodyHmac {
    fn authenticate(&self, headers: &HeaderMap, body: &[u8]) -> Result<Verified, Rejection> {
        let value = signature_header(headers, self.header)?
            .ok_or_else(|| reject(Problem::MissingSignature, "signature header is missing"))?;
        let signature = value
            .strip_prefix(self.prefix)
            .and_then(|text| self.encoding.decode(text))
            .ok_or_else(|| {
                reject(
                    Problem::MalformedSignature,
                    "signature header is not the scheme's prefix and an encoded SHA-256 HMAC",
                )
            })?;
        self.keys.check(&[body], &[signature])?;
        Ok(Verified::default())
    }

    /// None is consulted: the scheme signs no timestamp.
    fn tolerance(&self) -> u64 {
        0
    }

    fn signature_headers(&self) -> &[&'static str] {
        std::slice::from_ref(&self.header)
    }
}

impl Sign for BodyHmac {
    fn sign(&self, body: &[u8], _now: u64, _id: &str) -> Vec<(String, String)> {
        vec![(self.header.to_owned(), self.value(body))]
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

    fn verifier(secrets: &[&str]) -> BodyHmac {
        BodyHmac::github(secrets).expect("secrets")
    }

    fn problem(r: Result<Verified, Rejection>) -> Problem {
        r.expect_err("must be rejected").problem
    }

    #[test]
    fn signs_and_accepts_githubs_published_vector() {
        assert_eq!(sign(SECRET, BODY), VECTOR);
        assert_eq!(
            verifier(&[SECRET]).sign(BODY, 0, ""),
            [("x-hub-signature-256".to_owned(), VECTOR.to_owned())]
        );
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

    #[test]
    fn base64_without_a_prefix_is_shopifys_form_of_the_same_signature() {
        let shopify =
            BodyHmac::new("x-shopify-hmac-sha256", "", Encoding::Base64, &[SECRET]).expect("key");
        // The same tag as GitHub's vector, in base64.
        let value = "dXEH6g6yUJ/CESIczphLijdXC211hsIsRvQ3nIsEPhc=";
        let mut headers = HeaderMap::new();
        headers.insert("x-shopify-hmac-sha256", value.parse().expect("value"));
        assert_eq!(shopify.verify(&headers, BODY, 0), Ok(Verified::default()));
        assert_eq!(
            shopify.sign(BODY, 0, ""),
            [("x-shopify-hmac-sha256".to_owned(), value.to_owned())]
        );
        for bad in [
            &value[..43],
            "dXEH6g6yUJ_CESIczphLijdXC211hsIsRvQ3nIsEPhc=",
            VECTOR,
        ] {
            let mut headers = HeaderMap::new();
            headers.insert("x-shopify-hmac-sha256", bad.parse().expect("value"));
            assert_eq!(
                problem(shopify.verify(&headers, BODY, 0)),
                Problem::MalformedSignature,
                "{bad}"
            );
        }
        assert_eq!(
            problem(shopify.verify(&headers, b"Hello, World?", 0)),
            Problem::SignatureMismatch
        );
    }
}
