//! Local development support: a private PostgreSQL started from the server binaries, the
//! project's migrations compiled in, a Lambda Runtime API emulator that runs the real function
//! binaries, an API Gateway (HTTP API) front for them, the tool that signs sample events, and
//! moto's SQS with the drain Lambda's event source mapping would run, for the spill queues.
//! The test harness and the `claimonce-local` command share all of it, and a provider crate's
//! own tests, in this repository or out of it, take their databases from [`scratch`].

pub mod bridge;
pub mod functions;
pub mod gateway;
pub mod http;
pub mod kit;
pub mod migrations;
pub mod moto;
pub mod outage;
pub mod pgbouncer;
pub mod postgres;
pub mod readable;
pub mod runtime_api;
pub mod scaffold;
pub mod scratch;
pub mod sign;
pub mod spill;
pub mod template;

/// The provider registry's one reader, which [`functions`] builds the local run's view on.
pub use claimonce_registry as registry;
