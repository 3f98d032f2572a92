//! Local development support: a private PostgreSQL started from the server binaries, and the
//! project's migrations compiled in. The test harness and the local run share both.

pub mod migrations;
pub mod postgres;
