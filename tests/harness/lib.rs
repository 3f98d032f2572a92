//! The integration-test harness: one private PostgreSQL per test run (or `DATABASE_URL`), a
//! fresh migrated database per test, API Gateway events built as API Gateway sends them, and
//! receivers wired the way a function's `main` wires them.

pub mod apigw;
pub mod db;
pub mod faults;
pub mod lambda;
pub mod moto;
pub mod operations;
pub mod proxy;
pub mod recorder;
pub mod roles;
pub mod senders;
pub mod sign;
pub mod tls;

pub use claimonce_local::outage;
pub use db::TestDb;
