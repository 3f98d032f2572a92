//! The one flow every provider shares: read the raw body, verify, parse, complete (an event
//! whose data its sender keeps), claim and apply in one transaction, answer, and log one line.

use std::time::Instant;

mod admit;
mod bridged;
mod deliver;
mod drain;
mod environment;
mod outcome;
// A recover function's way in: the jobs' only.
#[cfg(feature = "jobs")]
mod recover;
mod secrets;
mod webhook;

pub use self::deliver::Batch;
use self::deliver::Delivered;
use self::drain::Queued;
use self::outcome::{Outcome, Via};
#[cfg(feature = "jobs")]
pub use self::recover::Recovered;
use self::secrets::Refresh;
use self::webhook::Webhook;

use crate::claim::{Claim, Finished};
use crate::config::{self, ConfigError};
use crate::db::Database;
use crate::ids::EventId;
use crate::log::{Level, Log};
use crate::metrics;
use crate::provider::{Parsed, Provider, Signed, Unsigned};
use crate::response::{Disposition, Problem, Rejection};

/// Limits on what is accepted before any work is done.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest body accepted, in bytes (`MAX_BODY_BYTES`, default 1 MiB).
    pub max_body_bytes: usize,
}

impl Limits {
    /// From the environment. With a spill queue (`SPILL_QUEUE_URL`) every body accepted must
    /// be one it can spill, so `MAX_BODY_BYTES` then defaults to
    /// SQS's largest message (1 MiB) less 8 KiB for its attributes, and may not exceed it.
    pub fn from_env() -> Result<Self, ConfigError> {
        let spilling = config::optional("SPILL_QUEUE_URL").is_some();
        let limit = crate::spill::SPILL_BODY_LIMIT;
        let default = if spilling { limit as u64 } else { 1 << 20 };
        let max = config::number("MAX_BODY_BYTES", default)?;
        let max = usize::try_from(max).unwrap_or(usize::MAX);
        if spilling && max > limit {
            return Err(ConfigError::new(format!(
                "MAX_BODY_BYTES is {max}, over the {limit} bytes a delivery can be spilled with \
                 (SPILL_QUEUE_URL is set): lower it, or unset it for that limit"
            )));
        }
        Ok(Self {
            max_body_bytes: max,
        })
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_body_bytes: 1 << 20,
        }
    }
}

/// The queues a function keeps and takes deliveries on, beside its receiver: its spill queue
/// (the spill queue: where a verified delivery goes when the database cannot take it, and
/// whose records it drains) and its partner event source's event queue.
#[derive(Debug, Default)]
pub struct Queues {
    spill: Option<crate::spill::Spill>,
    bridge: Option<crate::bridge::Bridge>,
}

impl Queues {
    /// A spill queue and an event queue, each when the function has one.
    pub fn new(spill: Option<crate::spill::Spill>, bridge: Option<crate::bridge::Bridge>) -> Self {
        Self { spill, bridge }
    }

    /// The webhook way in to `receiver`, keeping on the spill queue what the database cannot
    /// take.
    pub(crate) fn webhook<'w, P>(&'w self, receiver: &'w Receiver<P>) -> Webhook<'w, P> {
        Webhook {
            receiver,
            spill: self.spill.as_ref(),
        }
    }

    /// The queues' way in to `receiver`: their records.
    pub(crate) fn queued<'q, P>(&'q self, receiver: &'q Receiver<P>) -> Queued<'q, P> {
        Queued {
            receiver,
            spill: self.spill.as_ref(),
            bridge: self.bridge.as_ref(),
        }
    }
}

/// One provider's receiver in one execution environment: the provider, the connection it
/// reuses, its limits and its log. The ways in that need more hold it themselves: the webhook
/// its spill queue, the queues' way its spill and event queues ([`Queues`]).
#[derive(Debug)]
pub struct Receiver<P> {
    /// Replaced when the signing secrets are read again ([`Receiver::with_secret_refresh`]).
    provider: std::sync::RwLock<std::sync::Arc<P>>,
    refresh: Option<Refresh<P>>,
    database: Database,
    limits: Limits,
    log: Log,
    /// The login's statement bound, as read at cold start.
    statement_bound: std::sync::OnceLock<crate::db::StatementBound>,
    /// The sender's API, for events completed before their claim ([`crate::complete`]).
    api: Option<crate::complete::SenderApi>,
}

impl<P: Provider> Receiver<P> {
    /// Assembles a receiver.
    pub fn new(provider: P, database: Database, limits: Limits, log: Log) -> Self {
        Self {
            provider: std::sync::RwLock::new(std::sync::Arc::new(provider)),
            refresh: None,
            database,
            limits,
            log,
            statement_bound: std::sync::OnceLock::new(),
            api: None,
        }
    }

    /// Completes events from `api` before their claim ([`Provider::complete`]).
    pub fn with_sender_api(mut self, api: Option<crate::complete::SenderApi>) -> Self {
        self.api = api;
        self
    }

    /// The provider as last built.
    fn provider(&self) -> std::sync::Arc<P> {
        let held = self
            .provider
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        std::sync::Arc::clone(&held)
    }
}

/// What a request that passed every check before the database is: an event to claim, or a
/// handshake its provider answers ([`Provider::handshake`]).
#[derive(Debug)]
pub enum Admission<E> {
    /// An event, to complete, claim and apply.
    Delivery(Admitted<E>),
    /// The sender checking the endpoint, answered with the provider's own body.
    Handshake(crate::response::Handshake),
}

/// A request that passed every check before the database.
#[derive(Debug)]
pub struct Admitted<E> {
    /// The parsed event.
    pub parsed: Parsed<E>,
    /// SHA-256 of the raw body, stored with the claim.
    pub payload_sha256: [u8; 32],
    /// The signature headers, and the unsigned headers the parser read and found: what a
    /// spilled copy carries.
    read_headers: Vec<(String, String)>,
}

use crate::timestamp::unix_now;

/// The answer to a delivery for a provider that takes no webhooks ([`Provider::verifier`] is
/// `None`): nothing it could send would verify.
pub(crate) fn takes_no_webhooks() -> Rejection {
    Rejection::new(
        Problem::SignatureMismatch,
        "this function reads its sender's API and takes no webhooks",
    )
}
