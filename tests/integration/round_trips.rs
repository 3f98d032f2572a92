//! The cost model and what a pooler sees: one round trip carrying one unnamed statement per
//! delivery, whatever its disposition, and nothing a transaction pooler would pin a session
//! for; the retry after a connection lost at either side of the statement; the bounds that
//! live in the database (the functions' lock_timeout, the login role's statement_timeout) and
//! the client's deadline that cancels the statement on the server. The naive shape is
//! measured the same way for comparison.

use std::str::FromStr;
use std::time::Duration;

use claimonce::Receiver;
use claimonce::db::{Settings, Timeouts};
use claimonce::log::Captured;
use claimonce_tests::TestDb;
use claimonce_tests::apigw::{outcome, post_stripe, post_to};
use claimonce_tests::db::{receiver_with, test_timeouts};
use claimonce_tests::proxy::{Fault, WireProxy};
use claimonce_tests::sign::{checkout_completed, invoice_paid, stripe, stripe_event};
use serde_json::{Value, json};
use stripe_webhook::Stripe;

/// A receiver whose connection goes through a [`WireProxy`], and its captured log.
async fn proxied(db: &TestDb, timeouts: Timeouts) -> (WireProxy, Receiver<Stripe>, Captured) {
    let config = tokio_postgres::Config::from_str(db.function_url()).expect("url");
    let upstream = config.get_ports().first().copied().expect("port");
    let proxy = WireProxy::start(upstream).await;
    let url = db
        .function_url()
        .replace(&format!(":{upstream}/"), &format!(":{}/", proxy.port));
    let settings = Settings::from_url(&url, None, timeouts).expect("settings");
    let (receiver, lines) = receiver_with(settings, stripe());
    receiver.warm_up().await;
    (proxy, receiver, lines)
}

/// Delivers `body`, signed: its [`outcome`].
async fn deliver(receiver: &Receiver<Stripe>, body: &[u8]) -> (u16, String) {
    outcome(&post_stripe(receiver, body).await)
}

async fn flights_for(proxy: &WireProxy, receiver: &Receiver<Stripe>, body: &[u8]) -> (u16, u64) {
    proxy.reset();
    let (status, _) = deliver(receiver, body).await;
    (status, proxy.flights())
}

/// The `error` member of the last delivery line.
fn last_error(lines: &Captured) -> String {
    let lines = lines.lock().expect("lines");
    let last = lines.last().expect("a delivery line");
    let line: Value = serde_json::from_str(last).expect("json line");
    line["error"].as_str().unwrap_or("").to_owned()
}

#[tokio::test]
async fn every_delivery_is_one_round_trip_with_one_unnamed_statement_and_no_set() {
    let db = TestDb::new().await;
    let (proxy, receiver, _) = proxied(&db, test_timeouts()).await;
    let invoice = invoice_paid("evt_rt", "cus_rt", 10);
    assert_eq!(
        flights_for(&proxy, &receiver, &invoice).await,
        (200, 1),
        "new"
    );
    assert_eq!(
        proxy.statements().len(),
        1,
        "one statement: {:?}",
        proxy.statements()
    );
    assert_eq!(
        flights_for(&proxy, &receiver, &invoice).await,
        (200, 1),
        "duplicate"
    );
    let other = stripe_event("evt_rt_other", "charge.refunded", 1, json!({"id": "ch_1"}));
    assert_eq!(
        flights_for(&proxy, &receiver, &other).await,
        (200, 1),
        "ignored"
    );
    db.client()
        .await
        .batch_execute(
            "ALTER TABLE customers ADD CONSTRAINT no_bad CHECK (email <> 'bad@example.com')",
        )
        .await
        .expect("constraint");
    let failing = checkout_completed("evt_rt_fail", "cus_rt_fail", "bad@example.com");
    assert_eq!(
        flights_for(&proxy, &receiver, &failing).await,
        (500, 1),
        "failing effect"
    );
    // A rejected request never reaches the database.
    proxy.reset();
    let response = post_to(
        &receiver,
        "/webhooks/stripe",
        &[("stripe-signature", "t=1,v1=00")],
        &invoice,
    )
    .await;
    assert_eq!(
        (response.status().as_u16(), proxy.flights()),
        (400, 0),
        "rejected"
    );
    assert_eq!(proxy.pinning(), Vec::<String>::new());
    // The failing effect took its claim with it.
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 2);
}

#[tokio::test]
async fn the_proxy_sees_what_a_pooler_would_pin() {
    let db = TestDb::new().await;
    db.direct_because(
        "sends what a transaction pooler cannot serve (named statements, SET) to show the \
         proxy sees it",
    );
    let config = tokio_postgres::Config::from_str(&db.url).expect("url");
    let upstream = config.get_ports().first().copied().expect("port");
    let proxy = WireProxy::start(upstream).await;
    let url = db
        .url
        .replace(&format!(":{upstream}/"), &format!(":{}/", proxy.port));
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    client
        .query("SELECT 1", &[])
        .await
        .expect("a named statement");
    client
        .batch_execute("SET LOCAL lock_timeout = 1")
        .await
        .expect("a SET");
    let pinning = proxy.pinning();
    assert_eq!(pinning.len(), 3, "{pinning:?}");
    assert!(pinning[0].starts_with("named Parse"), "{pinning:?}");
    assert!(pinning[1].starts_with("Bind of portal"), "{pinning:?}");
    assert!(pinning[2].starts_with("SET on the wire"), "{pinning:?}");
}

#[tokio::test]
async fn a_connection_lost_before_the_statement_reached_the_server_is_retried_once() {
    let db = TestDb::new().await;
    let (proxy, receiver, _) = proxied(&db, test_timeouts()).await;
    proxy.inject(Fault::DropRequest);
    let body = invoice_paid("evt_lost_req", "cus_lost", 10);
    assert_eq!(deliver(&receiver, &body).await, (200, "processed".into()));
    assert_eq!(proxy.fired(), 1);
    assert_eq!(
        db.count("SELECT credit_balance_cents FROM customers").await,
        10
    );
}

#[tokio::test]
async fn a_connection_lost_after_the_commit_is_retried_and_answered_duplicate() {
    let db = TestDb::new().await;
    let (proxy, receiver, _) = proxied(&db, test_timeouts()).await;
    proxy.inject(Fault::DropAnswer);
    let body = invoice_paid("evt_lost_ack", "cus_lost", 10);
    // The first attempt committed; its answer was lost. The retry finds the claim taken.
    assert_eq!(deliver(&receiver, &body).await, (200, "duplicate".into()));
    assert_eq!(proxy.fired(), 1);
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 1);
    assert_eq!(
        db.count("SELECT credit_balance_cents FROM customers").await,
        10
    );
}

/// Holds the row lock of customer `id` in an open transaction until the client is dropped
/// (or `ROLLBACK` is sent), so a delivery that credits it waits on it.
async fn hold_customer(db: &TestDb, id: &str) -> tokio_postgres::Client {
    let holder = db.client().await;
    holder
        .batch_execute(&format!(
            "INSERT INTO customers (stripe_customer_id) VALUES ('{id}'); \
             BEGIN; SELECT 1 FROM customers WHERE stripe_customer_id = '{id}' FOR UPDATE"
        ))
        .await
        .expect("hold");
    holder
}

/// Backends of `db` waiting for a lock, as the server sees them.
async fn waiting(db: &TestDb) -> i64 {
    db.count(&format!(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = '{}' AND wait_event_type = 'Lock'",
        db.name
    ))
    .await
}

/// Credits a customer whose row another transaction holds, until the delivery answers: the
/// delivery's answer and the error its line logged. The held claim rolled back with it.
async fn credit_held_customer(db: &TestDb) -> (u16, String) {
    let (_proxy, receiver, lines) = proxied(db, test_timeouts()).await;
    let holder = hold_customer(db, "cus_held").await;
    let status = deliver(&receiver, &invoice_paid("evt_held", "cus_held", 10))
        .await
        .0;
    holder.batch_execute("ROLLBACK").await.expect("release");
    assert_eq!(
        db.count("SELECT count(*) FROM processed_events").await,
        0,
        "the claim went with the effect"
    );
    (status, last_error(&lines))
}

#[tokio::test]
async fn a_lock_wait_is_bounded_by_the_effect_functions_lock_timeout() {
    let db = TestDb::new().await;
    db.client()
        .await
        .batch_execute(
            "ALTER FUNCTION stripe_credit_v1(text, text, bigint) SET lock_timeout = '200ms'",
        )
        .await
        .expect("bound");
    // lock_not_available
    assert_eq!(
        credit_held_customer(&db).await,
        (500, "sqlstate 55P03".into())
    );
}

#[tokio::test]
async fn a_statement_is_bounded_by_the_login_roles_statement_timeout() {
    let db = TestDb::new().await;
    let user = tokio_postgres::Config::from_str(db.function_url())
        .expect("url")
        .get_user()
        .expect("user")
        .to_owned();
    db.client()
        .await
        .batch_execute(&format!(
            "ALTER FUNCTION stripe_credit_v1(text, text, bigint) SET lock_timeout = '60s'; \
             ALTER ROLE \"{user}\" IN DATABASE \"{}\" SET statement_timeout = '300ms'",
            db.name
        ))
        .await
        .expect("bounds");
    // query_canceled
    assert_eq!(
        credit_held_customer(&db).await,
        (500, "sqlstate 57014".into())
    );
}

#[tokio::test]
async fn the_client_deadline_cancels_the_statement_on_the_server() {
    let db = TestDb::new().await;
    // Nothing on the server would end this wait for a minute.
    db.client()
        .await
        .batch_execute(
            "ALTER FUNCTION stripe_credit_v1(text, text, bigint) SET lock_timeout = '60s'",
        )
        .await
        .expect("bound");
    let timeouts = Timeouts::new(Duration::from_secs(2), Duration::from_millis(500));
    let (_proxy, receiver, lines) = proxied(&db, timeouts).await;
    let holder = hold_customer(&db, "cus_stuck").await;
    let body = invoice_paid("evt_stuck", "cus_stuck", 10);
    assert_eq!(deliver(&receiver, &body).await.0, 500);
    assert_eq!(last_error(&lines), "delivery timed out");
    // The cancel was delivered before the answer; the server acts on it at once. Poll (the
    // outcome is decided by the cancel: without it the wait would last the full minute).
    let mut still_waiting = waiting(&db).await;
    for _ in 0..100 {
        if still_waiting == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        still_waiting = waiting(&db).await;
    }
    assert_eq!(still_waiting, 0, "the statement still waits on the server");
    holder.batch_execute("ROLLBACK").await.expect("release");
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 0);
    // The next delivery makes a new connection and goes through.
    assert_eq!(deliver(&receiver, &body).await, (200, "processed".into()));
}

/// RDS Proxy for PostgreSQL supports no query cancellation: behind it the client's deadline
/// can only answer, and the statement runs on until the login's `statement_timeout`.
#[tokio::test]
async fn behind_rds_proxy_the_deadline_answers_and_the_logins_statement_timeout_ends_the_statement()
{
    let db = TestDb::new().await;
    let login = format!("{}_stripe", db.name);
    // Nothing but the login's statement_timeout would end this wait for a minute.
    db.client()
        .await
        .batch_execute(&format!(
            "ALTER FUNCTION stripe_credit_v1(text, text, bigint) SET lock_timeout = '60s'; \
             ALTER ROLE {login} SET statement_timeout = '5s'"
        ))
        .await
        .expect("bounds");
    let url = db.function_url_as("stripe");
    let upstream = tokio_postgres::Config::from_str(&url)
        .expect("url")
        .get_ports()
        .first()
        .copied()
        .expect("port");
    let proxy = WireProxy::like_rds_proxy(upstream).await;
    let through = url.replace(&format!(":{upstream}/"), &format!(":{}/", proxy.port));
    let timeouts = Timeouts::new(Duration::from_secs(2), Duration::from_millis(500));
    let settings = Settings::from_url(&through, None, timeouts).expect("settings");
    let (receiver, lines) = receiver_with(settings, stripe());
    receiver.warm_up().await;
    let holder = hold_customer(&db, "cus_stuck").await;
    let body = invoice_paid("evt_stuck", "cus_stuck", 10);
    let sent = std::time::Instant::now();
    assert_eq!(deliver(&receiver, &body).await.0, 500);
    assert_eq!(last_error(&lines), "delivery timed out");
    let (keys_withheld, cancels_dropped) = proxy.cancellation();
    assert!(keys_withheld >= 1, "the client got no BackendKeyData");
    assert_eq!(
        cancels_dropped, 1,
        "the deadline's cancel was sent and went nowhere"
    );
    // Answered, and the statement still waits on the server: nothing cancelled it.
    assert_eq!(waiting(&db).await, 1, "the statement outlives its delivery");
    let mut still_waiting = 1;
    for _ in 0..150 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        still_waiting = waiting(&db).await;
        if still_waiting == 0 {
            break;
        }
    }
    assert_eq!(still_waiting, 0, "the login's statement_timeout ended it");
    assert!(
        sent.elapsed() >= Duration::from_secs(5),
        "not before the login's 5 s"
    );
    holder.batch_execute("ROLLBACK").await.expect("release");
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 0);
    // The next delivery is served, and the effect happens once.
    assert_eq!(deliver(&receiver, &body).await, (200, "processed".into()));
    assert_eq!(
        db.count(
            "SELECT credit_balance_cents FROM customers WHERE stripe_customer_id = 'cus_stuck'"
        )
        .await,
        10
    );
}

/// One delivery in the naive shape.
async fn naive(client: &mut tokio_postgres::Client, id: &str) {
    let tx = client.transaction().await.expect("begin");
    let claimed = tx
        .query(
            "INSERT INTO processed_events (provider, event_id, event_type) VALUES ('stripe', $1, 'invoice.paid') \
             ON CONFLICT (provider, event_id) DO NOTHING RETURNING id",
            &[&id],
        )
        .await
        .expect("claim");
    if !claimed.is_empty() {
        tx.execute(
            "INSERT INTO customers (stripe_customer_id, credit_balance_cents) VALUES ($1, $2) \
             ON CONFLICT (stripe_customer_id) DO UPDATE \
             SET credit_balance_cents = customers.credit_balance_cents + EXCLUDED.credit_balance_cents",
            &[&"cus_naive", &10_i64],
        )
        .await
        .expect("effect");
    }
    tx.commit().await.expect("commit");
}

/// The shape a first version would take: `client.transaction()`, then `query`/`execute`
/// with SQL text, each of which prepares a named statement first.
#[tokio::test]
async fn the_naive_shape_costs_six_times_as_many_round_trips() {
    let db = TestDb::new().await;
    db.direct_because(
        "the naive shape it counts prepares named statements, which a transaction pooler with \
         prepared statements off does not serve",
    );
    let config = tokio_postgres::Config::from_str(&db.url).expect("url");
    let upstream = config.get_ports().first().copied().expect("port");
    let proxy = WireProxy::start(upstream).await;
    let url = db
        .url
        .replace(&format!(":{upstream}/"), &format!(":{}/", proxy.port));
    let (mut client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    proxy.reset();
    naive(&mut client, "evt_naive").await;
    let new = proxy.flights();
    proxy.reset();
    naive(&mut client, "evt_naive").await;
    let duplicate = proxy.flights();
    // BEGIN, prepare + execute the claim, prepare + execute the effect, COMMIT.
    assert_eq!((new, duplicate), (6, 4));
    assert!(!proxy.pinning().is_empty(), "named statements");
}

/// The pooled pass (`CLAIMONCE_TEST_POOLER=pgbouncer`) really puts PgBouncer between the code
/// under test and the server: the port the function connects to is not the server's.
#[tokio::test]
async fn the_pooled_pass_goes_through_the_pooler() {
    let db = TestDb::new().await;
    let port = |url: &str| {
        tokio_postgres::Config::from_str(url)
            .expect("url")
            .get_ports()
            .first()
            .copied()
            .expect("port")
    };
    let client = Settings::from_url(db.function_url(), None, test_timeouts())
        .expect("settings")
        .connect()
        .await
        .expect("connect");
    let server_port: i32 = client
        .query_one("SELECT inet_server_port()", &[])
        .await
        .expect("port")
        .get(0);
    let server_port = u16::try_from(server_port).expect("a port");
    assert_eq!(server_port, port(&db.url), "the server behind both URLs");
    if claimonce_tests::db::pooled() {
        assert_ne!(port(db.function_url()), server_port, "through PgBouncer");
    } else {
        assert_eq!(db.function_url(), db.url);
    }
}
