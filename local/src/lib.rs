//! Local development support: a private PostgreSQL started from the server binaries, the
//! project's migrations compiled in, a Lambda Runtime API emulator that runs the real function
//! binaries, an API Gateway (HTTP API) front for them, and the tool that signs sample events.
//! The test harness and the `claimonce-local` command share all of it.

pub mod functions;
pub mod gateway;
pub mod http;
pub mod migrations;
pub mod pgbouncer;
pub mod postgres;
pub mod readable;
pub mod runtime_api;
pub mod sign;
