//! Standard Webhooks (the scheme Svix signs with): HMAC-SHA256 keyed with the base64-decoded
//! `whsec_` secret over `{id}.{timestamp}.{raw body}`, base64, in a space-separated list of
//! `v1,<sig>` entries any of which may match. Headers are `webhook-*` or `svix-*`.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use http::HeaderMap;

use super::{MAX_SIGNATURES, Sign, SigningKeys, Verified, Verify, reject, signature_header};
use crate::ids::EventId;
use crate::response::{Problem, Rejection};

/// The three headers, in one of the two accepted spellings.
static SPELLINGS: [[&str; 3]; 2] = [
    ["webhook-id", "webhook-timestamp", "webhook-signature"],
    ["svix-id", "svix-timestamp", "svix-signature"],
];

/// Verifier for Standard Webhooks signatures.
#[derive(Debug, Clone)]
pub struct StandardWebhooks {
    keys: SigningKeys,
    tolerance: u64,
}

/// Why a configured secret could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadSecret;

impl std::fmt::Display for BadSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a Standard Webhooks secret is not valid base64 (optionally prefixed whsec_)")
    }
}

impl std::error::Error for BadSecret {}

/// Decodes a `whsec_<base64>` secret (the prefix is optional) into its key bytes.
pub fn decode_secret(secret: &str) -> Result<Vec<u8>, BadSecret> {
    let b64 = secret.strip_prefix("whsec_").unwrap_or(secret);
    match STANDARD.decode(b64) {
        Ok(key) if !key.is_empty() => Ok(key),
        _ => Err(BadSecret),
    }
}

impl StandardWebhooks {
    /// Builds a verifier from one or more `whsec_` secrets.
    pub fn new(secrets: &[&str], tolerance: u64) -> Result<Self, BadSecret> {
        let keys = secrets
            .iter()
            .map(|s| decode_secret(s))
            .collect::<Result<Vec<_>, _>>()?;
        let keys = SigningKeys::new(keys).ok_or(BadSecret)?;
        Ok(Self { keys, tolerance })
    }
}

/// Computes the `v1,<base64>` signature entry for a message.
pub fn sign(secret: &str, id: &str, timestamp: u64, body: &[u8]) -> Result<String, BadSecret> {
    let keys = SigningKeys::new(vec![decode_secret(secret)?]).ok_or(BadSecret)?;
    Ok(entry(&keys, id, timestamp, body))
}

fn entry(keys: &SigningKeys, id: &str, timestamp: u64, body: &[u8]) -> String {
    let tag = keys.first_tag(&[
        id.as_bytes(),
        b".",
        timestamp.to_string().as_bytes(),
        b".",
        body,
    ]);
    format!("v1,{}", STANDARD.encode(tag))
}

/// Signs in the `webhook-*` spelling; a sender that uses `svix-*` (Resend) writes the same
/// values under those names.
impl Sign for StandardWebhooks {
    fn sign(&self, body: &[u8], now: u64, id: &str) -> Vec<(String, String)> {
        let [id_header, timestamp_header, signature_header] = SPELLINGS[0];
        vec![
            (id_header.to_owned(), id.to_owned()),
            (timestamp_header.to_owned(), now.to_string()),
            (
                signature_header.to_owned(),
                entry(&self.keys, id, now, body),
            ),
        ]
    }
}

impl Verify for StandardWebhooks {
    fn authenticate(&self, headers: &HeaderMap, body: &[u8]) -> Result<Verified, Rejection> {
        // The spelling is chosen by the id header; mixing spellings is not accepted.
        let mut chosen = None;
        for [id, ts, sig] in SPELLINGS {
            if let Some(value) = signature_header(headers, id)? {
                chosen = Some((
                    value,
                    signature_header(headers, ts)?,
                    signature_header(headers, sig)?,
                ));
                break;
            }
        }
        let (id, timestamp, signature) = match chosen {
            Some((id, Some(ts), Some(sig))) => (id, ts, sig),
            _ => {
                return Err(reject(
                    Problem::MissingSignature,
                    "webhook-id, webhook-timestamp and webhook-signature headers are required",
                ));
            }
        };
        let message_id = EventId::new(id).map_err(|_| {
            reject(
                Problem::MalformedSignature,
                "message id is empty, too long or holds a NUL",
            )
        })?;
        let timestamp_value = timestamp.parse::<u64>().map_err(|_| {
            reject(
                Problem::MalformedSignature,
                "signature timestamp is not an integer",
            )
        })?;
        let candidates: Vec<[u8; 32]> = signature
            .split(' ')
            .filter_map(|entry| entry.split_once(','))
            .filter(|(version, _)| *version == "v1")
            .filter_map(|(_, sig)| STANDARD.decode(sig).ok())
            .filter_map(|sig| <[u8; 32]>::try_from(sig).ok())
            .take(MAX_SIGNATURES)
            .collect();
        if candidates.is_empty() {
            return Err(reject(
                Problem::MalformedSignature,
                "signature header has no well-formed v1 signature",
            ));
        }
        self.keys.check(
            &[id.as_bytes(), b".", timestamp.as_bytes(), b".", body],
            &candidates,
        )?;
        Ok(Verified::at(timestamp_value).with_message_id(message_id))
    }

    fn tolerance(&self) -> u64 {
        self.tolerance
    }

    fn signature_headers(&self) -> &[&'static str] {
        SPELLINGS.as_flattened()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Vector {
        secret: &'static str,
        id: &'static str,
        timestamp: u64,
        body: &'static str,
        signature: &'static str,
    }

    // From the Standard Webhooks specification and the Svix libraries' own tests.
    const VECTORS: [Vector; 2] = [
        Vector {
            secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            id: "msg_p5jXN8AQM9LWM0D4loKWxJek",
            timestamp: 1_614_265_330,
            body: r#"{"test": 2432232314}"#,
            signature: "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
        },
        Vector {
            secret: "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
            id: "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk",
            timestamp: 1_649_367_553,
            body: r#"{"email":"test@example.com","username":"test_user"}"#,
            signature: "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=",
        },
    ];

    fn headers(prefix: &str, id: &str, ts: &str, sig: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in [("id", id), ("timestamp", ts), ("signature", sig)] {
            let name = http::HeaderName::try_from(format!("{prefix}-{name}")).expect("name");
            h.insert(name, value.parse().expect("value"));
        }
        h
    }

    fn problem(r: Result<Verified, Rejection>) -> Problem {
        r.expect_err("must be rejected").problem
    }

    #[test]
    fn signs_and_accepts_the_published_vectors_in_both_spellings() {
        for v in VECTORS {
            assert_eq!(
                sign(v.secret, v.id, v.timestamp, v.body.as_bytes()).as_deref(),
                Ok(v.signature)
            );
            let verifier = StandardWebhooks::new(&[v.secret], 300).expect("secret");
            for prefix in ["svix", "webhook"] {
                let h = headers(prefix, v.id, &v.timestamp.to_string(), v.signature);
                let got = verifier.verify(&h, v.body.as_bytes(), v.timestamp + 5);
                assert_eq!(
                    got.map(|o| o.message_id.map(|id| id.as_str().to_owned())),
                    Ok(Some(v.id.to_owned()))
                );
            }
        }
    }

    #[test]
    fn a_secret_without_prefix_is_base64_too() {
        let v = &VECTORS[0];
        let bare = v.secret.trim_start_matches("whsec_");
        assert_eq!(decode_secret(bare), decode_secret(v.secret));
        assert_eq!(decode_secret("whsec_!!!"), Err(BadSecret));
        assert_eq!(decode_secret("whsec_"), Err(BadSecret));
    }

    #[test]
    fn any_listed_v1_and_any_secret_may_match_other_versions_skipped() {
        let v = &VECTORS[0];
        let sig = v.signature.trim_start_matches("v1,");
        let list = format!("v1a,{sig} v1,AAAA v2,{sig} v1,{sig}");
        let h = headers("webhook", v.id, &v.timestamp.to_string(), &list);
        let rotated = StandardWebhooks::new(&[VECTORS[1].secret, v.secret], 300).expect("s");
        assert!(rotated.verify(&h, v.body.as_bytes(), v.timestamp).is_ok());
        let only_v1a = headers(
            "webhook",
            v.id,
            &v.timestamp.to_string(),
            &format!("v1a,{sig}"),
        );
        assert_eq!(
            problem(rotated.verify(&only_v1a, v.body.as_bytes(), v.timestamp)),
            Problem::MalformedSignature
        );
    }

    #[test]
    fn stale_and_future_timestamps_are_refused() {
        let v = &VECTORS[0];
        let verifier = StandardWebhooks::new(&[v.secret], 300).expect("secret");
        let h = headers("svix", v.id, &v.timestamp.to_string(), v.signature);
        let body = v.body.as_bytes();
        assert!(verifier.verify(&h, body, v.timestamp - 300).is_ok());
        assert_eq!(
            problem(verifier.verify(&h, body, v.timestamp + 301)),
            Problem::StaleTimestamp
        );
        assert_eq!(
            problem(verifier.verify(&h, body, v.timestamp - 301)),
            Problem::StaleTimestamp
        );
    }

    #[test]
    fn tampering_and_malformed_headers_are_rejected_specifically() {
        let v = &VECTORS[0];
        let verifier = StandardWebhooks::new(&[v.secret], 300).expect("secret");
        let ts = v.timestamp.to_string();
        let body = v.body.as_bytes();
        let wrong_id = headers("svix", "msg_other", &ts, v.signature);
        assert_eq!(
            problem(verifier.verify(&wrong_id, body, v.timestamp)),
            Problem::SignatureMismatch
        );
        assert_eq!(
            problem(verifier.verify(
                &headers("svix", v.id, &ts, v.signature),
                b"{\"test\": 2432232315}",
                v.timestamp
            )),
            Problem::SignatureMismatch
        );
        for bad in ["v1,not base64!", "v1", "", "garbage", "v1,AAAA"] {
            assert_eq!(
                problem(verifier.verify(&headers("svix", v.id, &ts, bad), body, v.timestamp)),
                Problem::MalformedSignature,
                "{bad}"
            );
        }
        let bad_ts = headers("svix", v.id, "12x", v.signature);
        assert_eq!(
            problem(verifier.verify(&bad_ts, body, v.timestamp)),
            Problem::MalformedSignature
        );
        let mut missing = headers("svix", v.id, &ts, v.signature);
        missing.remove("svix-signature");
        assert_eq!(
            problem(verifier.verify(&missing, body, v.timestamp)),
            Problem::MissingSignature
        );
        assert_eq!(
            problem(verifier.verify(&HeaderMap::new(), body, v.timestamp)),
            Problem::MissingSignature
        );
    }
}
