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

use claimonce::jobs::CLAIM_FUNCTION;

/// The claim of one event as a test writes it by hand, to win or be refused a claim as a login:
/// `SELECT * FROM claimonce_claim_v1('<provider>', '<event_id>', '<event_type>', NULL)`, the
/// function named by its constant.
pub fn claim_call(provider: &str, event_id: &str, event_type: &str) -> String {
    format!("SELECT * FROM {CLAIM_FUNCTION}('{provider}', '{event_id}', '{event_type}', NULL)")
}

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
