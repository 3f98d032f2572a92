//! Acme: a team's own sender, received exactly once with claimonce, from a crate kept outside
//! the claimonce repository.
//!
//! Acme signs `X-Acme-Signature: sha256=<hex>` (the HMAC-SHA256 of the raw body) and puts the
//! event's id, type and data in the signed body, so the ledger key is the body's own `id`.
//! `credit.granted` credits an account: Rust on the claim's transaction ([`credit`]), two
//! statements that the database accepts only under a claim that transaction won (this
//! crate's migration, row-level security through `claimonce_claim_held_v1`). Every other
//! type is claimed and answered `ignored`.

use claimonce::config::ConfigError;
use claimonce::migrate::Migration;
use claimonce::verify::body_hmac::{BodyHmac, Encoding};
use claimonce::verify::{Verify, split_secrets};
use claimonce::{
    Effect, EffectError, EventId, Parsed, Problem, Provider, Rejection, Signed, Tx, Type, Unsigned,
};
use serde::Deserialize;

/// The ledger namespace and route segment: `POST /webhooks/acme`.
pub const PROVIDER: &str = "acme";
/// The header Acme signs with (lower case).
pub const SIGNATURE_HEADER: &str = "x-acme-signature";

/// This crate's migrations, applied after claimonce's shared ones. Numbered from 10000 up, the
/// range claimonce leaves to provider crates outside its repository.
pub const MIGRATIONS: &[Migration] = &[Migration {
    version: 10000,
    name: "acme_accounts",
    sql: include_str!("../migrations/V10000__acme_accounts.sql"),
}];

/// The Acme receiver's provider half.
#[derive(Debug, Clone)]
pub struct Acme {
    verifier: BodyHmac,
}

impl Acme {
    /// A provider that accepts signatures from any of `secrets` (several during a rotation).
    pub fn new(secrets: &[&str]) -> Result<Self, ConfigError> {
        BodyHmac::new(SIGNATURE_HEADER, "sha256=", Encoding::LowerHex, secrets)
            .map(|verifier| Self { verifier })
            .ok_or_else(|| ConfigError::new("ACME_WEBHOOK_SECRET holds no secret".into()))
    }

    /// From the secrets' text, comma-separated during a rotation.
    pub fn from_secret(raw: &str) -> Result<Self, ConfigError> {
        Self::new(&split_secrets(raw))
    }
}

/// What an event does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AcmeEvent {
    /// `credit.granted`: add to an account's balance.
    Credit(Credit),
    /// Any other type: claimed, answered `ignored`.
    Other,
}

/// A credit to an account.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Credit {
    /// The account credited.
    pub account: String,
    /// The amount, in the currency's smallest unit; more than 0.
    pub amount_cents: i64,
    /// ISO 4217, three upper-case letters.
    pub currency: String,
}

#[derive(Deserialize)]
struct Body {
    id: String,
    #[serde(rename = "type")]
    kind: String,
    data: serde_json::Value,
}

fn invalid(detail: &'static str) -> Rejection {
    Rejection::new(Problem::InvalidPayload, detail)
}

/// Reads a verified Acme delivery: everything from the signed body, nothing from headers.
pub fn parse_event(signed: &Signed<'_>) -> Result<Parsed<AcmeEvent>, Rejection> {
    let body: Body =
        serde_json::from_slice(signed.body()).map_err(|_| invalid("the body is not an event"))?;
    if body.kind.is_empty() || body.kind.len() > 64 {
        return Err(invalid("the event type is empty or too long"));
    }
    let event = match body.kind.as_str() {
        "credit.granted" => {
            let credit: Credit = serde_json::from_value(body.data)
                .map_err(|_| invalid("the data is not a credit"))?;
            let account_ok = (1..=64).contains(&credit.account.len())
                && credit
                    .account
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_');
            if !account_ok {
                return Err(invalid("the account is not an account id"));
            }
            if credit.amount_cents <= 0 {
                return Err(invalid("a credit's amount is more than 0"));
            }
            if credit.currency.len() != 3
                || !credit.currency.bytes().all(|b| b.is_ascii_uppercase())
            {
                return Err(invalid("the currency is not an ISO 4217 code"));
            }
            AcmeEvent::Credit(credit)
        }
        _ => AcmeEvent::Other,
    };
    Ok(Parsed::new(EventId::new(body.id)?, body.kind, event))
}

/// Credits the account: the credit's own row (keyed by the event, so an application that
/// somehow ran twice would fail on it instead of crediting twice) and the balance.
pub async fn credit(tx: &Tx<'_>, event_id: &EventId, credit: &Credit) -> Result<(), EffectError> {
    tx.execute(
        "INSERT INTO acme_credits (event_id, account, amount_cents, currency) \
         VALUES ($1, $2, $3, $4)",
        &[
            (&event_id.as_str(), Type::TEXT),
            (&credit.account, Type::TEXT),
            (&credit.amount_cents, Type::INT8),
            (&credit.currency, Type::TEXT),
        ],
    )
    .await?;
    tx.execute(
        "INSERT INTO acme_balances AS b (account, currency, balance_cents) VALUES ($1, $2, $3) \
         ON CONFLICT (account, currency) DO UPDATE \
         SET balance_cents = b.balance_cents + EXCLUDED.balance_cents, updated_at = now()",
        &[
            (&credit.account, Type::TEXT),
            (&credit.currency, Type::TEXT),
            (&credit.amount_cents, Type::INT8),
        ],
    )
    .await?;
    Ok(())
}

impl Provider for Acme {
    type Event = AcmeEvent;

    fn name(&self) -> &'static str {
        PROVIDER
    }

    fn verifier(&self) -> Option<&dyn Verify> {
        Some(&self.verifier)
    }

    fn parse(
        &self,
        signed: &Signed<'_>,
        _unsigned: &Unsigned<'_>,
    ) -> Result<Parsed<AcmeEvent>, Rejection> {
        parse_event(signed)
    }

    fn effect(&self, event: &Parsed<AcmeEvent>) -> Option<Effect> {
        match event.event {
            AcmeEvent::Credit(_) => Some(Effect::in_rust()),
            AcmeEvent::Other => None,
        }
    }

    async fn apply(&self, event: &Parsed<AcmeEvent>, tx: &Tx<'_>) -> Result<(), EffectError> {
        match &event.event {
            AcmeEvent::Credit(c) => credit(tx, &event.event_id, c).await,
            AcmeEvent::Other => Err(EffectError::failed("only a credit has an effect")),
        }
    }
}
