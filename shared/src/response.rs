//! The response policy, in one place: every delivery ends as a [`Disposition`], and each
//! disposition has exactly one status code and body.
//!
//! 200 for processed, duplicate and ignored; 400 (RFC 9457 `application/problem+json`) for a
//! request that can never succeed; 500 with a generic body for a failure on our side.

use http::{Response, StatusCode, header};
use serde::Serialize;

/// Why a request was refused. Every variant is a request that can never succeed as sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Problem {
    /// No signature header (or not all the headers the scheme needs).
    MissingSignature,
    /// A signature header that cannot be parsed.
    MalformedSignature,
    /// A well-formed signature that no configured secret produced.
    SignatureMismatch,
    /// A valid signature whose timestamp is outside the tolerance window.
    StaleTimestamp,
    /// A correctly signed body that is not an event of this provider.
    InvalidPayload,
    /// A request body that could not be read (bad base64 transfer encoding).
    UnreadableBody,
    /// A body larger than the stated limit.
    PayloadTooLarge,
    /// Any method but POST.
    MethodNotAllowed,
}

impl Problem {
    /// The HTTP status this problem is answered with.
    pub fn status(self) -> StatusCode {
        match self {
            Problem::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Problem::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            _ => StatusCode::BAD_REQUEST,
        }
    }

    /// A stable, machine-readable name (also the last segment of the problem type URI).
    pub fn slug(self) -> &'static str {
        match self {
            Problem::MissingSignature => "missing-signature",
            Problem::MalformedSignature => "malformed-signature",
            Problem::SignatureMismatch => "signature-mismatch",
            Problem::StaleTimestamp => "stale-timestamp",
            Problem::InvalidPayload => "invalid-payload",
            Problem::UnreadableBody => "unreadable-body",
            Problem::PayloadTooLarge => "payload-too-large",
            Problem::MethodNotAllowed => "method-not-allowed",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Problem::MissingSignature => "Missing webhook signature",
            Problem::MalformedSignature => "Malformed webhook signature",
            Problem::SignatureMismatch => "Webhook signature does not match",
            Problem::StaleTimestamp => "Webhook timestamp outside tolerance",
            Problem::InvalidPayload => "Signed body is not a valid event",
            Problem::UnreadableBody => "Request body could not be read",
            Problem::PayloadTooLarge => "Request body too large",
            Problem::MethodNotAllowed => "Method not allowed",
        }
    }
}

/// A refused request: the problem and a fixed, specific detail. The detail is always a
/// static sentence so that no header, signature or body byte can leak into it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// What kind of problem.
    pub problem: Problem,
    /// One sentence for the sender's operator.
    pub detail: &'static str,
}

impl Rejection {
    /// A rejection with its detail sentence.
    pub fn new(problem: Problem, detail: &'static str) -> Self {
        Self { problem, detail }
    }
}

/// A provider's own answer to a verified delivery that is not an event but its sender checking
/// the endpoint (Slack's `url_verification`, whose `challenge` must come back): a small JSON
/// object, answered 200 with no claim and nothing written ([`crate::prelude::Provider::handshake`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handshake(String);

impl Handshake {
    /// The largest answer, in bytes: a handshake echoes a token, never a payload.
    pub const MAX_BYTES: usize = 4096;

    /// The answer `object`, which must be a JSON object of at most [`Handshake::MAX_BYTES`]
    /// bytes as written; anything else is a 400 (`invalid-payload`), as what the sender asked
    /// for cannot be answered.
    pub fn json(object: &serde_json::Value) -> Result<Self, Rejection> {
        let refused = || {
            Rejection::new(
                Problem::InvalidPayload,
                "the handshake's answer would not be a JSON object of at most 4096 bytes",
            )
        };
        if !object.is_object() {
            return Err(refused());
        }
        let text = serde_json::to_string(object).map_err(|_| refused())?;
        if text.len() > Self::MAX_BYTES {
            return Err(refused());
        }
        Ok(Self(text))
    }

    /// The answer's body.
    pub fn body(&self) -> &str {
        &self.0
    }
}

/// How a delivery ended. Each one is logged with this name and answered with one status.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Disposition {
    /// The claim was won and the effect committed with it.
    Processed,
    /// The event was claimed before; nothing was applied.
    Duplicate,
    /// Claimed, but this event type has no effect.
    Ignored,
    /// Refused before any database work.
    Rejected(Rejection),
    /// A failure on our side; the transaction rolled back and the sender will retry.
    Error,
    /// The database could not take it; the verified delivery is on the provider's spill
    /// queue, to be applied through the same claim when the database is back.
    Queued,
    /// A verified handshake, answered with the provider's own body; nothing claimed.
    Handshake(Handshake),
}

impl Disposition {
    /// Processed, ignored or duplicate: the claim holds the event, and its sender or queue
    /// need not send it again.
    pub fn applied(&self) -> bool {
        matches!(
            self,
            Disposition::Processed | Disposition::Ignored | Disposition::Duplicate
        )
    }

    /// The name used in logs, metrics and the 200 body.
    pub fn name(&self) -> &'static str {
        match self {
            Disposition::Processed => "processed",
            Disposition::Duplicate => "duplicate",
            Disposition::Ignored => "ignored",
            Disposition::Rejected(_) => "rejected",
            Disposition::Error => "error",
            Disposition::Queued => "queued",
            Disposition::Handshake(_) => "handshake",
        }
    }

    /// The HTTP status for this disposition.
    pub fn status(&self) -> StatusCode {
        match self {
            Disposition::Processed
            | Disposition::Duplicate
            | Disposition::Ignored
            | Disposition::Queued
            | Disposition::Handshake(_) => StatusCode::OK,
            Disposition::Rejected(r) => r.problem.status(),
            Disposition::Error => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The full HTTP response for this disposition.
    pub fn into_response(self) -> Response<String> {
        let status = self.status();
        let (content_type, body) = match &self {
            Disposition::Processed
            | Disposition::Duplicate
            | Disposition::Ignored
            | Disposition::Queued => (
                "application/json",
                format!("{{\"disposition\":\"{}\"}}", self.name()),
            ),
            Disposition::Handshake(h) => ("application/json", h.body().to_owned()),
            Disposition::Rejected(r) => (
                "application/problem+json",
                problem_json(
                    &format!("https://claimonce.dev/problems/{}", r.problem.slug()),
                    r.problem.title(),
                    status,
                    r.detail,
                ),
            ),
            Disposition::Error => (
                "application/problem+json",
                problem_json(
                    "about:blank",
                    "Internal Server Error",
                    status,
                    "The delivery could not be completed. Retrying it is safe: an event that was \
                     already applied is answered as a duplicate.",
                ),
            ),
        };
        let mut response = Response::new(body);
        *response.status_mut() = status;
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static(content_type),
        );
        if matches!(self, Disposition::Rejected(ref r) if r.problem == Problem::MethodNotAllowed) {
            response
                .headers_mut()
                .insert(header::ALLOW, header::HeaderValue::from_static("POST"));
        }
        response
    }
}

/// An RFC 9457 problem document.
fn problem_json(kind: &str, title: &str, status: StatusCode, detail: &str) -> String {
    #[derive(Serialize)]
    struct Document<'a> {
        #[serde(rename = "type")]
        kind: &'a str,
        title: &'a str,
        status: u16,
        detail: &'a str,
    }
    serde_json::to_string(&Document {
        kind,
        title,
        status: status.as_u16(),
        detail,
    })
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A handshake's answer is a small JSON object, answered 200 as written; anything else is
    /// refused as a payload that cannot be answered.
    #[test]
    fn a_handshake_answers_a_small_json_object_and_nothing_else() {
        let answer = Handshake::json(&serde_json::json!({"challenge": "abc"})).expect("an object");
        let response = Disposition::Handshake(answer).into_response();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.body(), r#"{"challenge":"abc"}"#);
        assert_eq!(
            response
                .headers()
                .get(header::CONTENT_TYPE)
                .map(|v| v.as_bytes()),
            Some(&b"application/json"[..])
        );
        let big = "x".repeat(Handshake::MAX_BYTES);
        for refused in [
            serde_json::json!("abc"),
            serde_json::json!(["abc"]),
            serde_json::json!({ "challenge": big }),
        ] {
            assert_eq!(
                Handshake::json(&refused).map_err(|r| r.problem),
                Err(Problem::InvalidPayload)
            );
        }
    }
}
