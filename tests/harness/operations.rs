//! OPERATIONS.md's procedures, run as written: the SQL is read from the page itself, so the
//! page and its test cannot drift apart.

use crate::TestDb;
use crate::roles::login_with;

const OPERATIONS: &str = include_str!("../../OPERATIONS.md");

/// The first ```sql block of OPERATIONS.md's section `heading` (`### <heading>`).
fn sql_block(heading: &str) -> &'static str {
    OPERATIONS
        .split_once(&format!("### {heading}"))
        .and_then(|(_, rest)| rest.split_once("```sql\n"))
        .and_then(|(_, rest)| rest.split_once("```"))
        .map(|(sql, _)| sql)
        .unwrap_or_else(|| panic!("OPERATIONS.md has a \"{heading}\" section with a ```sql block"))
}

/// The SQL block of "Replay an event safely", for `provider` and `event_id` (the page's
/// example is a Stripe event).
pub fn replay_sql(provider: &str, event_id: &str) -> String {
    let block = sql_block("Replay an event safely");
    assert!(
        block.contains("provider = 'stripe'") && block.contains("event_id = 'evt_1PqR...'"),
        "the replay block names the example event it is run with: {block}"
    );
    block
        .replace("provider = 'stripe'", &format!("provider = '{provider}'"))
        .replace(
            "event_id = 'evt_1PqR...'",
            &format!("event_id = '{event_id}'"),
        )
}

/// Runs the replay procedure for one event as the page says to: as a login that is a member of
/// `claimonce_sweeper`. Returns how many ledger rows it removed.
pub async fn replay(db: &TestDb, provider: &str, event_id: &str) -> u64 {
    let url = login_with(db, "claimonce_sweeper").await;
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connect as a sweeper login");
    tokio::spawn(connection);
    let before: i64 = db.count("SELECT count(*) FROM processed_events").await;
    client
        .batch_execute(&replay_sql(provider, event_id))
        .await
        .unwrap_or_else(|e| panic!("the replay procedure failed: {e}"));
    let after: i64 = db.count("SELECT count(*) FROM processed_events").await;
    u64::try_from(before - after).expect("the procedure only deletes")
}

/// The SQL block of "Outbox set-aside rows" that requeues them, as the page writes it.
pub fn requeue_sql() -> &'static str {
    sql_block("Outbox set-aside rows")
}
