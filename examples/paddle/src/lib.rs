//! Paddle Billing's webhooks, received exactly once with claimonce from a crate kept outside
//! the claimonce repository, with a signature scheme claimonce does not ship ([`scheme`]).
//!
//! Paddle puts the event's id, type and entity in the signed body (`event_id`,
//! `event_type`, `data`), so the ledger key is the body's own `event_id`.
//! `transaction.completed` credits the customer's balance in the transaction's currency: Rust
//! on the claim's transaction ([`credit`]), two statements that the database accepts only
//! under a claim that transaction won (this crate's migration, row-level security through
//! `claimonce_claim_held_v1`). Every other type is claimed and answered `ignored`.

pub mod scheme;

use claimonce::migrate::Migration;
use claimonce::prelude::*;
use serde::Deserialize;

pub use scheme::PaddleSignature;

/// This crate's migrations, applied after claimonce's shared ones: what `migrations/` holds,
/// listed by `build.rs`. Numbered from 10000 up, the range claimonce leaves to provider crates
/// outside its repository.
pub const MIGRATIONS: &[Migration] = include!(concat!(env!("OUT_DIR"), "/migrations.rs"));

/// The Paddle receiver's provider half.
#[derive(Debug, Clone)]
pub struct Paddle {
    signature: PaddleSignature,
}

impl Paddle {
    /// A provider that accepts signatures from any of `secrets` (several during a rotation)
    /// within `tolerance` seconds.
    pub fn new(secrets: &[&str], tolerance: u64) -> Result<Self, ConfigError> {
        PaddleSignature::new(secrets, tolerance)
            .map(|signature| Self { signature })
            .ok_or_else(|| ConfigError::new("PADDLE_WEBHOOK_SECRET holds no secret".into()))
    }

    /// From the secrets' text (comma-separated during a rotation) and
    /// `WEBHOOK_TOLERANCE_SECONDS`, claimonce's setting for every scheme with a signed time.
    pub fn from_secret(raw: &str) -> Result<Self, ConfigError> {
        Self::new(&split_secrets(raw), claimonce::config::tolerance_seconds()?)
    }
}

/// What an event does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PaddleEvent {
    /// `transaction.completed`: credit the customer.
    Completed(Credit),
    /// Any other type: claimed, answered `ignored`.
    Other,
}

/// A completed transaction's credit to its customer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credit {
    /// `data.id`, `txn_…`.
    pub transaction: String,
    /// `data.customer_id`, `ctm_…`.
    pub customer: String,
    /// `data.currency_code`, ISO 4217.
    pub currency: String,
    /// `data.details.totals.grand_total`, in the currency's lowest denomination.
    pub amount: i64,
}

#[derive(Deserialize)]
struct Body {
    event_id: String,
    event_type: String,
    data: serde_json::Value,
}

#[derive(Deserialize)]
struct Transaction {
    id: String,
    customer_id: Option<String>,
    currency_code: String,
    details: Details,
}

#[derive(Deserialize)]
struct Details {
    totals: Totals,
}

/// Paddle writes amounts as strings of the lowest denomination.
#[derive(Deserialize)]
struct Totals {
    grand_total: String,
}

fn invalid(detail: &'static str) -> Rejection {
    Rejection::new(Problem::InvalidPayload, detail)
}

/// A Paddle id: `<prefix>_` then lower-case letters and digits (Paddle's pattern is 26 of
/// them; a few more or fewer are taken, a different shape is not).
fn paddle_id(id: &str, prefix: &str) -> bool {
    id.strip_prefix(prefix)
        .and_then(|rest| rest.strip_prefix('_'))
        .is_some_and(|rest| {
            (1..=64).contains(&rest.len())
                && rest
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
}

fn credit_of(data: serde_json::Value) -> Result<Credit, Rejection> {
    let txn: Transaction =
        serde_json::from_value(data).map_err(|_| invalid("the data is not a transaction"))?;
    if !paddle_id(&txn.id, "txn") {
        return Err(invalid("the transaction id is not a Paddle transaction id"));
    }
    let customer = txn
        .customer_id
        .filter(|c| paddle_id(c, "ctm"))
        .ok_or_else(|| invalid("a completed transaction names its customer"))?;
    if txn.currency_code.len() != 3 || !txn.currency_code.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(invalid("the currency is not an ISO 4217 code"));
    }
    let amount = txn
        .details
        .totals
        .grand_total
        .parse::<i64>()
        .ok()
        .filter(|a| *a >= 0)
        .ok_or_else(|| invalid("the grand total is not an amount"))?;
    Ok(Credit {
        transaction: txn.id,
        customer,
        currency: txn.currency_code,
        amount,
    })
}

/// Reads a verified Paddle delivery: everything from the signed body, nothing from headers.
pub fn parse_event(signed: &Signed<'_>) -> Result<Parsed<PaddleEvent>, Rejection> {
    let body: Body =
        serde_json::from_slice(signed.body()).map_err(|_| invalid("the body is not an event"))?;
    if !paddle_id(&body.event_id, "evt") {
        return Err(invalid("the event id is not a Paddle event id"));
    }
    if body.event_type.is_empty() || body.event_type.len() > 64 {
        return Err(invalid("the event type is empty or too long"));
    }
    let event = match body.event_type.as_str() {
        "transaction.completed" => PaddleEvent::Completed(credit_of(body.data)?),
        _ => PaddleEvent::Other,
    };
    Ok(Parsed::new(
        EventId::new(body.event_id)?,
        body.event_type,
        event,
    ))
}

/// Credits the customer: the transaction's own row (keyed by the transaction, so a second
/// application would fail on it instead of crediting twice) and the balance.
pub async fn credit(tx: &Tx<'_>, event_id: &EventId, credit: &Credit) -> Result<(), EffectError> {
    tx.execute(
        "INSERT INTO paddle_credits (transaction_id, event_id, customer_id, currency, amount) \
         VALUES ($1, $2, $3, $4, $5)",
        &[
            Param::new(&credit.transaction, Type::TEXT),
            Param::new(event_id.as_str(), Type::TEXT),
            Param::new(&credit.customer, Type::TEXT),
            Param::new(&credit.currency, Type::TEXT),
            Param::new(credit.amount, Type::INT8),
        ],
    )
    .await?;
    tx.execute(
        "INSERT INTO paddle_balances AS b (customer_id, currency, balance) VALUES ($1, $2, $3) \
         ON CONFLICT (customer_id, currency) DO UPDATE \
         SET balance = b.balance + EXCLUDED.balance, updated_at = now()",
        &[
            Param::new(&credit.customer, Type::TEXT),
            Param::new(&credit.currency, Type::TEXT),
            Param::new(credit.amount, Type::INT8),
        ],
    )
    .await?;
    Ok(())
}

/// A completed transaction's effect: [`credit`] on the claim's transaction.
#[derive(Debug)]
pub struct CreditCustomer<'e>(&'e EventId, &'e Credit);

impl RustEffect for CreditCustomer<'_> {
    async fn apply<'a>(&'a self, tx: &'a Tx<'a>) -> Result<(), EffectError> {
        credit(tx, self.0, self.1).await
    }
}

impl Provider for Paddle {
    type Event = PaddleEvent;
    type Rust<'e> = CreditCustomer<'e>;

    // The registry entry: the provider's name and secret variable, written once, there.
    const MANIFEST: &'static str = include_str!("../Cargo.toml");

    fn verifier(&self) -> Option<&dyn Scheme> {
        Some(&self.signature)
    }

    fn parse(
        &self,
        signed: &Signed<'_>,
        _unsigned: &Unsigned<'_>,
    ) -> Result<Parsed<PaddleEvent>, Rejection> {
        parse_event(signed)
    }

    fn plan<'e>(&'e self, event: &'e Parsed<PaddleEvent>) -> Plan<CreditCustomer<'e>> {
        match &event.event {
            PaddleEvent::Completed(c) => Plan::Rust(CreditCustomer(&event.event_id, c)),
            PaddleEvent::Other => Plan::Nothing,
        }
    }
}
