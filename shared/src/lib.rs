//! claimonce: exactly-once webhook processing for AWS Lambda.
//!
//! A provider crate supplies a [`Provider`](prelude::Provider) (how to verify, how to read an
//! event, what each event does); this crate owns everything else: the raw-body verification schemes, the
//! claim-then-mutate transaction, the response policy, the connection and the logs. A whole
//! provider, with its effect in Rust on the claim's transaction:
//!
//! ```
//! use claimonce::prelude::*;
//! use claimonce::verify::body_hmac::{BodyHmac, Encoding};
//!
//! /// A sender that signs `X-Example-Signature: sha256=<hex>` over the raw body, and puts the
//! /// event's id (the ledger key) and type in the body it signs.
//! struct Example {
//!     verifier: BodyHmac,
//! }
//!
//! #[derive(serde::Deserialize)]
//! struct Credit {
//!     id: String,
//!     #[serde(rename = "type")]
//!     kind: String,
//!     amount: i64,
//! }
//!
//! impl Example {
//!     fn from_secret(raw: &str) -> Result<Self, ConfigError> {
//!         let secrets = split_secrets(raw); // several during a rotation
//!         BodyHmac::new("x-example-signature", "sha256=", Encoding::LowerHex, &secrets)
//!             .map(|verifier| Example { verifier })
//!             .ok_or_else(|| ConfigError::new("EXAMPLE_WEBHOOK_SECRET holds no secret".into()))
//!     }
//! }
//!
//! /// A credit's effect: Rust on the claim's transaction, holding the event it applies.
//! struct Grant<'e>(&'e Parsed<Credit>);
//!
//! impl RustEffect for Grant<'_> {
//!     // Runs only once this delivery has won the claim, on the claim's transaction.
//!     async fn apply<'a>(&'a self, tx: &'a Tx<'a>) -> Result<(), EffectError> {
//!         let Grant(event) = self;
//!         tx.execute(
//!             "INSERT INTO example_credits (event_id, amount) VALUES ($1, $2)",
//!             &[
//!                 Param::new(event.event_id.as_str(), Type::TEXT),
//!                 Param::new(&event.event.amount, Type::INT8),
//!             ],
//!         )
//!         .await?;
//!         Ok(())
//!     }
//! }
//!
//! impl Provider for Example {
//!     type Event = Credit;
//!     type Rust<'e> = Grant<'e>; // NoRustEffect for a provider whose effects are all SQL
//!
//!     // The crate's Cargo.toml, whose registry entry names the provider (the ledger namespace,
//!     // the route /webhooks/example, the role claimonce_example) and its secret variable.
//!     const MANIFEST: &'static str = MANIFEST;
//!
//!     fn verifier(&self) -> Option<&dyn Scheme> {
//!         Some(&self.verifier)
//!     }
//!
//!     fn parse(&self, signed: &Signed<'_>, _: &Unsigned<'_>) -> Result<Parsed<Credit>, Rejection> {
//!         let credit: Credit = serde_json::from_slice(signed.body())
//!             .map_err(|_| Rejection::new(Problem::InvalidPayload, "the body is not a credit"))?;
//!         Ok(Parsed::new(EventId::new(credit.id.clone())?, credit.kind.clone(), credit))
//!     }
//!
//!     // One step: nothing, one SQL function in the claim's statement (Plan::Call), or Rust.
//!     fn plan<'e>(&'e self, event: &'e Parsed<Credit>) -> Plan<Grant<'e>> {
//!         match event.event.kind.as_str() {
//!             "credit.granted" => Plan::Rust(Grant(event)),
//!             _ => Plan::Nothing, // claimed and answered `ignored`
//!         }
//!     }
//! }
//!
//! /// The crate's registry entry, in its `Cargo.toml` (a crate writes
//! /// `include_str!("../Cargo.toml")`): the provider's name and its secret variable.
//! const MANIFEST: &str = r#"
//! [package.metadata.claimonce]
//! provider = "example"
//! secret_var = "EXAMPLE_WEBHOOK_SECRET"
//! "#;
//!
//! /// The Lambda binary's `main`: secrets, database and limits from the environment, then serve.
//! async fn main_of_the_binary() -> std::process::ExitCode {
//!     claimonce::run_from_env(Example::from_secret).await
//! }
//!
//! // Before the database: the signature over the raw bytes, then the provider's parser.
//! let example = Example::from_secret("s3cret").expect("a secret");
//! let body = br#"{"id":"evt_1","type":"credit.granted","amount":500}"#;
//! let mut headers = http::HeaderMap::new();
//! example.verifier.sign_into(&mut headers, body, 0, "");
//! let signed = Signed::verify(&example.verifier, &headers, body, 0).expect("signed with the secret");
//! let parsed = example.parse(&signed, &Unsigned::new(&headers)).expect("a credit");
//! assert_eq!(parsed.event_id.as_str(), "evt_1");
//! assert!(matches!(example.plan(&parsed), Plan::Rust(_)));
//! let other = Example::from_secret("another").expect("a secret");
//! assert!(other.verifier.verify(&headers, body, 0).is_err(), "another secret's signature");
//! # let _ = main_of_the_binary;
//! ```
//!
//! The table `example_credits` comes from the provider crate's own migration, which also
//! makes the role `claimonce_example` and lets it write the table only under a claim its
//! transaction won (row-level security with `claimonce_claim_held_v1`). A complete crate kept
//! outside this repository, with a signature scheme of its own, its migration, migrate
//! function, sample event and tests, is under `examples/` (`docs/providers.md`, "Use it in
//! your project").
//!
//! The surface comes in three parts, and each name has one path:
//! - **What a provider crate writes against**: [`prelude`] (one import: the
//!   [`Provider`](prelude::Provider) trait and its types, [`Effect`](prelude::Effect) and
//!   [`Tx`](prelude::Tx), the schemes' traits, [`ConfigError`](prelude::ConfigError)),
//!   [`verify`] (the built-in schemes and the pieces to write one), [`config`], [`timestamp`],
//!   [`migrate`] (its migrations), [`secrets`] (how its secret is read), and [`complete`] (with
//!   the `sender-api` feature, `sender_api`) for a sender whose events carry only a reference to
//!   their data (Stripe's thin events), completed before the claim.
//! - **What runs a receiver**: the root's [`run_from_env`] (a binary's whole `main`),
//!   [`Receiver`] with its [`Limits`] and [`Queues`], [`Disposition`], [`lambda`] (the Lambda
//!   boundary; [`lambda::handle_event`] is how a provider's tests deliver), [`db`], [`log`],
//!   [`sqs`] and [`fault`] (the named fault points).
//! - **What this workspace's scheduled functions and tests use**: `jobs`, only with the `jobs`
//!   feature, which a provider crate does not turn on: a connection of one's own
//!   (`db::Settings::connect`) comes with it, where a provider's code is handed a claim's
//!   transaction, never a connection. It may change in any release.
//!
//! Public enums that may grow are `#[non_exhaustive]`.

#![warn(missing_docs)]

mod auth;
mod bridge;
mod budget;
mod claim;
pub mod complete;
pub mod config;
pub mod db;
mod effect;
pub mod fault;
mod forward;
mod future;
mod headers;
mod ids;
pub mod lambda;
pub mod log;
mod metrics;
pub mod migrate;
mod pg_error;
mod provider;
mod receiver;
mod registry;
mod response;
#[cfg(feature = "jobs")]
mod scheduled;
pub mod secrets;
#[cfg(feature = "sender-api")]
pub mod sender_api;
mod spill;
pub mod sqs;
pub mod timestamp;
pub mod verify;

/// What a provider crate uses, in one import: `use claimonce::prelude::*;`.
pub mod prelude {
    pub use crate::config::error::ConfigError;
    pub use crate::effect::{Effect, EffectError, NoRustEffect, Param, Plan, RustEffect, Tx};
    pub use crate::forward::Forwardable;
    pub use crate::ids::EventId;
    pub use crate::provider::{Bridged, Parsed, Provider, ProviderName, Signed, Unsigned};
    pub use crate::response::{Handshake, Problem, Rejection};
    pub use crate::verify::scheme::{Scheme, Sign, Verify, split_secrets};
    pub use tokio_postgres::types::Type;
}

/// What this workspace's scheduled functions (the retention sweep, the outbox relay, the
/// migrate and recover functions), its local runner and its tests use beyond a receiver: a
/// job's budget, report and serving loop, a recover function's way in, the AWS clients and
/// the queues' limits. A provider crate does not turn the `jobs` feature on, and what is here
/// may change in any release.
#[cfg(feature = "jobs")]
pub mod jobs {
    pub use crate::auth::{
        AuthError, DbSecret, IamTokens, TOKEN_LIFETIME, auth_token, aws_config, fetch_secret,
        fetch_secret_string, parse_secret,
    };
    pub use crate::bridge::{Bridge, DEAD_LETTER_URL_VAR, QUEUE_URL_VAR};
    pub use crate::budget::Budget;
    pub use crate::claim::{CLAIM_FUNCTION, statement as claim_statement};
    pub use crate::forward::{
        FORWARD_ATTRIBUTE_ROOM, FORWARD_BODY_LIMIT, FORWARD_FUNCTION, SQS_MESSAGE_LIMIT,
    };
    pub use crate::lambda::runtime::{begin, serve_job};
    pub use crate::receiver::{Batch, Recovered};
    pub use crate::scheduled::{
        Job, JobFailed, Metric, Recovery, function_name, report_end, write_recovery_report,
    };
    pub use crate::spill::{
        SPILL_ATTRIBUTE_ROOM, SPILL_BODY_LIMIT, SPILL_RETENTION_SECONDS, SPILLED_SIGNATURE_MAX_AGE,
        Spill,
    };
}

pub use ids::MAX_EVENT_ID_LEN;
pub use lambda::from_env::run_from_env;
pub use receiver::{Admission, Admitted, Limits, Queues, Receiver};
pub use response::Disposition;
