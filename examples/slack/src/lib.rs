//! Slack's Events API, received exactly once with claimonce from a crate kept outside the
//! claimonce repository, with its own signature scheme ([`scheme`]) and its endpoint check
//! answered through the provider.
//!
//! Slack's deliveries are JSON bodies of three kinds (the Events API documentation):
//! - `url_verification`: Slack checking the endpoint, which must answer with the `challenge` it
//!   sent. A handshake ([`Provider::handshake`]): answered `{"challenge": …}`, nothing claimed;
//! - `event_callback`: an event, keyed in the ledger by the body's `event_id`; its type is the
//!   inner `event.type`. Each is recorded once in `slack_events`, in Rust on the claim's
//!   transaction ([`record`]);
//! - `app_rate_limited`: Slack saying it is holding events back; acknowledged (`{"ok": true}`),
//!   nothing claimed, as it names no event.
//!
//! Slack resends an event it got no answer to within three seconds, with `X-Slack-Retry-Num`
//! and `X-Slack-Retry-Reason`: unsigned, logged as the delivery's attempt, never deciding
//! anything. A retry of an applied event is a duplicate.

pub mod scheme;

use claimonce::migrate::Migration;
use claimonce::prelude::*;
use serde::Deserialize;

pub use scheme::SlackSignature;

/// This crate's migrations, applied after claimonce's shared ones: what `migrations/` holds,
/// listed by `build.rs` (numbered from 10000 up).
pub const MIGRATIONS: &[Migration] = include!(concat!(env!("OUT_DIR"), "/migrations.rs"));

/// The Slack receiver's provider half.
#[derive(Debug, Clone)]
pub struct Slack {
    signature: SlackSignature,
}

impl Slack {
    /// A provider that accepts signatures from any of `secrets` (two during a rotation) within
    /// `tolerance` seconds.
    pub fn new(secrets: &[&str], tolerance: u64) -> Result<Self, ConfigError> {
        SlackSignature::new(secrets, tolerance)
            .map(|signature| Self { signature })
            .ok_or_else(|| ConfigError::new("SLACK_WEBHOOK_SECRET holds no secret".into()))
    }

    /// From the secret variable's value (comma-separated during a rotation) and
    /// `WEBHOOK_TOLERANCE_SECONDS`, claimonce's setting for every scheme with a signed time.
    pub fn from_secret(raw: &str) -> Result<Self, ConfigError> {
        Self::new(&split_secrets(raw), claimonce::config::tolerance_seconds()?)
    }
}

/// An event's record: what `slack_events` keeps of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlackEvent {
    /// The workspace, `team_id`.
    pub team: String,
    /// `event.channel`, when the event has one.
    pub channel: Option<String>,
    /// `event.event_ts`, Slack's own time of the event.
    pub event_ts: String,
}

/// The body's kind, read first: a handshake needs nothing else.
#[derive(Deserialize)]
struct Kind {
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Deserialize)]
struct Challenge {
    challenge: String,
}

#[derive(Deserialize)]
struct Callback {
    event_id: String,
    team_id: String,
    event: Inner,
}

#[derive(Deserialize)]
struct Inner {
    #[serde(rename = "type")]
    kind: String,
    channel: Option<String>,
    event_ts: String,
}

fn invalid(detail: &'static str) -> Rejection {
    Rejection::new(Problem::InvalidPayload, detail)
}

fn kind(signed: &Signed<'_>) -> Result<String, Rejection> {
    serde_json::from_slice::<Kind>(signed.body())
        .map(|k| k.kind)
        .map_err(|_| invalid("the body is not a Slack Events API payload"))
}

/// Slack's ids and times: short, of letters, digits and `.`, `_` or `-`.
fn plain(value: &str, max: usize) -> bool {
    (1..=max).contains(&value.len())
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Reads a verified `event_callback`: everything that decides the effect comes from the signed
/// body; the retry headers are only logged.
pub fn parse_event(
    signed: &Signed<'_>,
    unsigned: &Unsigned<'_>,
) -> Result<Parsed<SlackEvent>, Rejection> {
    if kind(signed)? != "event_callback" {
        return Err(invalid(
            "not an event_callback, url_verification or app_rate_limited",
        ));
    }
    let body: Callback = serde_json::from_slice(signed.body())
        .map_err(|_| invalid("the event_callback lacks its event_id, team_id or event"))?;
    if !plain(&body.event_id, 64) || !plain(&body.team_id, 64) || !plain(&body.event.event_ts, 32) {
        return Err(invalid(
            "an id or time of the event is not one Slack writes",
        ));
    }
    if !plain(&body.event.kind, 64) || body.event.channel.as_deref().is_some_and(|c| !plain(c, 64))
    {
        return Err(invalid(
            "the event's type or channel is not one Slack writes",
        ));
    }
    let mut parsed = Parsed::new(
        EventId::new(body.event_id)?,
        body.event.kind,
        SlackEvent {
            team: body.team_id,
            channel: body.event.channel,
            event_ts: body.event.event_ts,
        },
    );
    // Which attempt this is, for the operator reading the log: "2 http_timeout".
    if let Some(num) = unsigned.header("x-slack-retry-num")? {
        let reason = unsigned
            .header("x-slack-retry-reason")?
            .unwrap_or("unknown");
        if plain(num, 8) && plain(reason, 64) {
            parsed.delivery_id = Some(EventId::new(format!("retry {num} {reason}"))?);
        }
    }
    Ok(parsed)
}

/// The answer to a delivery that names no event, or `None` for an event.
pub fn handshake_of(signed: &Signed<'_>) -> Option<Result<Handshake, Rejection>> {
    match kind(signed) {
        Ok(kind) if kind == "url_verification" => Some(
            serde_json::from_slice::<Challenge>(signed.body())
                .map_err(|_| invalid("the url_verification has no challenge"))
                .and_then(|c| Handshake::json(&serde_json::json!({ "challenge": c.challenge }))),
        ),
        Ok(kind) if kind == "app_rate_limited" => {
            Some(Handshake::json(&serde_json::json!({ "ok": true })))
        }
        _ => None,
    }
}

/// Records the event: its row, keyed by the event, written only under the claim.
pub async fn record(
    tx: &Tx<'_>,
    event_id: &EventId,
    kind: &str,
    event: &SlackEvent,
) -> Result<(), EffectError> {
    tx.execute(
        "INSERT INTO slack_events (event_id, team_id, event_type, channel, event_ts) \
         VALUES ($1, $2, $3, $4, $5)",
        &[
            Param::new(event_id.as_str(), Type::TEXT),
            Param::new(&event.team, Type::TEXT),
            Param::new(kind, Type::TEXT),
            Param::new(&event.channel, Type::TEXT),
            Param::new(&event.event_ts, Type::TEXT),
        ],
    )
    .await?;
    Ok(())
}

/// An event's effect: [`record`] on the claim's transaction.
#[derive(Debug)]
pub struct Record<'e>(&'e Parsed<SlackEvent>);

impl RustEffect for Record<'_> {
    async fn apply<'a>(&'a self, tx: &'a Tx<'a>) -> Result<(), EffectError> {
        record(tx, &self.0.event_id, &self.0.event_type, &self.0.event).await
    }
}

impl Provider for Slack {
    type Event = SlackEvent;
    type Rust<'e> = Record<'e>;

    // The registry entry: the provider's name and secret variable, written once, there.
    const MANIFEST: &'static str = include_str!("../Cargo.toml");

    fn verifier(&self) -> Option<&dyn Scheme> {
        Some(&self.signature)
    }

    fn handshake(
        &self,
        signed: &Signed<'_>,
        _unsigned: &Unsigned<'_>,
    ) -> Option<Result<Handshake, Rejection>> {
        handshake_of(signed)
    }

    fn parse(
        &self,
        signed: &Signed<'_>,
        unsigned: &Unsigned<'_>,
    ) -> Result<Parsed<SlackEvent>, Rejection> {
        parse_event(signed, unsigned)
    }

    fn plan<'e>(&'e self, event: &'e Parsed<SlackEvent>) -> Plan<Record<'e>> {
        Plan::Rust(Record(event))
    }
}
