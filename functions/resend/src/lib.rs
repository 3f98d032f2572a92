//! Resend: Standard Webhooks signatures (sent through Svix), Resend's `{type, created_at, data}`
//! body, and the reference effects (record every email event, suppress bounced and
//! complaining addresses).

use claimonce::config::{self, ConfigError};
use claimonce::verify::standard_webhooks::StandardWebhooks;
use claimonce::verify::{Verified, Verify, split_secrets};
use claimonce::{Effect, Param, Parsed, Problem, Provider, Rejection, Type};
use serde::Deserialize;
use serde_json::value::RawValue;

/// The ledger namespace.
pub const PROVIDER: &str = "resend";

/// The Resend receiver's provider half.
#[derive(Debug, Clone)]
pub struct Resend {
    verifier: StandardWebhooks,
}

impl Resend {
    /// A provider that accepts signatures from any of `secrets` (`whsec_<base64>`).
    pub fn new(secrets: &[&str], tolerance: u64) -> Result<Self, ConfigError> {
        let verifier = StandardWebhooks::new(secrets, tolerance).map_err(|_| {
            ConfigError("RESEND_WEBHOOK_SECRET must hold one or more whsec_<base64> secrets".into())
        })?;
        Ok(Self { verifier })
    }

    /// From `RESEND_WEBHOOK_SECRET` (comma-separated during a rotation) and
    /// `WEBHOOK_TOLERANCE_SECONDS`.
    pub fn from_env() -> Result<Self, ConfigError> {
        let raw = config::required("RESEND_WEBHOOK_SECRET")?;
        Self::new(&split_secrets(&raw), config::tolerance_seconds()?)
    }
}

/// What an `email.*` event carries for the effects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmailEvent {
    /// `data.email_id`.
    pub email_id: Option<String>,
    /// `data.to`, trimmed and lower-cased.
    pub recipients: Vec<String>,
    /// The body's `created_at` (an RFC 3339 timestamp PostgreSQL accepts), when present.
    pub occurred_at: Option<String>,
    /// `Some("bounced" | "complained")` when the recipients must be suppressed.
    pub suppress: Option<&'static str>,
}

/// The events this receiver acts on; every other type is claimed and ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResendEvent {
    /// Any `email.*` event.
    Email(EmailEvent),
    /// `contact.*`, `domain.*` and anything else.
    Other,
}

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(rename = "type")]
    event_type: String,
    created_at: Option<String>,
    #[serde(borrow)]
    data: &'a RawValue,
}

#[derive(Deserialize)]
struct EmailData {
    email_id: Option<String>,
    #[serde(default)]
    to: Recipients,
    /// On `email.bounced`: `{"type": "Permanent" | "Transient" | ..., "subType", "message"}`.
    bounce: Option<Bounce>,
}

#[derive(Deserialize)]
struct Bounce {
    #[serde(rename = "type")]
    kind: Option<String>,
}

/// `data.to` is a list of addresses; accept a single string too.
#[derive(Deserialize, Default)]
#[serde(untagged)]
enum Recipients {
    List(Vec<String>),
    One(String),
    #[default]
    None,
}

impl Recipients {
    fn normalised(self) -> Vec<String> {
        let list = match self {
            Recipients::List(list) => list,
            Recipients::One(one) => vec![one],
            Recipients::None => Vec::new(),
        };
        let mut out: Vec<String> = list
            .into_iter()
            .map(|a| a.trim().to_lowercase())
            .filter(|a| !a.is_empty())
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

fn invalid(detail: &'static str) -> Rejection {
    Rejection::new(Problem::InvalidPayload, detail)
}

/// True for `YYYY-MM-DDTHH:MM:SS…` with a real calendar date and time and a zone offset of at
/// most 15:59 (PostgreSQL refuses a larger one: "time zone displacement out of range"), so
/// PostgreSQL's cast to `timestamptz` cannot fail on it (a failing cast would fail every
/// retry).
pub fn is_rfc3339(s: &str) -> bool {
    let b = s.as_bytes();
    let num = |from: usize, to: usize| -> Option<u32> {
        s.get(from..to)
            .filter(|d| d.bytes().all(|c| c.is_ascii_digit()))?
            .parse()
            .ok()
    };
    let sep = |i: usize, c: &[u8]| b.get(i).is_some_and(|x| c.contains(x));
    let (Some(y), Some(mo), Some(d), Some(h), Some(mi), Some(se)) = (
        num(0, 4),
        num(5, 7),
        num(8, 10),
        num(11, 13),
        num(14, 16),
        num(17, 19),
    ) else {
        return false;
    };
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days = match mo {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    let zone_ok = {
        // After the seconds: optional fraction, then Z or ±HH:MM.
        let rest = s.get(19..).unwrap_or("");
        let rest = match rest.strip_prefix('.') {
            Some(frac) => frac.trim_start_matches(|c: char| c.is_ascii_digit()),
            None => rest,
        };
        rest == "Z"
            || rest == "z"
            || (rest.len() == 6
                && (rest.starts_with('+') || rest.starts_with('-'))
                && rest
                    .get(1..3)
                    .and_then(|h| h.parse::<u32>().ok())
                    .is_some_and(|h| h < 16)
                && rest.get(3..4) == Some(":")
                && rest
                    .get(4..6)
                    .and_then(|m| m.parse::<u32>().ok())
                    .is_some_and(|m| m < 60))
    };
    y >= 1
        && sep(4, b"-")
        && sep(7, b"-")
        && sep(10, b"Tt ")
        && sep(13, b":")
        && sep(16, b":")
        && (1..=days).contains(&d)
        && h < 24
        && mi < 60
        && se < 60
        && zone_ok
}

/// Reads a Resend body. The event id is the signed `svix-id`/`webhook-id` header: Resend's
/// bodies carry none.
pub fn parse_event(verified: &Verified, body: &[u8]) -> Result<Parsed<ResendEvent>, Rejection> {
    let event_id = verified
        .message_id
        .clone()
        .ok_or_else(|| invalid("the delivery has no message id"))?;
    let envelope: Envelope<'_> = serde_json::from_slice(body)
        .map_err(|_| invalid("the signed body is not a Resend event"))?;
    let event = if envelope.event_type.starts_with("email.") {
        let data: EmailData = serde_json::from_str(envelope.data.get())
            .map_err(|_| invalid("data is not an email event"))?;
        // Stored, a timestamp PostgreSQL refuses would fail every retry with a 500: a body
        // carrying one can never succeed.
        if envelope
            .created_at
            .as_deref()
            .is_some_and(|t| !is_rfc3339(t))
        {
            return Err(invalid("created_at is not an RFC 3339 timestamp"));
        }
        let transient = data
            .bounce
            .as_ref()
            .and_then(|b| b.kind.as_deref())
            .is_some_and(|k| k.eq_ignore_ascii_case("transient"));
        ResendEvent::Email(EmailEvent {
            email_id: data.email_id,
            recipients: data.to.normalised(),
            occurred_at: envelope.created_at,
            suppress: match envelope.event_type.as_str() {
                // A full mailbox or a busy server is no reason never to write to someone
                // again: only a bounce Resend does not call transient suppresses. Resend
                // defines email.bounced as a permanent rejection, so one without a type
                // suppresses too. The payload names no recipient per bounce, so with several
                // in `to` every one of them is suppressed.
                "email.bounced" if transient => None,
                "email.bounced" => Some("bounced"),
                "email.complained" => Some("complained"),
                _ => None,
            },
        })
    } else {
        ResendEvent::Other
    };
    // PostgreSQL's `text` cannot hold U+0000 (JSON's `\u0000`): the same, for every string
    // that is stored.
    let stored = match &event {
        ResendEvent::Email(email) => email.email_id.iter().chain(&email.recipients).collect(),
        ResendEvent::Other => Vec::new(),
    };
    if stored
        .into_iter()
        .chain([&event_id, &envelope.event_type])
        .any(|s| s.contains('\0'))
    {
        return Err(invalid(
            "the event carries a NUL character, which cannot be stored",
        ));
    }
    Ok(Parsed {
        event_id,
        event_type: envelope.event_type,
        event,
    })
}

/// The event's effect, given its id and type: every `email.*` event is recorded, and the
/// recipients of a suppressing one are suppressed (`resend_record_v1`, migration V6).
pub fn effect(id: &str, event_type: &str, event: &ResendEvent) -> Option<Effect> {
    let ResendEvent::Email(email) = event else {
        return None;
    };
    let suppress = email.suppress.filter(|_| !email.recipients.is_empty());
    Some(Effect::call(
        "resend_record_v1",
        vec![
            Param::new(id.to_owned(), Type::TEXT),
            Param::new(email.email_id.clone(), Type::TEXT),
            Param::new(event_type.to_owned(), Type::TEXT),
            Param::new(email.recipients.clone(), Type::TEXT_ARRAY),
            Param::new(email.occurred_at.clone(), Type::TEXT),
            Param::new(suppress, Type::TEXT),
        ],
    ))
}

impl Provider for Resend {
    type Event = ResendEvent;

    fn name(&self) -> &'static str {
        PROVIDER
    }

    fn verifier(&self) -> &dyn Verify {
        &self.verifier
    }

    fn parse(&self, verified: &Verified, body: &[u8]) -> Result<Parsed<ResendEvent>, Rejection> {
        parse_event(verified, body)
    }

    fn effect(&self, event: &Parsed<ResendEvent>) -> Option<Effect> {
        effect(&event.event_id, &event.event_type, &event.event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verified() -> Verified {
        Verified {
            message_id: Some("msg_1".into()),
        }
    }

    #[test]
    fn reads_a_bounce_as_resend_documents_it() {
        let body = br#"{"type":"email.bounced","created_at":"2024-11-22T23:41:12.126Z",
            "data":{"broadcast_id":"8b146471-e88e-4322-86af-016cd36fd216",
            "created_at":"2024-11-22T23:41:11.894719+00:00",
            "email_id":"56761188-7520-42d8-8898-ff6fc54ce618",
            "from":"Acme <onboarding@resend.dev>","to":["Delivered@Resend.dev "],
            "subject":"Sending this example",
            "bounce":{"message":"The recipient's email address is on the suppression list.",
            "subType":"Suppressed","type":"Permanent"}}}"#;
        let parsed = parse_event(&verified(), body).expect("valid");
        assert_eq!(parsed.event_id, "msg_1");
        assert_eq!(parsed.event_type, "email.bounced");
        assert_eq!(
            parsed.event,
            ResendEvent::Email(EmailEvent {
                email_id: Some("56761188-7520-42d8-8898-ff6fc54ce618".into()),
                recipients: vec!["delivered@resend.dev".into()],
                occurred_at: Some("2024-11-22T23:41:12.126Z".into()),
                suppress: Some("bounced"),
            })
        );
    }

    #[test]
    fn contact_and_domain_events_are_ignored() {
        let body = br#"{"type":"contact.created","created_at":"2024-11-22T23:41:12.126Z",
            "data":{"id":"e169aa45-1ecf-4183-9955-b1499d5701d3","email":"x@example.com"}}"#;
        assert_eq!(
            parse_event(&verified(), body).expect("valid").event,
            ResendEvent::Other
        );
    }

    #[test]
    fn not_an_event_is_invalid() {
        for body in [
            &b"[]"[..],
            b"{}",
            br#"{"type":"email.sent","data":[1]}"#,
            b"\xff",
        ] {
            assert!(parse_event(&verified(), body).is_err());
        }
    }

    #[test]
    fn timestamps_postgres_would_refuse_are_not_passed_on() {
        for ok in [
            "2024-11-22T23:41:12.126Z",
            "2024-02-29T00:00:00+00:00",
            "2024-11-22 23:41:11.894719+00:00",
            "2024-11-22T23:41:11-15:59",
        ] {
            assert!(is_rfc3339(ok), "{ok}");
        }
        for bad in [
            "2023-02-29T00:00:00Z",
            "2024-13-01T00:00:00Z",
            "2024-11-22T24:00:00Z",
            "2024-11-22",
            "yesterday",
            "2024-11-22T23:41:12+0100",
            "2024-11-22T23:41:12+16:00",
            "2024-11-22T23:41:12.5-23:59",
            "",
        ] {
            assert!(!is_rfc3339(bad), "{bad}");
        }
    }
}
