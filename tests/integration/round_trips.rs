//! The cost model: at most two round trips per delivery, new or duplicate, with unnamed
//! statements only; and the naive shape (one round trip per statement, named statements)
//! measured the same way for comparison.

use std::str::FromStr;

use claimonce::db::{Database, Settings};
use claimonce::log::Log;
use claimonce::{Limits, Receiver};
use claimonce_tests::TestDb;
use claimonce_tests::apigw::post;
use claimonce_tests::db::test_timeouts;
use claimonce_tests::proxy::FlightCounter;
use claimonce_tests::sign::{
    STRIPE_SECRET, checkout_completed, invoice_paid, now, stripe_event, stripe_header,
};
use serde_json::json;
use stripe_webhook::Stripe;

async fn counted(db: &TestDb) -> (FlightCounter, Receiver<Stripe>) {
    let config = tokio_postgres::Config::from_str(&db.function_url).expect("url");
    let upstream = config.get_ports().first().copied().expect("port");
    let proxy = FlightCounter::start(upstream).await;
    let url = db
        .function_url
        .replace(&format!(":{upstream}/"), &format!(":{}/", proxy.port));
    let settings = Settings::from_url(&url, None, test_timeouts()).expect("settings");
    let stripe = Stripe::new(&[STRIPE_SECRET], 300).expect("secret");
    let receiver = Receiver::new(
        stripe,
        Database::new(settings),
        Limits::default(),
        Log::capture().0,
    );
    receiver.warm_up().await;
    (proxy, receiver)
}

async fn flights_for(
    proxy: &FlightCounter,
    receiver: &Receiver<Stripe>,
    body: &[u8],
) -> (u16, u64) {
    let sig = stripe_header(STRIPE_SECRET, now(), body);
    proxy.reset();
    let response = receiver
        .handle(post(
            "/webhooks/stripe",
            &[("stripe-signature", &sig)],
            body,
        ))
        .await;
    (response.status().as_u16(), proxy.flights())
}

#[tokio::test]
async fn new_duplicate_ignored_and_failing_deliveries_take_two_round_trips() {
    let db = TestDb::new().await;
    let (proxy, receiver) = counted(&db).await;
    let invoice = invoice_paid("evt_rt", "cus_rt", 10);
    assert_eq!(
        flights_for(&proxy, &receiver, &invoice).await,
        (200, 2),
        "new"
    );
    assert_eq!(
        flights_for(&proxy, &receiver, &invoice).await,
        (200, 2),
        "duplicate"
    );
    let other = stripe_event("evt_rt_other", "charge.refunded", 1, json!({"id": "ch_1"}));
    assert_eq!(
        flights_for(&proxy, &receiver, &other).await,
        (200, 2),
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
    // The effect fails in flight 2; the COMMIT pipelined behind it ends the transaction.
    assert_eq!(
        flights_for(&proxy, &receiver, &failing).await,
        (500, 2),
        "failing effect"
    );
    // A rejected request never reaches the database.
    proxy.reset();
    let response = receiver
        .handle(post(
            "/webhooks/stripe",
            &[("stripe-signature", "t=1,v1=00")],
            &invoice,
        ))
        .await;
    assert_eq!(
        (response.status().as_u16(), proxy.flights()),
        (400, 0),
        "rejected"
    );
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 2);
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
async fn the_naive_shape_costs_three_times_as_many_round_trips() {
    let db = TestDb::new().await;
    let config = tokio_postgres::Config::from_str(&db.url).expect("url");
    let upstream = config.get_ports().first().copied().expect("port");
    let proxy = FlightCounter::start(upstream).await;
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
}
