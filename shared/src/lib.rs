//! claimonce: exactly-once webhook processing for AWS Lambda.
//!
//! A provider crate supplies a [`Provider`] (how to verify, how to read an event, what each
//! event does); this crate owns everything else: the raw-body verification schemes, the
//! claim-then-mutate transaction, the response policy, the connection and the logs.

#![warn(missing_docs)]

pub mod auth;
pub mod config;
pub mod db;
pub mod effect;
pub mod lambda;
pub mod log;
mod metrics;
pub mod migrate;
pub mod pipeline;
mod provider;
mod receiver;
mod response;
pub mod scheduled;
pub mod secrets;
pub mod timestamp;
pub mod verify;

pub use effect::{EffectError, Tx};
pub use lambda::{run_from_env, serve};
pub use pipeline::{Effect, Forwardable, Param};
pub use provider::{EventId, MAX_EVENT_ID_LEN, Parsed, Provider, Signed, Unsigned};
pub use receiver::{Admitted, Limits, Receiver};
pub use response::{Disposition, Problem, Rejection};
/// PostgreSQL parameter types, for [`Param::new`].
pub use tokio_postgres::types::Type;
