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

/// Waits, bounded, until `f` holds: for a state another task reaches (a request held at a
/// stand-in), not for a time.
pub async fn until(what: &str, f: impl Fn() -> bool) {
    tokio::time::timeout(std::time::Duration::from_secs(30), async {
        while !f() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what}"));
}
