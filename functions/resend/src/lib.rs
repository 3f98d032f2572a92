//! Resend: Standard Webhooks signatures (sent through Svix), Resend's `{type, created_at, data}`
//! body, and the reference effects (record every email event, suppress bounced and
//! complaining addresses).

use claimonce::config;
use claimonce::prelude::*;
use claimonce::timestamp::is_rfc3339;
use claimonce::verify::standard_webhooks::StandardWebhooks;
use serde::Deserialize;
use serde_json::value::RawValue;

/// The Resend receiver's provider half.
#[derive(Debug, Clone)]
pub struct Resend {
    verifier: StandardWebhooks,
}

impl Resend {
    /// A provider that accepts signatures from any of `secrets` (`whsec_<base64>`).
    pub fn new(secrets: &[&str], tolerance: u64) -> Result<Self, ConfigError> {
        let verifier = StandardWebhooks::new(secrets, tolerance).map_err(|_| {
            ConfigError::new(
                "RESEND_WEBHOOK_SECRET must hold one or more whsec_<base64> secrets".into(),
            )
        })?;
        Ok(Self { verifier })
    }

    /// From the secrets' text, comma-separated during a rotation (`RESEND_WEBHOOK_SECRET`, or the
    /// secret `RESEND_WEBHOOK_SECRET_ARN` names: `claimonce::secrets`) and `WEBHOOK_TOLERANCE_SECONDS`.
    pub fn from_secret(raw: &str) -> Result<Self, ConfigError> {
        Self::new(&split_secrets(raw), config::tolerance_seconds()?)
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

/// Reads a Resend body. The event id is the signed `svix-id`/`webhook-id` header: Resend's
/// bodies carry none.
pub fn parse_event(
    message_id: Option<&EventId>,
    body: &[u8],
) -> Result<Parsed<ResendEvent>, Rejection> {
    let event_id = message_id
        .cloned()
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
        .chain([&envelope.event_type])
        .any(|s| s.contains('\0'))
    {
        return Err(invalid(
            "the event carries a NUL character, which cannot be stored",
        ));
    }
    Ok(Parsed::new(event_id, envelope.event_type, event))
}

/// The event's effect, given its id and type: every `email.*` event is recorded, and the
/// recipients of a suppressing one are suppressed (`resend_record_v2`, migration V9: an event
/// claimed again after its ledger row was swept keeps its first row instead of failing).
pub fn effect(id: &str, event_type: &str, event: &ResendEvent) -> Option<Effect> {
    let ResendEvent::Email(email) = event else {
        return None;
    };
    let suppress = email.suppress.filter(|_| !email.recipients.is_empty());
    Some(Effect::call(
        "resend_record_v2",
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
    type Rust<'e> = NoRustEffect;

    // The registry entry: the provider's name and secret variable, written once, there.
    const MANIFEST: &'static str = include_str!("../Cargo.toml");

    fn verifier(&self) -> Option<&dyn Scheme> {
        Some(&self.verifier)
    }

    fn parse(
        &self,
        signed: &Signed<'_>,
        _unsigned: &Unsigned<'_>,
    ) -> Result<Parsed<ResendEvent>, Rejection> {
        parse_event(signed.message_id(), signed.body())
    }

    fn plan<'e>(&'e self, event: &'e Parsed<ResendEvent>) -> Plan<NoRustEffect> {
        effect(event.event_id.as_str(), &event.event_type, &event.event).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verified() -> EventId {
        EventId::new("msg_1").expect("an id")
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
        let parsed = parse_event(Some(&verified()), body).expect("valid");
        assert_eq!(parsed.event_id.as_str(), "msg_1");
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
            parse_event(Some(&verified()), body).expect("valid").event,
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
            assert!(parse_event(Some(&verified()), body).is_err());
        }
    }
}
