//! Slack's request signature, v0, written against claimonce's public verification API:
//! `X-Slack-Signature: v0=<hex>`, the HMAC-SHA256, keyed with the app's signing secret, of
//! `v0:<X-Slack-Request-Timestamp>:<raw body>`, lower-case hex ("Verifying requests from
//! Slack", Slack's developer documentation). The timestamp must be within the tolerance
//! (Slack advises five minutes).
//!
//! The same type verifies (the receiver, the spill drain) and signs (this crate's tests and the
//! local run, through `src/bin/slack-sign.rs`).

use claimonce::prelude::*;
use claimonce::verify::{
    HeaderMap, SigningKeys, Verified, decode_lower_hex, lower_hex, signature_header,
};

/// The signature header (lower case).
pub const SIGNATURE: &str = "x-slack-signature";
/// The signed time's header (lower case).
pub const TIMESTAMP: &str = "x-slack-request-timestamp";

/// Verifies and signs Slack's v0 signature.
#[derive(Debug, Clone)]
pub struct SlackSignature {
    keys: SigningKeys,
    tolerance: u64,
}

impl SlackSignature {
    /// Accepts a signature made with any of `secrets` (the old and the new one while an app's
    /// secret is rotated) whose timestamp is within `tolerance` seconds of the receiver's clock.
    /// `None` without a secret.
    pub fn new(secrets: &[&str], tolerance: u64) -> Option<Self> {
        let keys = SigningKeys::new(secrets.iter().map(|s| s.as_bytes().to_vec()).collect())?;
        Some(Self { keys, tolerance })
    }
}

fn malformed(detail: &'static str) -> Rejection {
    Rejection::new(Problem::MalformedSignature, detail)
}

impl Verify for SlackSignature {
    fn authenticate(&self, headers: &HeaderMap, body: &[u8]) -> Result<Verified, Rejection> {
        let signature = signature_header(headers, SIGNATURE)?.ok_or_else(|| {
            Rejection::new(Problem::MissingSignature, "X-Slack-Signature is missing")
        })?;
        let timestamp = signature_header(headers, TIMESTAMP)?.ok_or_else(|| {
            Rejection::new(
                Problem::MissingSignature,
                "X-Slack-Request-Timestamp is missing",
            )
        })?;
        let ts = timestamp
            .parse::<u64>()
            .map_err(|_| malformed("X-Slack-Request-Timestamp is not a unix time"))?;
        let tag = signature
            .strip_prefix("v0=")
            .and_then(decode_lower_hex)
            .ok_or_else(|| {
                malformed("X-Slack-Signature is not v0= and 64 lower-case hex digits")
            })?;
        self.keys
            .check(&[b"v0:", timestamp.as_bytes(), b":", body], &[tag])?;
        Ok(Verified::at(ts))
    }

    fn tolerance(&self) -> u64 {
        self.tolerance
    }

    fn signature_headers(&self) -> &[&'static str] {
        &[SIGNATURE, TIMESTAMP]
    }
}

impl Sign for SlackSignature {
    fn sign(&self, body: &[u8], now: u64, _id: &str) -> Vec<(String, String)> {
        let ts = now.to_string();
        let tag = self.keys.first_tag(&[b"v0:", ts.as_bytes(), b":", body]);
        vec![
            (SIGNATURE.to_owned(), format!("v0={}", lower_hex(&tag))),
            (TIMESTAMP.to_owned(), ts),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Slack's published example ("Verifying requests from Slack"): its signing secret,
    /// timestamp and slash-command body give this signature.
    const SLACK_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
    const SLACK_TS: u64 = 1_531_420_618;
    const SLACK_BODY: &str = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
    const SLACK_SIGNATURE: &str =
        "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";

    fn headers(signature: &str, ts: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(SIGNATURE, signature.parse().expect("a header value"));
        headers.insert(TIMESTAMP, ts.parse().expect("a header value"));
        headers
    }

    #[test]
    fn slack_s_published_example_verifies_and_signs_the_same() {
        let scheme = SlackSignature::new(&[SLACK_SECRET], 300).expect("a secret");
        let verified = scheme
            .verify(
                &headers(SLACK_SIGNATURE, &SLACK_TS.to_string()),
                SLACK_BODY.as_bytes(),
                SLACK_TS + 60,
            )
            .expect("Slack's own example verifies");
        assert_eq!(verified.signed_at, Some(SLACK_TS));
        assert_eq!(
            scheme.sign(SLACK_BODY.as_bytes(), SLACK_TS, ""),
            [
                (SIGNATURE.to_owned(), SLACK_SIGNATURE.to_owned()),
                (TIMESTAMP.to_owned(), SLACK_TS.to_string())
            ]
        );
    }

    #[test]
    fn a_changed_body_a_stale_time_or_a_malformed_header_is_refused() {
        let scheme = SlackSignature::new(&[SLACK_SECRET], 300).expect("a secret");
        let ts = SLACK_TS.to_string();
        let problem = |h: &HeaderMap, body: &str, now: u64| {
            scheme
                .verify(h, body.as_bytes(), now)
                .map(drop)
                .map_err(|r| r.problem)
        };
        let good = headers(SLACK_SIGNATURE, &ts);
        assert_eq!(
            problem(&good, &format!("{SLACK_BODY}x"), SLACK_TS),
            Err(Problem::SignatureMismatch)
        );
        assert_eq!(
            problem(&good, SLACK_BODY, SLACK_TS + 301),
            Err(Problem::StaleTimestamp)
        );
        // The timestamp is signed: another one is another signature.
        assert_eq!(
            problem(
                &headers(SLACK_SIGNATURE, "1531420619"),
                SLACK_BODY,
                SLACK_TS
            ),
            Err(Problem::SignatureMismatch)
        );
        for (signature, time) in [
            (
                "a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503",
                ts.as_str(),
            ),
            (
                "v1=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503",
                ts.as_str(),
            ),
            ("v0=A2114D57", ts.as_str()),
            (SLACK_SIGNATURE, "soon"),
        ] {
            assert_eq!(
                problem(&headers(signature, time), SLACK_BODY, SLACK_TS),
                Err(Problem::MalformedSignature),
                "{signature} {time}"
            );
        }
        assert_eq!(
            problem(&HeaderMap::new(), SLACK_BODY, SLACK_TS),
            Err(Problem::MissingSignature)
        );
    }
}
