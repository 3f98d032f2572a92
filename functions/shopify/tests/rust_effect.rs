//! Shopify's order effect is Rust on the claim's transaction (a `claimonce::prelude::RustEffect`),
//! and it passes what the SQL effects pass: the database refuses its statements outside a claim that
//! transaction won; the handle sends nothing a pooler would pin (read off the wire); a
//! connection lost before the commit, or the commit's answer lost, settles to one application;
//! a function killed inside the effect leaves nothing and its retry applies once; concurrent
//! copies and a storm of duplicates and failures apply every event exactly once. The suite
//! runs directly and, in its pooled pass, through PgBouncer.

// A test asserts by panicking; its helpers too.
#![allow(clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::collections::VecDeque;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use claimonce::Receiver;
use claimonce::db::Settings;
use claimonce::prelude::Scheme;
use claimonce::prelude::{
    EffectError, Parsed, Plan, Provider, Rejection, RustEffect, Signed, Tx, Unsigned,
};
use claimonce::verify::body_hmac::BodyHmac;
use claimonce_local::runtime_api::{EXIT_ERROR_TYPE, Outcome, RuntimeApi};
use claimonce_tests::apigw::{payload_outcome, v2_event};
use claimonce_tests::db::{all_at_once, receiver_with, sqlstate, test_timeouts};
use claimonce_tests::faults::{XorShift, at_the_gate};
use claimonce_tests::lambda::{binaries, function};
use claimonce_tests::proxy::{Fault, WireProxy};
use claimonce_tests::roles::login_name;
use claimonce_tests::{TestDb, claim_call};
use serde_json::Value;
use shopify_webhook::{KeepOrder, ShopifyEvent};
use tokio::sync::Mutex;

mod common;

use common::shopify;

/// Delivers order `body` as `orders/updated`.
async fn deliver<P: Provider>(receiver: &Receiver<P>, body: &[u8]) -> (u16, String) {
    common::deliver(receiver, "orders/updated", "w-rust", body).await
}

/// An open, paid order `id` updated at 10:`minute`.
fn order(id: i64, minute: u32) -> Vec<u8> {
    common::order(id, &format!("2026-11-30T10:{minute:02}:00Z"), false, "paid")
}

/// Rows the effect wrote: (orders, timeline rows, ledger rows).
async fn written(db: &TestDb) -> (i64, i64, i64) {
    (
        db.count("SELECT count(*) FROM shopify_orders").await,
        db.count("SELECT count(*) FROM shopify_order_events").await,
        db.count("SELECT count(*) FROM processed_events").await,
    )
}

/// A receiver as Shopify's own login whose connection goes through a [`WireProxy`].
async fn proxied<P: Provider>(db: &TestDb, provider: P) -> (WireProxy, Receiver<P>) {
    let url = db.function_url_as("shopify");
    let config = tokio_postgres::Config::from_str(&url).expect("url");
    let upstream = config.get_ports().first().copied().expect("port");
    let proxy = WireProxy::start(upstream).await;
    let url = url.replace(&format!(":{upstream}/"), &format!(":{}/", proxy.port));
    let settings = Settings::from_url(&url, None, test_timeouts()).expect("settings");
    let (receiver, _) = receiver_with(settings, provider);
    receiver.warm_up().await;
    (proxy, receiver)
}

#[tokio::test]
async fn the_database_refuses_a_rust_effects_statements_outside_a_claim_its_transaction_won() {
    let db = TestDb::new().await;
    let (receiver, _) = db.receiver(shopify());
    assert_eq!(
        deliver(&receiver, &order(1, 0)).await,
        (200, "processed".into())
    );
    let url = claimonce_tests::roles::login_with(&db, "claimonce_shopify").await;
    let (login, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connect as Shopify's login");
    tokio::spawn(connection);
    let earlier: String = db
        .client()
        .await
        .query_one("SELECT ctid::text FROM processed_events", &[])
        .await
        .expect("the earlier claim")
        .get(0);
    let insert = "INSERT INTO shopify_order_events (order_id, event_id, topic, state, \
                  order_updated_at) VALUES (7, 'forged', 'orders/create', 'open', now())";
    for sql in [
        insert.to_owned(),
        "UPDATE shopify_orders SET state = 'cancelled'".to_owned(),
        // Reading an order is refused too: the row exists, the claim does not.
        "SELECT count(*) FROM shopify_orders".to_owned(),
        // The setting that names a claim, forged to the earlier delivery's ledger row.
        format!("BEGIN; SELECT set_config('claimonce.claim', '{earlier}', true); {insert}; COMMIT"),
    ] {
        assert_eq!(sqlstate(&login, &sql).await, "42501", "{sql}");
        let _ = login.batch_execute("ROLLBACK").await;
    }
    // A claim won in an earlier transaction does not carry over to the next.
    assert_eq!(
        sqlstate(&login, &claim_call("shopify", "b-earlier", "orders/create")).await,
        "ok"
    );
    assert_eq!(sqlstate(&login, insert).await, "42501");
    assert_eq!(
        written(&db).await,
        (1, 1, 2),
        "only the claim of b-earlier was added"
    );
    // Under a claim its own transaction won, the same statement runs.
    assert_eq!(
        sqlstate(
            &login,
            &format!(
                "BEGIN; {}; {insert}; COMMIT",
                claim_call("shopify", "b-own", "orders/create")
            )
        )
        .await,
        "ok"
    );
    assert_eq!(written(&db).await, (1, 2, 3));
    // Under a claim of its own, the login still reads no order's email, status or amount:
    // only what the effect compares.
    for (column, expected) in [
        ("email", "42501"),
        ("financial_status", "42501"),
        ("total_price", "42501"),
        ("state, source_updated_at, source_rank", "ok"),
    ] {
        let event = format!("b-read-{}", column.len());
        assert_eq!(
            sqlstate(
                &login,
                &format!(
                    "BEGIN; {}; SELECT {column} FROM shopify_orders; COMMIT",
                    claim_call("shopify", &event, "orders/create")
                )
            )
            .await,
            expected,
            "{column}"
        );
        let _ = login.batch_execute("ROLLBACK").await;
    }
}

#[tokio::test]
async fn a_claim_an_sql_effect_took_opens_no_rust_effect_table() {
    let db = TestDb::new().await;
    let url = claimonce_tests::roles::login_with(&db, "claimonce_shopify").await;
    let (login, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connect as Shopify's login");
    tokio::spawn(connection);
    // Claims `event`, runs `first`, names the same ledger row again and writes the timeline.
    let transaction = |event: &str, first: &str| {
        format!(
            "BEGIN; {}; \
             SELECT set_config('attack.row', current_setting('claimonce.claim'), true); \
             {first}; \
             SELECT set_config('claimonce.claim', current_setting('attack.row'), true); \
             INSERT INTO shopify_order_events (order_id, event_id, topic, state, \
             order_updated_at) VALUES (7, '{event}', 'orders/create', 'open', now()); COMMIT",
            claim_call("shopify", event, "orders/create")
        )
    };
    // Without the forward, the same transaction writes the timeline row: the refusal below is
    // the spent claim's, not the statement's.
    assert_eq!(
        sqlstate(&login, &transaction("b-open", "SELECT 1")).await,
        "ok"
    );
    assert_eq!(written(&db).await, (0, 1, 1));
    let forward = "SELECT claimonce_forward_v2('shopify', 'b-forwarded', 'shopify.x', '{}', \
                   NULL, NULL)";
    let sql = transaction("b-forwarded", forward);
    assert_eq!(sqlstate(&login, &sql).await, "42501", "{sql}");
    let _ = login.batch_execute("ROLLBACK").await;
    assert_eq!(
        written(&db).await,
        (0, 1, 1),
        "nothing of the second transaction"
    );
}

#[tokio::test]
async fn a_rust_effect_is_unnamed_statements_on_one_transaction_and_pins_nothing() {
    let db = TestDb::new().await;
    let (proxy, receiver) = proxied(&db, shopify()).await;
    let body = order(2, 0);
    for (expected, flights) in [("processed", 4), ("duplicate", 2)] {
        proxy.reset();
        assert_eq!(deliver(&receiver, &body).await, (200, expected.into()));
        // BEGIN pipelined with the claim, then (won) the effect's two statements, then COMMIT.
        assert_eq!(
            proxy.flights(),
            flights,
            "{expected}: {:?}",
            proxy.statements()
        );
        let statements = proxy.statements();
        assert_eq!(statements.first().map(String::as_str), Some("BEGIN"));
        assert_eq!(statements.last().map(String::as_str), Some("COMMIT"));
    }
    assert_eq!(proxy.pinning(), Vec::<String>::new());
    assert_eq!(written(&db).await, (1, 1, 1));
}

/// A provider whose Rust effect keeps the order and then sends `.0`, to show what the handle
/// refuses and that a refusal rolls back what the effect wrote; with `.1`, the effect ignores
/// the statement's error and returns `Ok`.
struct Sends(&'static str, bool);

impl Provider for Sends {
    type Event = ShopifyEvent;
    type Rust<'e> = ThenSends<'e>;

    // Shopify's registry entry: its ledger name and role.
    const MANIFEST: &'static str = include_str!("../Cargo.toml");

    fn verifier(&self) -> Option<&dyn Scheme> {
        Some(shopify_verifier())
    }

    fn parse(
        &self,
        signed: &Signed<'_>,
        unsigned: &Unsigned<'_>,
    ) -> Result<Parsed<ShopifyEvent>, Rejection> {
        shopify_webhook::parse_event(signed, unsigned)
    }

    fn plan<'e>(&'e self, event: &'e Parsed<ShopifyEvent>) -> Plan<ThenSends<'e>> {
        Plan::Rust(ThenSends(self, event))
    }
}

/// [`Sends`]' effect: the order kept, then the statement.
struct ThenSends<'e>(&'e Sends, &'e Parsed<ShopifyEvent>);

impl RustEffect for ThenSends<'_> {
    async fn apply<'a>(&'a self, tx: &'a Tx<'a>) -> Result<(), EffectError> {
        let ThenSends(Sends(statement, ignored), event) = self;
        let ShopifyEvent::Order(order) = &event.event else {
            return Err(EffectError::failed("an order"));
        };
        shopify_webhook::keep_order(tx, &event.event_id, &event.event_type, order).await?;
        let sent = tx.execute(statement, &[]).await;
        if *ignored {
            // The server aborted the transaction; COMMIT would roll it back in silence.
            return Ok(());
        }
        sent.map(drop)
    }
}

fn shopify_verifier() -> &'static BodyHmac {
    static VERIFIER: std::sync::OnceLock<BodyHmac> = std::sync::OnceLock::new();
    VERIFIER.get_or_init(common::verifier)
}

#[tokio::test]
async fn what_the_handle_refuses_never_reaches_the_wire_and_a_failed_effect_rolls_its_claim_back() {
    for (refused, ignored) in [
        ("SET statement_timeout = 0", false),
        ("SELECT set_config('statement_timeout', '0', false)", false),
        ("PREPARE named AS SELECT 1", false),
        ("COMMIT", false),
        // Sent, failed on the server, and its error ignored by the effect.
        ("SELECT 1 / 0", true),
    ] {
        let db = TestDb::new().await;
        let (proxy, receiver) = proxied(&db, Sends(refused, ignored)).await;
        assert_eq!(
            deliver(&receiver, &order(3, 0)).await,
            (500, "about:blank".into()),
            "{refused}"
        );
        assert_eq!(
            proxy.statements().iter().any(|s| s == refused),
            ignored,
            "{refused}: {:?}",
            proxy.statements()
        );
        assert_eq!(proxy.pinning(), Vec::<String>::new(), "{refused}");
        assert_eq!(written(&db).await, (0, 0, 0), "{refused}: rolled back");
        // The sender's retry, to a fixed effect, applies it once.
        let (fixed, _) = db.receiver(shopify());
        assert_eq!(
            deliver(&fixed, &order(3, 0)).await,
            (200, "processed".into())
        );
        assert_eq!(written(&db).await, (1, 1, 1));
    }
}

#[tokio::test]
async fn a_connection_lost_inside_the_effect_or_before_the_commits_answer_applies_once() {
    for (fault, answer) in [
        // Before the second statement reaches the server: the server rolls the transaction
        // back (claim included), and the retry on a new connection applies it.
        (Fault::DropRequestWith("shopify_order_events"), "processed"),
        // The commit reached the server and committed; its answer was lost. The retry finds
        // the claim taken.
        (Fault::DropAnswerTo("COMMIT"), "duplicate"),
    ] {
        let db = TestDb::new().await;
        let (proxy, receiver) = proxied(&db, shopify()).await;
        proxy.inject(fault);
        assert_eq!(
            deliver(&receiver, &order(4, 0)).await,
            (200, answer.into()),
            "{fault:?}"
        );
        assert_eq!(proxy.fired(), 1, "{fault:?}");
        assert_eq!(written(&db).await, (1, 1, 1), "{fault:?}");
    }
}

#[tokio::test]
async fn concurrent_copies_of_an_order_apply_once() {
    let db = TestDb::new().await;
    let body = Arc::new(order(5, 0));
    let environments = (0..8).map(|_| db.receiver(shopify()).0).collect();
    let answers = all_at_once(environments, move |r| {
        let body = Arc::clone(&body);
        async move { deliver(&r, &body).await }
    })
    .await;
    let processed = answers.iter().filter(|a| a.1 == "processed").count();
    assert_eq!(processed, 1, "{answers:?}");
    assert!(answers.iter().all(|a| a.0 == 200), "{answers:?}");
    assert_eq!(written(&db).await, (1, 1, 1));
}

#[tokio::test]
async fn a_function_killed_inside_its_rust_effect_leaves_nothing_and_its_retry_applies_once() {
    let db = TestDb::new().await;
    let admin = db.client().await;
    // The gate: the timeline insert (the effect's second statement) waits for an advisory lock
    // the test holds. The login's statement bound is raised so only the test ends the wait.
    admin
        .batch_execute(&format!(
            "CREATE FUNCTION hold_here() RETURNS trigger LANGUAGE plpgsql SET lock_timeout = 0 AS $$
             BEGIN PERFORM pg_advisory_xact_lock_shared(4243); RETURN NEW; END $$;
             CREATE TRIGGER hold_here BEFORE INSERT ON shopify_order_events
                 FOR EACH ROW EXECUTE FUNCTION hold_here();
             ALTER ROLE {} SET statement_timeout = '60s';
             ALTER ROLE {0} SET idle_in_transaction_session_timeout = '60s';",
            login_name(&db.name, "shopify")
        ))
        .await
        .expect("the gate");
    let holder = db.client().await;
    holder
        .batch_execute("SELECT pg_advisory_lock(4243)")
        .await
        .expect("close the gate");
    let f = function("shopify");
    let binary = binaries().await.join(f.binary);
    let url = db.function_url_as("shopify");
    let env = [("DATABASE_URL", url.as_str()), (f.secret_var, f.dev_secret)];
    let body = order(6, 0);
    let mut event = v2_event(
        "POST",
        "/webhooks/shopify",
        &[
            ("content-type", "application/json"),
            ("x-shopify-topic", "orders/create"),
        ],
        &body,
        false,
    );
    claimonce_local::sign::resign(&mut event, 0).expect("sign");
    let api = Arc::new(RuntimeApi::start(f.binary).await.expect("api"));
    let mut victim = api
        .command(&binary, &env)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let pending = {
        let (api, event) = (Arc::clone(&api), event.to_string());
        tokio::spawn(async move { api.invoke(event, Duration::from_secs(300)).await })
    };
    let pid = at_the_gate(&db, 1).await;
    assert!(!pending.is_finished(), "answered from the gate");
    victim.start_kill().expect("SIGKILL");
    victim.wait().await.expect("reaped");
    match pending.await.expect("invoke task") {
        Ok(Outcome::Error(error)) => {
            let error: Value = serde_json::from_slice(&error).expect("JSON error");
            assert_eq!(error["errorType"], EXIT_ERROR_TYPE, "{error}");
        }
        other => panic!("the killed invocation ended with {other:?}"),
    }
    holder
        .batch_execute("SELECT pg_advisory_unlock(4243)")
        .await
        .expect("open the gate");
    // The statement finishes; the transaction, its client gone, never commits.
    let started = std::time::Instant::now();
    while admin
        .query_opt(
            "SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND xact_start IS NOT NULL",
            &[&pid],
        )
        .await
        .expect("activity")
        .is_some()
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the transaction outlived its client"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        written(&db).await,
        (0, 0, 0),
        "the claim went with the effect"
    );
    let _instance = api
        .command(&binary, &env)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    for expected in ["processed", "duplicate"] {
        let answer = match api
            .invoke(event.to_string(), Duration::from_secs(30))
            .await
            .expect("answer")
        {
            Outcome::Response(p) => payload_outcome(&serde_json::from_slice(&p).expect("json")),
            Outcome::Error(e) => panic!("function error: {}", String::from_utf8_lossy(&e)),
        };
        assert_eq!(answer, (200, expected.into()));
    }
    assert_eq!(written(&db).await, (1, 1, 1));
}

#[tokio::test]
async fn a_storm_of_duplicates_and_failures_applies_every_order_event_exactly_once() {
    let events: u64 = std::env::var("CLAIMONCE_STORM_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(2000, |n: u64| n.min(2000));
    let db = TestDb::new().await;
    // One event in 20 fails its first commit: a deferred trigger raises at COMMIT, after the
    // claim and both of the effect's statements ran. The test takes the event off the list
    // when it sees the 500, so the sender's retry heals it.
    db.client()
        .await
        .batch_execute(
            "CREATE TABLE storm_failures (order_id bigint PRIMARY KEY);
             CREATE FUNCTION storm_fail() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 IF EXISTS (SELECT 1 FROM storm_failures WHERE order_id = NEW.order_id) THEN
                     RAISE EXCEPTION 'injected failure';
                 END IF;
                 RETURN NEW;
             END $$;
             CREATE CONSTRAINT TRIGGER storm_fail AFTER INSERT ON shopify_order_events
                 DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION storm_fail();
             GRANT SELECT ON storm_failures TO claimonce_shopify;",
        )
        .await
        .expect("failure trigger");
    // Event i is an update of order i / 4 at minute i % 4: several events per order, each
    // delivered 1 to 3 times, in an order that mixes them.
    let planned: Vec<i64> = (0..events)
        .filter(|i| i % 20 == 7)
        .map(|i| i64::try_from(i).expect("n"))
        .collect();
    db.client()
        .await
        .execute(
            "INSERT INTO storm_failures SELECT unnest($1::bigint[])",
            &[&planned],
        )
        .await
        .expect("plan the failures");
    let mut queue: Vec<u64> = (0..events)
        .flat_map(|i| (0..=i % 3).map(move |_| i))
        .collect();
    let deliveries = queue.len();
    XorShift(0x5eed).shuffle(&mut queue);
    let queue = Arc::new(Mutex::new(VecDeque::from(queue)));
    let counts = Arc::new([AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)]);
    let admin = Arc::new(db.client().await);
    // Event i's order id is i, so each one's timeline row is its own, and a failure planned
    // for order i is event i's.
    let body = |i: u64| {
        order(
            i64::try_from(i).expect("id"),
            u32::try_from(i % 60).expect("m"),
        )
    };
    // 500s per event: only planned events may get one.
    let failed_events = Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::new()));
    let environments = (0..16).map(|_| db.receiver(shopify()).0).collect();
    all_at_once(environments, |r| {
        let (queue, counts, admin, failed_events) = (
            Arc::clone(&queue),
            Arc::clone(&counts),
            Arc::clone(&admin),
            Arc::clone(&failed_events),
        );
        async move {
            loop {
                let Some(i) = queue.lock().await.pop_front() else {
                    break;
                };
                let slot = match deliver(&r, &body(i)).await {
                    (200, name) if name == "processed" => 0,
                    (200, _) => 1,
                    answer => {
                        assert_eq!(answer.0, 500, "event {i}: {answer:?}");
                        // Copies in flight together may all meet the planned failure before
                        // the first 500 takes it off the list: each is retried, a bounded
                        // number of times.
                        admin
                            .execute(
                                "DELETE FROM storm_failures WHERE order_id = $1",
                                &[&i64::try_from(i).expect("id")],
                            )
                            .await
                            .expect("take the failure off the list");
                        {
                            let mut seen = failed_events.lock().expect("failed events");
                            let times = seen.entry(i).or_insert(0);
                            *times += 1;
                            assert!(*times <= 4, "event {i} keeps failing");
                        }
                        queue.lock().await.push_back(i);
                        2
                    }
                };
                counts[slot].fetch_add(1, Ordering::Relaxed);
            }
        }
    })
    .await;
    let [processed, duplicate, failed] = counts.each_ref().map(|c| c.load(Ordering::Relaxed));
    eprintln!(
        "rust storm: {events} events, {deliveries} deliveries, {failed} injected failures: \
         processed {processed}, duplicate {duplicate}"
    );
    let failed_events: Vec<i64> = failed_events
        .lock()
        .expect("failed events")
        .keys()
        .map(|&i| i64::try_from(i).expect("id"))
        .collect();
    assert_eq!(
        failed_events, planned,
        "the failures are the planned ones, each seen"
    );
    assert!(failed >= u64::try_from(planned.len()).expect("n"));
    assert_eq!(processed, events, "each event processed exactly once");
    assert_eq!(
        processed + duplicate,
        u64::try_from(deliveries).expect("n"),
        "every delivery answered 200 in the end"
    );
    let n = i64::try_from(events).expect("n");
    assert_eq!(written(&db).await, (n, n, n));
    assert_eq!(
        db.count("SELECT count(DISTINCT event_id) FROM shopify_order_events")
            .await,
        n
    );
}

/// Shopify's effects, except that the first delivery of each order in `.0` waits out its deadline
/// before its first statement: an effect slower than the delivery's bound (a computation, a
/// blocking call), whose next statement the handle then refuses. The wait does not yield, so
/// nothing else on the receiver's runtime (its deadline timer included) runs before the effect
/// has come back: the claim is won and open when the deadline passes.
/// Clones share the set, so several environments overrun each order once between them.
#[derive(Clone)]
struct Overruns(Arc<std::sync::Mutex<std::collections::BTreeSet<i64>>>);

impl Overruns {
    /// The first delivery of each of these orders overruns.
    fn orders(ids: impl IntoIterator<Item = i64>) -> Self {
        Self(Arc::new(std::sync::Mutex::new(ids.into_iter().collect())))
    }
}

impl Provider for Overruns {
    type Event = ShopifyEvent;
    type Rust<'e> = Overrun<'e>;

    // Shopify's registry entry: its ledger name and role.
    const MANIFEST: &'static str = include_str!("../Cargo.toml");

    fn verifier(&self) -> Option<&dyn Scheme> {
        Some(shopify_verifier())
    }

    fn parse(
        &self,
        signed: &Signed<'_>,
        unsigned: &Unsigned<'_>,
    ) -> Result<Parsed<ShopifyEvent>, Rejection> {
        shopify_webhook::parse_event(signed, unsigned)
    }

    fn plan<'e>(&'e self, event: &'e Parsed<ShopifyEvent>) -> Plan<Overrun<'e>> {
        shopify_webhook::plan(event).map_rust(|keep| Overrun(self, keep))
    }
}

/// [`Overruns`]' effect: Shopify's, held to the deadline first for an order it names.
struct Overrun<'e>(&'e Overruns, KeepOrder<'e>);

impl RustEffect for Overrun<'_> {
    async fn apply<'a>(&'a self, tx: &'a Tx<'a>) -> Result<(), EffectError> {
        let Overrun(Overruns(orders), keep) = self;
        if orders.lock().expect("overruns").remove(&keep.order.id) {
            std::thread::sleep(tx.time_left());
            assert_eq!(tx.time_left(), Duration::ZERO, "held to the deadline");
        }
        keep.apply(tx).await
    }
}

/// Transactions the Shopify login holds open while idle: what a connection left in a
/// transaction looks like from the server.
async fn idle_in_transaction(db: &TestDb) -> i64 {
    db.count(&format!(
        "SELECT count(*) FROM pg_stat_activity WHERE usename = '{}' \
         AND state LIKE 'idle in transaction%'",
        login_name(&db.name, "shopify")
    ))
    .await
}

#[tokio::test]
async fn a_rust_effect_past_its_deadline_leaves_no_transaction_for_the_next_delivery() {
    let db = TestDb::new().await;
    let settings = Settings::from_url(
        &db.function_url_as("shopify"),
        None,
        claimonce::db::Timeouts::new(Duration::from_secs(2), Duration::from_millis(400)),
    )
    .expect("settings");
    let (receiver, _) = receiver_with(settings, Overruns::orders([1]));
    receiver.warm_up().await;
    // The claim is won, the deadline passes inside the effect, its first statement is refused.
    assert_eq!(
        deliver(&receiver, &order(1, 0)).await,
        (500, "about:blank".into())
    );
    assert_eq!(written(&db).await, (0, 0, 0), "nothing of it committed");
    assert_eq!(
        idle_in_transaction(&db).await,
        0,
        "no transaction left open on the environment's connection"
    );
    // The next deliveries on the same environment, by the SQL path and the Rust path: each 200
    // is durable when it is answered, seen from another connection, and carries nothing else.
    let shop = br#"{"id":548380009,"myshopify_domain":"jsmith.myshopify.com","updated_at":"2026-11-30T12:00:00-05:00"}"#;
    assert_eq!(
        common::deliver(&receiver, "app/uninstalled", "w-sql", shop).await,
        (200, "processed".into())
    );
    assert_eq!(
        db.count("SELECT count(*) FROM shopify_shops WHERE uninstalled_at IS NOT NULL")
            .await,
        1,
        "the SQL effect's 200 is committed"
    );
    assert_eq!(
        deliver(&receiver, &order(2, 0)).await,
        (200, "processed".into())
    );
    assert_eq!(
        written(&db).await,
        (1, 1, 2),
        "order 2 and the shop, not order 1"
    );
    assert_eq!(idle_in_transaction(&db).await, 0);
    // The sender's retry of order 1 is applied: its claim did not survive without its effect.
    assert_eq!(
        deliver(&receiver, &order(1, 0)).await,
        (200, "processed".into())
    );
    assert_eq!(written(&db).await, (2, 2, 3));
    assert_eq!(
        db.count(
            "SELECT count(*) FROM processed_events p WHERE p.event_type LIKE 'orders/%' \
             AND NOT EXISTS (SELECT 1 FROM shopify_order_events e WHERE e.event_id = p.event_id)"
        )
        .await,
        0,
        "no order's ledger row without its effect"
    );
}

#[tokio::test]
async fn in_a_storm_of_effects_past_their_deadline_every_200_is_durable_and_every_claim_has_its_effect()
 {
    let db = TestDb::new().await;
    let events: i64 = 120;
    // One order in ten overruns its first delivery; each is delivered one to three times, in a
    // mixed order, across four environments that each reuse their connection.
    let overrun: Vec<i64> = (0..events).filter(|i| i % 10 == 3).collect();
    let overruns = Overruns::orders(overrun.iter().copied());
    let mut queue: Vec<i64> = (0..events)
        .flat_map(|i| (0..=i % 3).map(move |_| i))
        .collect();
    XorShift(0x0dea_d11e).shuffle(&mut queue);
    let queue = Arc::new(Mutex::new(VecDeque::from(queue)));
    let environments = (0..4)
        .map(|_| {
            let settings = Settings::from_url(
                &db.function_url_as("shopify"),
                None,
                claimonce::db::Timeouts::new(Duration::from_secs(2), Duration::from_millis(400)),
            )
            .expect("settings");
            receiver_with(settings, overruns.clone()).0
        })
        .collect();
    let admin = Arc::new(db.client().await);
    let failures = Arc::new(AtomicU64::new(0));
    let processed = Arc::new(AtomicU64::new(0));
    all_at_once(environments, |r| {
        let (queue, admin, failures, processed) = (
            Arc::clone(&queue),
            Arc::clone(&admin),
            Arc::clone(&failures),
            Arc::clone(&processed),
        );
        async move {
            loop {
                let Some(i) = queue.lock().await.pop_front() else {
                    break;
                };
                let answer = deliver(&r, &order(i, u32::try_from(i % 60).expect("m"))).await;
                // What the answer claims, checked from another connection as it is given.
                let durable: i64 = admin
                    .query_one(
                        "SELECT count(*) FROM shopify_order_events e \
                         JOIN processed_events p ON p.event_id = e.event_id \
                         WHERE e.order_id = $1",
                        &[&i],
                    )
                    .await
                    .expect("durable")
                    .get(0);
                match answer {
                    (200, name) => {
                        assert_eq!(durable, 1, "order {i} answered {name}, not durable");
                        if name == "processed" {
                            processed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    other => {
                        assert_eq!(other, (500, "about:blank".into()), "order {i}");
                        failures.fetch_add(1, Ordering::Relaxed);
                        queue.lock().await.push_back(i);
                    }
                }
            }
        }
    })
    .await;
    // Each planned overrun happened; while one blocks the runtime, the other environments'
    // deliveries in flight pass their deadlines too (a statement on the wire, an answer not yet
    // read), so there are more 500s than overruns: each one retried and healed.
    assert!(
        overruns.0.lock().expect("overruns").is_empty(),
        "every planned overrun ran"
    );
    assert!(failures.load(Ordering::Relaxed) >= u64::try_from(overrun.len()).expect("n"));
    eprintln!(
        "deadline storm: {events} orders, {} answered 500 and retried",
        failures.load(Ordering::Relaxed)
    );
    assert_eq!(
        processed.load(Ordering::Relaxed),
        u64::try_from(events).expect("n"),
        "each order processed exactly once"
    );
    assert_eq!(written(&db).await, (events, events, events));
    assert_eq!(
        db.count(
            "SELECT count(*) FROM processed_events p WHERE NOT EXISTS \
             (SELECT 1 FROM shopify_order_events e WHERE e.event_id = p.event_id)"
        )
        .await,
        0,
        "no ledger row without its effect"
    );
    assert_eq!(idle_in_transaction(&db).await, 0);
}

/// The two ways a Rust effect's transaction can end without an answer that says it is over,
/// each discarding the connection so that no later delivery runs inside what is left of it:
/// a `COMMIT` the server refuses (a deferred constraint raising at commit: 500, nothing
/// written) and a `ROLLBACK` whose answer never comes (the effect failed, then the answer to
/// its rollback was lost: 500, nothing written). Each time the next delivery goes out on a
/// new connection and applies once.
#[tokio::test]
async fn a_refused_commit_or_an_unanswered_rollback_discards_the_connection() {
    let db = TestDb::new().await;
    let (proxy, receiver) = proxied(&db, shopify()).await;
    let connections = || proxy.traffic().0;

    // A COMMIT the server refuses.
    db.client()
        .await
        .batch_execute(
            "CREATE FUNCTION refuse_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN RAISE EXCEPTION 'refused at commit'; END $$; \
             CREATE CONSTRAINT TRIGGER refuse_at_commit AFTER INSERT ON shopify_order_events \
             DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_at_commit()",
        )
        .await
        .expect("a constraint checked at commit");
    let before = connections();
    assert_eq!(deliver(&receiver, &order(21, 0)).await.0, 500);
    assert_eq!(
        written(&db).await,
        (0, 0, 0),
        "the refused commit wrote nothing"
    );
    db.client()
        .await
        .batch_execute("DROP TRIGGER refuse_at_commit ON shopify_order_events")
        .await
        .expect("the constraint gone");
    assert_eq!(
        deliver(&receiver, &order(21, 0)).await,
        (200, "processed".into())
    );
    assert_eq!(
        connections(),
        before + 1,
        "the connection whose COMMIT was refused was not used again"
    );
    assert_eq!(written(&db).await, (1, 1, 1));

    // A ROLLBACK whose answer never comes: the effect fails (a value the table refuses), the
    // rollback is sent, and its answer is lost.
    db.client()
        .await
        .batch_execute(
            "ALTER TABLE shopify_order_events ADD CONSTRAINT not_order_22 \
             CHECK (order_id <> 22)",
        )
        .await
        .expect("a constraint the next order breaks");
    proxy.inject(Fault::DropAnswerTo("ROLLBACK"));
    let before = connections();
    assert_eq!(deliver(&receiver, &order(22, 30)).await.0, 500);
    assert_eq!(proxy.fired(), 1, "the rollback's answer was lost");
    assert_eq!(written(&db).await, (1, 1, 1), "nothing of order 22");
    assert_eq!(
        deliver(&receiver, &order(23, 1)).await,
        (200, "processed".into())
    );
    assert_eq!(
        connections(),
        before + 1,
        "a new connection after the lost rollback"
    );
    assert_eq!(written(&db).await, (2, 2, 2));
}
