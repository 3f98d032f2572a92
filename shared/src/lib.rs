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
//! **What a provider crate uses** is [`prelude`] (one import: the [`Provider`](prelude::Provider)
//! trait, its types, [`Effect`](prelude::Effect) and [`Tx`](prelude::Tx), the schemes' traits),
//! the root's [`run_from_env`] for its binary and [`Receiver`] for its tests, [`verify`] (the
//! schemes), [`config`], [`timestamp`], [`migrate`] (its migrations), [`secrets`] (how its secret
//! is read) and, for tests that build a receiver, [`db`] and [`log`]. Each type has one path: a
//! provider's through the prelude, the receiver's at the root, the rest in their module. Public enums that may grow are
//! `#[non_exhaustive]`. The modules left out of this documentation serve this workspace's own
//! scheduled functions and may change in any release. A connection of one's own
//! (`db::Settings::connect`) exists only with the `jobs` feature, which the jobs turn on and a
//! provider crate does not: its code is handed a claim's transaction, never a connection. A
//! provider whose events carry only a reference to their data (Stripe's thin events) turns on
//! `sender-api` instead, and completes them before the claim through [`complete`].

#![warn(missing_docs)]

// For this workspace's own scheduled functions and the AWS clients they build; not part of what
// a provider crate uses, so not in the documentation.
#[doc(hidden)]
pub mod auth;
pub mod bridge;
// The jobs' and tests', not a provider crate's: out of the documented surface.
#[doc(hidden)]
pub mod claim;
pub mod complete;
pub mod config;
pub mod db;
mod effect;
pub mod fault;
pub mod forward;
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
#[doc(hidden)]
pub mod scheduled;
pub mod secrets;
#[doc(hidden)]
#[cfg(feature = "sender-api")]
pub mod sender_api;
// The jobs' and tests', not a provider crate's: out of the documented surface.
#[doc(hidden)]
pub mod spill;
pub mod sqs;
pub mod timestamp;
pub mod verify;

/// What a provider crate uses, in one import: `use claimonce::prelude::*;`.
pub mod prelude {
    pub use crate::bridge::Bridged;
    pub use crate::config::ConfigError;
    pub use crate::effect::{Effect, EffectError, NoRustEffect, Param, Plan, RustEffect, Tx};
    pub use crate::forward::Forwardable;
    pub use crate::ids::EventId;
    pub use crate::provider::{Parsed, Provider, ProviderName, Signed, Unsigned};
    pub use crate::response::{Handshake, Problem, Rejection};
    pub use crate::verify::{Scheme, Sign, Verify, split_secrets};
    pub use tokio_postgres::types::Type;
}

pub use ids::MAX_EVENT_ID_LEN;
pub use lambda::from_env::run_from_env;
pub use receiver::{Admission, Admitted, Batch, Limits, Queues, Receiver, Recovered};
pub use response::Disposition;
