//! The transactional outbox: a message written by an effect exists exactly when its claim
//! committed, and the relay hands every message on once (SKIP LOCKED across relays), keeps
//! failures for the next run, and, as the real binary, sends to SQS with the row id as key.

use std::collections::HashSet;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use claimonce::Receiver;
use claimonce::db::Settings;
use claimonce::jobs::Budget;
use claimonce_local::runtime_api::{Outcome, RuntimeApi};
use claimonce_tests::TestDb;
use claimonce_tests::apigw::{assert_generic_500, outcome, post_stripe};
use claimonce_tests::db::{receiver_at, test_timeouts};
use claimonce_tests::lambda::binaries;
use claimonce_tests::recorder::Recorder;
use claimonce_tests::roles::login_with;
use claimonce_tests::sign::{checkout_completed, stripe};
use outbox_relay::{Dispatch, Options, OutboxRow, Report, relay};
use serde_json::{Value, json};
use stripe_webhook::Stripe;
use tokio_postgres::Client;

async fn deliver(receiver: &Receiver<Stripe>, body: &[u8]) -> (u16, String) {
    outcome(&post_stripe(receiver, body).await)
}

#[tokio::test]
async fn an_outbox_row_exists_exactly_when_its_claim_commits() {
    let db = TestDb::new().await;
    // The receiver logs in as a user granted only claimonce_handler, as in production: the
    // outbox insert must work with the handler's INSERT-only grant.
    let url = login_with(&db, "claimonce_handler").await;
    // A later statement of the same effect fails after the outbox row was written (as a
    // deadlock or a failover would), while the test says so.
    db.client()
        .await
        .batch_execute(
            "CREATE TABLE fail_after_outbox (on_ boolean); INSERT INTO fail_after_outbox VALUES (true);
             CREATE FUNCTION fail_after_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 IF EXISTS (SELECT 1 FROM fail_after_outbox) THEN
                     RAISE EXCEPTION 'injected failure after the outbox row';
                 END IF;
                 RETURN NEW;
             END $$;
             CREATE TRIGGER fail_after_outbox AFTER INSERT ON outbox
                 FOR EACH ROW EXECUTE FUNCTION fail_after_outbox();
             GRANT SELECT ON fail_after_outbox TO claimonce_handler;",
        )
        .await
        .expect("failing trigger");
    let (receiver, _) = receiver_at(&url, stripe());
    let body = checkout_completed("evt_welcome", "cus_welcome", "jenny@example.com");

    // The effect fails after queuing the outbox row: everything rolls back, claim included.
    let failed = post_stripe(&receiver, &body).await;
    // P0001 is raise_exception's SQLSTATE; the message and the trigger are ours.
    assert_generic_500(
        &failed,
        &[
            "P0001",
            "injected",
            "fail_after_outbox",
            "outbox",
            "jenny@example.com",
        ],
    );
    assert_eq!(db.count("SELECT count(*) FROM outbox").await, 0);
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 0);
    assert_eq!(db.count("SELECT count(*) FROM customers").await, 0);

    // Stripe retries; this time it commits, and the message with it.
    db.client()
        .await
        .batch_execute("DELETE FROM fail_after_outbox")
        .await
        .expect("stop failing");
    assert_eq!(deliver(&receiver, &body).await, (200, "processed".into()));
    let row = db
        .client()
        .await
        .query_one(
            "SELECT topic, payload::text, provider, event_id, dedup_key, dispatched_at IS NULL, attempts \
             FROM outbox",
            &[],
        )
        .await
        .expect("one outbox row");
    assert_eq!(row.get::<_, String>(0), "email.welcome");
    let payload: Value = serde_json::from_str(row.get(1)).expect("payload");
    assert_eq!(
        payload,
        json!({"stripe_customer_id": "cus_welcome", "email": "jenny@example.com"})
    );
    assert_eq!(row.get::<_, Option<String>>(2).as_deref(), Some("stripe"));
    assert_eq!(
        row.get::<_, Option<String>>(3).as_deref(),
        Some("evt_welcome")
    );
    assert_eq!(
        row.get::<_, Option<String>>(4).as_deref(),
        Some("cus_welcome")
    );
    assert!(row.get::<_, bool>(5));
    assert_eq!(row.get::<_, i32>(6), 0);

    // A redelivery is a duplicate: no second message.
    assert_eq!(deliver(&receiver, &body).await, (200, "duplicate".into()));
    // A second checkout by the same customer is processed, but the welcome goes out once.
    let again = checkout_completed("evt_welcome_2", "cus_welcome", "jenny@example.com");
    assert_eq!(deliver(&receiver, &again).await, (200, "processed".into()));
    // A checkout without an email has nobody to welcome.
    let body = stripe_webhook_checkout_without_email("evt_no_email", "cus_no_email");
    assert_eq!(deliver(&receiver, &body).await, (200, "processed".into()));
    assert_eq!(db.count("SELECT count(*) FROM outbox").await, 1);
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 3);
}

#[tokio::test]
async fn a_returning_customer_is_not_welcomed_again_after_the_sweep_removed_the_message() {
    let db = TestDb::new().await;
    // As in production: the handler's column grants must be enough for the effect.
    let url = login_with(&db, "claimonce_handler").await;
    let (receiver, _) = receiver_at(&url, stripe());
    let first = checkout_completed("evt_back_1", "cus_back", "back@example.com");
    assert_eq!(deliver(&receiver, &first).await, (200, "processed".into()));
    assert_eq!(db.count("SELECT count(*) FROM outbox").await, 1);
    // The relay sent the welcome long ago, and the retention sweep removed the sent row, as
    // it removes every row dispatched before the window.
    db.client()
        .await
        .batch_execute(
            "UPDATE outbox SET dispatched_at = now() - interval '400 days'; \
             DELETE FROM outbox WHERE dispatched_at < now() - interval '90 days';",
        )
        .await
        .expect("sent and swept");
    assert_eq!(db.count("SELECT count(*) FROM outbox").await, 0);
    // The customer comes back with a new checkout (a new event id): provisioned again, and
    // "once per customer" means once for good.
    let again = checkout_completed("evt_back_2", "cus_back", "back@example.com");
    assert_eq!(deliver(&receiver, &again).await, (200, "processed".into()));
    assert_eq!(
        db.count("SELECT count(*) FROM outbox WHERE topic = 'email.welcome'")
            .await,
        0,
        "a returning customer is not welcomed twice"
    );
    // A customer first known from an invoice (Stripe does not order its events) is still
    // welcomed at its checkout: the guard is "welcomed", not "new".
    let invoice = claimonce_tests::sign::invoice_paid("evt_inv_first", "cus_inv_first", 5);
    assert_eq!(
        deliver(&receiver, &invoice).await,
        (200, "processed".into())
    );
    let checkout = checkout_completed("evt_inv_then", "cus_inv_first", "first@example.com");
    assert_eq!(
        deliver(&receiver, &checkout).await,
        (200, "processed".into())
    );
    assert_eq!(
        db.count("SELECT count(*) FROM outbox WHERE dedup_key = 'cus_inv_first'")
            .await,
        1
    );
    assert_eq!(db.count("SELECT count(*) FROM customers").await, 2);
}

fn stripe_webhook_checkout_without_email(id: &str, customer: &str) -> Vec<u8> {
    claimonce_tests::sign::stripe_event(
        id,
        "checkout.session.completed",
        1_700_000_000,
        json!({"id": format!("cs_{id}"), "object": "checkout.session", "customer": customer,
               "customer_details": {"email": null}}),
    )
}

/// A dispatcher that records what it was given, can refuse chosen rows, and can be slow.
#[derive(Clone, Default)]
struct Recording {
    sent: Arc<Mutex<Vec<i64>>>,
    refuse: Arc<Mutex<HashSet<i64>>>,
    delay: Duration,
}

impl Recording {
    fn sent(&self) -> Vec<i64> {
        self.sent.lock().expect("sent").clone()
    }
}

impl Dispatch for Recording {
    type Error = String;

    async fn send(&self, row: &OutboxRow) -> Result<(), String> {
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        if self.refuse.lock().expect("refuse").contains(&row.id) {
            return Err(format!("downstream refused key {}", row.idempotency_key()));
        }
        assert_eq!(row.idempotency_key(), row.id.to_string());
        assert!(row.message_body().is_some(), "{row:?}");
        self.sent.lock().expect("sent").push(row.id);
        Ok(())
    }
}

async fn messages(client: &Client, count: i64) -> Vec<i64> {
    client
        .query(
            "INSERT INTO outbox (topic, payload, provider, event_id) \
             SELECT 'crm.ping', jsonb_build_object('n', n), 'stripe', 'evt_' || n \
             FROM generate_series(1, $1::bigint) AS n RETURNING id",
            &[&count],
        )
        .await
        .expect("insert messages")
        .iter()
        .map(|r| r.get(0))
        .collect()
}

fn plenty() -> Budget {
    Budget::until(Instant::now() + Duration::from_secs(60))
}

async fn run_relay(db: &TestDb, options: Options, dispatch: &Recording) -> Report {
    let settings = db.settings();
    let client = settings.connect().await.expect("connect");
    relay(&client, settings.timeouts(), &options, dispatch, &plenty()).await
}

/// The shipped options with `batch_size`, and no backoff: a failed row is tried again by the
/// next run at once (the backoff has its own test).
fn options(batch_size: u32) -> Options {
    Options {
        batch_size,
        retry_base: Duration::ZERO,
        ..Options::default()
    }
}

#[tokio::test]
async fn the_relay_delivers_every_row_once_and_marks_it() {
    let db = TestDb::new().await;
    let ids = messages(&db.client().await, 60).await;
    let dispatch = Recording::default();

    let report = run_relay(&db, options(25), &dispatch).await;
    assert_eq!(
        report,
        Report {
            dispatched: 60,
            failed: 0,
            batches: 3,
            finished: true,
            oldest_pending_seconds: 0.0,
            set_aside: 0,
            error: None
        }
    );
    assert_eq!(dispatch.sent(), ids, "every row once, in id order");
    assert_eq!(
        db.count("SELECT count(*) FROM outbox WHERE dispatched_at IS NOT NULL AND attempts = 1 AND last_error IS NULL")
            .await,
        60
    );

    let again = run_relay(&db, options(25), &dispatch).await;
    assert_eq!(
        (again.dispatched, again.batches, again.finished),
        (0, 1, true)
    );
    assert_eq!(dispatch.sent().len(), 60);
}

#[tokio::test]
async fn two_relays_at_once_never_deliver_a_row_twice() {
    let db = TestDb::new().await;
    let ids = messages(&db.client().await, 200).await;
    let slow = |_| Recording {
        delay: Duration::from_millis(2),
        ..Recording::default()
    };
    let (a, b): (Recording, Recording) = (slow(()), slow(()));
    let (settings_a, settings_b) = (db.settings(), db.settings());
    let client_a = settings_a.connect().await.expect("connect");
    let client_b = settings_b.connect().await.expect("connect");
    let (small, budget) = (options(10), plenty());
    let (report_a, report_b) = tokio::join!(
        relay(&client_a, settings_a.timeouts(), &small, &a, &budget),
        relay(&client_b, settings_b.timeouts(), &small, &b, &budget),
    );
    let (sent_a, sent_b) = (a.sent(), b.sent());
    assert!(
        !sent_a.is_empty() && !sent_b.is_empty(),
        "both relays took part: {report_a:?} {report_b:?}"
    );
    let mut all: Vec<i64> = sent_a.iter().chain(&sent_b).copied().collect();
    all.sort_unstable();
    assert_eq!(all, ids, "each row delivered exactly once between the two");
    assert_eq!(report_a.dispatched + report_b.dispatched, 200);
    assert_eq!(
        db.count("SELECT count(*) FROM outbox WHERE dispatched_at IS NOT NULL AND attempts = 1")
            .await,
        200
    );
}

#[tokio::test]
async fn a_failed_send_leaves_the_row_pending_and_a_later_run_delivers_it() {
    let db = TestDb::new().await;
    let ids = messages(&db.client().await, 5).await;
    let (refused_a, refused_b) = (ids[1], ids[3]);
    let dispatch = Recording::default();
    dispatch
        .refuse
        .lock()
        .expect("refuse")
        .extend([refused_a, refused_b]);

    let first = run_relay(&db, options(25), &dispatch).await;
    assert_eq!(
        (first.dispatched, first.failed, first.finished),
        (3, 2, true)
    );
    assert!(
        first.oldest_pending_seconds >= 0.0 && first.error.is_none(),
        "{first:?}"
    );
    let pending = db
        .client()
        .await
        .query(
            "SELECT id, attempts, last_error FROM outbox WHERE dispatched_at IS NULL ORDER BY id",
            &[],
        )
        .await
        .expect("pending");
    let pending: Vec<(i64, i32, Option<String>)> = pending
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        pending,
        vec![
            (
                refused_a,
                1,
                Some(format!("downstream refused key {refused_a}"))
            ),
            (
                refused_b,
                1,
                Some(format!("downstream refused key {refused_b}"))
            ),
        ]
    );

    dispatch.refuse.lock().expect("refuse").clear();
    let second = run_relay(&db, options(25), &dispatch).await;
    assert_eq!((second.dispatched, second.failed), (2, 0));
    assert_eq!(second.oldest_pending_seconds, 0.0);
    let mut sent = dispatch.sent();
    sent.sort_unstable();
    assert_eq!(sent, ids);
    assert_eq!(
        db.count(&format!(
            "SELECT count(*) FROM outbox WHERE id IN ({refused_a}, {refused_b}) \
             AND dispatched_at IS NOT NULL AND attempts = 2 AND last_error IS NULL"
        ))
        .await,
        2
    );
}

/// Ids of the rows the relay attempted, sent or not, in order.
#[derive(Default)]
struct Attempts {
    tried: Arc<Mutex<Vec<i64>>>,
    refuse: Arc<Mutex<HashSet<i64>>>,
}

impl Dispatch for Attempts {
    type Error = String;

    async fn send(&self, row: &OutboxRow) -> Result<(), String> {
        self.tried.lock().expect("tried").push(row.id);
        if self.refuse.lock().expect("refuse").contains(&row.id) {
            return Err("MessageTooLong".into());
        }
        Ok(())
    }
}

#[tokio::test]
async fn a_row_that_cannot_be_sent_backs_off_is_set_aside_and_never_holds_up_the_rest() {
    let db = TestDb::new().await;
    let ids = messages(&db.client().await, 4).await;
    let stuck = ids[0];
    let dispatch = Attempts::default();
    dispatch.refuse.lock().expect("refuse").insert(stuck);
    let settings = db.settings();
    let client = settings.connect().await.expect("connect");
    let run = |options: Options| {
        let (client, settings, dispatch) = (&client, &settings, &dispatch);
        async move { relay(client, settings.timeouts(), &options, dispatch, &plenty()).await }
    };

    // The shipped backoff: refused once, the row waits 30 s; the next run does not try it
    // first (or at all), and the rows behind it went out in the first run.
    let first = run(Options::default()).await;
    assert_eq!((first.dispatched, first.failed), (3, 1), "{first:?}");
    let second = run(Options::default()).await;
    assert_eq!((second.dispatched, second.failed), (0, 0), "{second:?}");
    assert_eq!(
        dispatch.tried.lock().expect("tried").clone(),
        ids,
        "each row tried once: the refused one is waiting"
    );
    assert_eq!(
        db.count(&format!(
            "SELECT count(*) FROM outbox WHERE id = {stuck} AND attempts = 1 \
             AND next_attempt_at > now() + interval '25 seconds' AND dead_at IS NULL"
        ))
        .await,
        1
    );

    // With no wait and three attempts in all, its third is its last: set aside, its error
    // kept, never tried again, counted, and left out of the backlog's age.
    let quick = Options {
        max_attempts: 3,
        retry_base: Duration::ZERO,
        ..Options::default()
    };
    db.client()
        .await
        .batch_execute(&format!(
            "UPDATE outbox SET next_attempt_at = now() WHERE id = {stuck}"
        ))
        .await
        .expect("its wait passed");
    for _ in 0..2 {
        run(quick).await;
    }
    let after = run(quick).await;
    assert_eq!(after.failed, 0, "a set-aside row is not tried: {after:?}");
    assert_eq!(after.set_aside, 1);
    assert_eq!(after.oldest_pending_seconds, 0.0);
    assert_eq!(
        dispatch
            .tried
            .lock()
            .expect("tried")
            .iter()
            .filter(|&&id| id == stuck)
            .count(),
        3
    );
    assert_eq!(
        db.count(&format!(
            "SELECT count(*) FROM outbox WHERE id = {stuck} AND attempts = 3 \
             AND dead_at IS NOT NULL AND last_error = 'MessageTooLong' AND dispatched_at IS NULL"
        ))
        .await,
        1
    );

    // OPERATIONS.md's requeue, once the cause is fixed: the next run sends it.
    dispatch.refuse.lock().expect("refuse").clear();
    db.client()
        .await
        .batch_execute(claimonce_tests::operations::requeue_sql())
        .await
        .expect("requeue");
    let healed = run(quick).await;
    assert_eq!((healed.dispatched, healed.set_aside), (1, 0), "{healed:?}");
    assert_eq!(
        db.count("SELECT count(*) FROM outbox WHERE dispatched_at IS NULL")
            .await,
        0
    );
}

/// A dispatcher whose send of one row never answers (a queue endpoint that accepts the
/// connection and says nothing); every other row is taken. Records what it was handed.
struct Hangs {
    row: i64,
    tried: Mutex<Vec<i64>>,
}

impl Dispatch for Hangs {
    type Error = String;

    async fn send(&self, row: &OutboxRow) -> Result<(), String> {
        self.tried.lock().expect("tried").push(row.id);
        if row.id == self.row {
            std::future::pending::<()>().await;
        }
        Ok(())
    }
}

/// A send that hangs past the relay's send timeout is cut there: that row backs off with
/// "send timed out", and the rows behind it are sent in the same run.
#[tokio::test]
async fn a_send_that_hangs_past_the_send_timeout_backs_off_and_the_rows_behind_it_are_sent() {
    let db = TestDb::new().await;
    let ids = messages(&db.client().await, 3).await;
    let dispatch = Hangs {
        row: ids[0],
        tried: Mutex::new(Vec::new()),
    };
    let settings = db.settings();
    let client = settings.connect().await.expect("connect");
    let options = Options {
        send_timeout: Duration::from_millis(200),
        ..Options::default()
    };
    let report = relay(&client, settings.timeouts(), &options, &dispatch, &plenty()).await;
    assert_eq!((report.dispatched, report.failed), (2, 1), "{report:?}");
    assert_eq!(
        dispatch.tried.lock().expect("tried").clone(),
        ids,
        "the hanging row was handed over first, then the rest"
    );
    assert_eq!(
        db.count(&format!(
            "SELECT count(*) FROM outbox WHERE id = {} AND attempts = 1 \
             AND last_error = 'send timed out' AND next_attempt_at > now() \
             AND dispatched_at IS NULL AND dead_at IS NULL",
            ids[0]
        ))
        .await,
        1,
        "the hanging row backs off"
    );
    assert_eq!(
        db.count("SELECT count(*) FROM outbox WHERE dispatched_at IS NOT NULL")
            .await,
        2
    );
}

#[tokio::test]
async fn the_relay_has_only_the_relay_roles_rights_and_a_relay_login_suffices() {
    let db = TestDb::new().await;
    messages(&db.client().await, 3).await;
    // A login granted claimonce_relay relays.
    let url = login_with(&db, "claimonce_relay").await;
    let settings = Settings::from_url(&url, None, test_timeouts()).expect("settings");
    let client = settings.connect().await.expect("connect as the relay");
    let dispatch = Recording::default();
    let report = relay(
        &client,
        settings.timeouts(),
        &options(25),
        &dispatch,
        &plenty(),
    )
    .await;
    assert_eq!((report.dispatched, report.error.as_deref()), (3, None));
    // The relay role may not touch a message's content, nor delete it.
    for sql in ["UPDATE outbox SET payload = '{}'", "DELETE FROM outbox"] {
        let denied = client.batch_execute(sql).await.expect_err(sql);
        assert_eq!(denied.code().map(|c| c.code()), Some("42501"), "{sql}");
    }

    // On a superuser connection the relay still runs as claimonce_relay: without that role's
    // UPDATE grant (taken away in this database only) it cannot mark anything.
    messages(&db.client().await, 2).await;
    db.client()
        .await
        .batch_execute("REVOKE UPDATE ON outbox FROM claimonce_relay")
        .await
        .expect("revoke");
    let refused = run_relay(&db, options(25), &Recording::default()).await;
    assert_eq!(
        refused.error.as_deref(),
        Some("sqlstate 42501"),
        "{refused:?}"
    );
    assert_eq!(
        db.count("SELECT count(*) FROM outbox WHERE dispatched_at IS NULL")
            .await,
        2
    );
}

/// A run that failed did not measure the backlog: its line leaves `OutboxOldestPendingSeconds`
/// out, so the backlog alarm (missing data breaching) is not told "0 s" by a relay that cannot
/// reach its rows. A run that reached the end reports it.
#[tokio::test]
async fn a_failed_relay_run_reports_no_backlog_age() {
    let db = TestDb::new().await;
    messages(&db.client().await, 2).await;
    let run = |db: &TestDb| {
        let (log, lines) = claimonce::log::Log::capture();
        let relay = outbox_relay::Relay::new(
            db.settings(),
            options(25),
            Recording::default(),
            log,
            "outbox-relay".into(),
        );
        async move {
            let ran = relay.run(&plenty()).await;
            let line = lines.lock().expect("log").join("\n");
            (ran.is_ok(), line)
        }
    };
    let (ok, line) = run(&db).await;
    assert!(ok, "{line}");
    assert!(line.contains(r#""OutboxOldestPendingSeconds":"#), "{line}");
    messages(&db.client().await, 1).await;
    db.client()
        .await
        .batch_execute("REVOKE UPDATE ON outbox FROM claimonce_relay")
        .await
        .expect("revoke");
    let (ok, line) = run(&db).await;
    assert!(
        !ok && line.contains("sqlstate 42501"),
        "the run failed: {line}"
    );
    assert!(!line.contains("OutboxOldestPendingSeconds"), "{line}");
    assert!(!line.contains("oldest_pending_seconds"), "{line}");
}

#[tokio::test]
async fn the_relay_binary_sends_to_sqs_with_the_row_id_as_idempotency_key() {
    let db = TestDb::new().await;
    let ids = messages(&db.client().await, 3).await;
    let refused = ids[2].to_string();
    let sqs = Recorder::sqs(&[refused.as_str()]).await;
    let queue = "https://sqs.us-east-1.amazonaws.com/123456789012/claimonce-outbox.fifo";

    let result = relay_binary(&db, queue, &sqs.url).await;
    assert_eq!(result["dispatched"], 2, "{result}");
    assert_eq!(result["failed"], 1, "{result}");

    let requests = sqs.requests();
    assert_eq!(requests.len(), 3);
    for (request, id) in requests.iter().zip(&ids) {
        let key = id.to_string();
        assert_eq!(
            request.header("x-amz-target"),
            Some("AmazonSQS.SendMessage")
        );
        assert!(request.header("authorization").is_some(), "signed");
        let sent = request.json();
        assert_eq!(sent["QueueUrl"], queue);
        assert_eq!(sent["MessageDeduplicationId"], key.as_str());
        assert_eq!(sent["MessageGroupId"], key.as_str());
        assert_eq!(
            sent["MessageAttributes"]["idempotency-key"],
            json!({"DataType": "String", "StringValue": key})
        );
        assert_eq!(
            sent["MessageAttributes"]["topic"]["StringValue"],
            "crm.ping"
        );
        let body: Value =
            serde_json::from_str(sent["MessageBody"].as_str().expect("body")).expect("JSON body");
        assert_eq!(body["id"], key.as_str());
        assert_eq!(body["topic"], "crm.ping");
        assert_eq!(body["provider"], "stripe");
        assert!(body["payload"]["n"].is_number(), "{body}");
    }
    let rows = db
        .client()
        .await
        .query(
            "SELECT id, dispatched_at IS NOT NULL, attempts, last_error FROM outbox ORDER BY id",
            &[],
        )
        .await
        .expect("rows");
    for row in &rows {
        let id: i64 = row.get(0);
        let error: Option<String> = row.get(3);
        if id.to_string() == refused {
            assert!(!row.get::<_, bool>(1));
            let error = error.expect("the failure is kept");
            assert!(error.contains("InvalidParameterValue"), "{error}");
        } else {
            assert!(row.get::<_, bool>(1));
            assert_eq!(error, None);
        }
        assert_eq!(row.get::<_, i32>(2), 1);
    }
}

/// The relay against a real SQS (moto's server): a FIFO queue created as the template makes
/// the outbox queue, the relay binary sending every row, and a resend of the same rows (a
/// relay that crashed after sending and before marking them) dropped by SQS's own
/// deduplication on the row's id, so the queue holds each row once; the message SQS holds
/// carries the idempotency key and topic as attributes.
#[tokio::test]
async fn the_relay_binary_sends_each_row_once_to_a_real_fifo_queue_even_when_it_sends_twice() {
    let moto = claimonce_tests::moto::moto().await;
    let (sqs, queue) = outbox_queue("outbox").await;
    let db = TestDb::new().await;
    let ids = messages(&db.client().await, 3).await;
    assert_eq!(relay_binary(&db, &queue, &moto.url).await["dispatched"], 3);
    // As if the relay had crashed after sending and before marking: every row pending again.
    db.client()
        .await
        .batch_execute("UPDATE outbox SET dispatched_at = NULL")
        .await
        .expect("pending again");
    assert_eq!(
        relay_binary(&db, &queue, &moto.url).await["dispatched"],
        3,
        "sent again"
    );
    let mut seen = Vec::new();
    for m in drained(&sqs, &queue).await {
        let key = attribute(&m, "idempotency-key")
            .expect("the idempotency key")
            .to_owned();
        let body: Value = serde_json::from_str(m.body().unwrap_or_default()).expect("JSON");
        assert_eq!(body["id"], key.as_str());
        assert_eq!(attribute(&m, "topic"), Some("crm.ping"));
        seen.push(key);
    }
    seen.sort();
    let mut expected: Vec<String> = ids.iter().map(ToString::to_string).collect();
    expected.sort();
    assert_eq!(seen, expected, "each row once");
}

/// One scheduled run of the real relay binary on `db`, sending to `queue` at the SQS
/// `endpoint`; its answer.
async fn relay_binary(db: &TestDb, queue: &str, endpoint: &str) -> Value {
    let api = RuntimeApi::start("outbox-relay").await.expect("api");
    let mut command = api.command(
        &binaries().await.join("outbox-relay"),
        &[
            ("DATABASE_URL", db.function_url()),
            ("OUTBOX_QUEUE_URL", queue),
            ("AWS_ENDPOINT_URL_SQS", endpoint),
            ("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"),
            (
                "AWS_SECRET_ACCESS_KEY",
                "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            ),
            ("AWS_REGION", "us-east-1"),
        ],
    );
    command.stdout(Stdio::null());
    let _instance = command.spawn().expect("spawn outbox-relay");
    let outcome = api
        .invoke(
            json!({"source": "aws.scheduler"}).to_string(),
            Duration::from_secs(30),
        )
        .await
        .expect("the relay answers");
    let Outcome::Response(payload) = outcome else {
        panic!("the relay failed: {outcome:?}");
    };
    serde_json::from_slice(&payload).expect("JSON")
}

/// A FIFO queue in moto's SQS, created as the template makes the outbox queue, and a client.
pub(crate) async fn outbox_queue(name: &str) -> (aws_sdk_sqs::Client, String) {
    use aws_sdk_sqs::types::QueueAttributeName;
    let moto = claimonce_tests::moto::moto().await;
    let sqs = aws_sdk_sqs::Client::new(&moto.aws_config().await);
    let queue = sqs
        .create_queue()
        .queue_name(format!("{name}-{}.fifo", std::process::id()))
        .attributes(QueueAttributeName::FifoQueue, "true")
        .attributes(QueueAttributeName::MaximumMessageSize, "1048576")
        .send()
        .await
        .expect("the FIFO queue")
        .queue_url
        .expect("its URL");
    (sqs, queue)
}

/// Every message on `queue`, received with its attributes and deleted.
pub(crate) async fn drained(
    sqs: &aws_sdk_sqs::Client,
    queue: &str,
) -> Vec<aws_sdk_sqs::types::Message> {
    let mut all = Vec::new();
    loop {
        let received = sqs
            .receive_message()
            .queue_url(queue)
            .max_number_of_messages(10)
            .message_attribute_names("All")
            .send()
            .await
            .expect("receive")
            .messages
            .unwrap_or_default();
        if received.is_empty() {
            return all;
        }
        for m in received {
            sqs.delete_message()
                .queue_url(queue)
                .receipt_handle(m.receipt_handle().unwrap_or_default())
                .send()
                .await
                .expect("delete");
            all.push(m);
        }
    }
}

/// A message attribute's string value.
pub(crate) fn attribute<'m>(
    message: &'m aws_sdk_sqs::types::Message,
    name: &str,
) -> Option<&'m str> {
    message
        .message_attributes()
        .and_then(|a| a.get(name))
        .and_then(|v| v.string_value())
}

/// The bytes a message stands for, decoded as a consumer decodes them (OPERATIONS.md,
/// "Outbox"): base64 when its `claimonce-body-encoding` attribute says so.
fn consumed(message: &aws_sdk_sqs::types::Message) -> Vec<u8> {
    claimonce::sqs::body::decode(
        message.body().unwrap_or_default(),
        attribute(message, claimonce::sqs::body::ENCODING_ATTRIBUTE),
    )
    .expect("a body the consumer can decode")
}

/// The tests' SQS refuses a message body SQS refuses (scripts/moto_server.py): a raw U+FFFF,
/// U+FFFE or control character is InvalidMessageContents, single or batched, while every
/// character SendMessage allows is taken.
#[tokio::test]
async fn the_tests_sqs_refuses_a_body_with_a_character_sqs_refuses() {
    let (sqs, queue) = outbox_queue("strict").await;
    for refused in ["x\u{FFFF}", "\u{FFFE}", "a\u{1}b"] {
        let error = sqs
            .send_message()
            .queue_url(&queue)
            .message_body(refused)
            .message_group_id("g")
            .message_deduplication_id("d")
            .send()
            .await
            .expect_err("refused");
        assert_eq!(
            aws_sdk_sqs::error::ProvideErrorMetadata::code(&error),
            Some("InvalidMessageContents"),
            "{refused:?}"
        );
    }
    let batch = sqs
        .send_message_batch()
        .queue_url(&queue)
        .entries(
            aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
                .id("1")
                .message_body("\u{FFFF}")
                .message_group_id("g")
                .message_deduplication_id("b")
                .build()
                .expect("entry"),
        )
        .send()
        .await;
    assert!(
        batch.as_ref().is_err() || batch.as_ref().is_ok_and(|b| !b.failed().is_empty()),
        "a batched body with U+FFFF is refused: {batch:?}"
    );
    sqs.send_message()
        .queue_url(&queue)
        .message_body("\t\n\r caf\u{e9} \u{D7FF}\u{E000}\u{FFFD}\u{1F600}")
        .message_group_id("g")
        .message_deduplication_id("ok")
        .send()
        .await
        .expect("every allowed character is taken");
}

/// A GitHub event whose signed body holds a raw U+FFFF and U+FFFE (an issue title anyone can
/// write) is claimed, forwarded, and reaches the outbox queue through the relay binary: base64,
/// named by its attribute, so that its consumer recovers the signed bytes byte for byte and
/// their HMAC verifies against the signature the message carries.
#[tokio::test]
async fn a_github_forward_holding_characters_sqs_refuses_reaches_its_queue_and_verifies() {
    const SECRET: &str = "test-github-secret";
    let moto = claimonce_tests::moto::moto().await;
    let (sqs, queue) = outbox_queue("forward").await;
    let db = TestDb::new().await;
    let (receiver, _) = db.receiver(github_webhook::GitHub::new(&[SECRET]).expect("secret"));
    let body = "{\"action\":\"opened\",\"issue\":{\"number\":9,\"title\":\"a\u{FFFF}b\u{FFFE}\"},\
                \"installation\":{\"id\":1}}"
        .as_bytes();
    let signature = claimonce::verify::body_hmac::sign(SECRET, body);
    let event = json!({
        "version": "2.0",
        "routeKey": "POST /webhooks/github",
        "rawPath": "/webhooks/github",
        "headers": {
            "content-type": "application/json",
            "x-github-event": "issues",
            "x-github-delivery": "d-fffe",
            "x-hub-signature-256": signature,
        },
        "requestContext": {"http": {"method": "POST"}, "requestId": "test"},
        "body": std::str::from_utf8(body).expect("UTF-8"),
        "isBase64Encoded": false,
    })
    .to_string();
    assert_eq!(
        outcome(
            claimonce::lambda::handle_event(&receiver, &event)
                .await
                .response()
        ),
        (200, "processed".to_owned())
    );
    assert_eq!(relay_binary(&db, &queue, &moto.url).await["dispatched"], 1);
    let messages = drained(&sqs, &queue).await;
    assert_eq!(messages.len(), 1);
    let message = &messages[0];
    assert_eq!(
        attribute(message, claimonce::sqs::body::ENCODING_ATTRIBUTE),
        Some("base64")
    );
    let bytes = consumed(message);
    assert_eq!(bytes, body, "the signed bytes, byte for byte");
    assert_eq!(attribute(message, "signature"), Some(signature.as_str()));
    assert_eq!(
        claimonce::verify::body_hmac::sign(SECRET, &bytes),
        signature,
        "the consumer's HMAC over what it decoded verifies"
    );
}

/// An effect's message whose payload holds `\uffff` (which `jsonb` stores as the raw character,
/// and the envelope carries raw) is sent base64 too, and its payload reads back equal.
#[tokio::test]
async fn an_effect_s_message_with_a_character_sqs_refuses_is_sent_and_reads_back_equal() {
    let moto = claimonce_tests::moto::moto().await;
    let (sqs, queue) = outbox_queue("envelope").await;
    let db = TestDb::new().await;
    let payload = json!({"name": "a\u{FFFF}b", "n": 1});
    db.client()
        .await
        .execute(
            "INSERT INTO outbox (topic, payload) VALUES ('crm.ping', $1::text::jsonb)",
            &[&payload.to_string()],
        )
        .await
        .expect("a row as an effect writes it");
    assert_eq!(relay_binary(&db, &queue, &moto.url).await["dispatched"], 1);
    let messages = drained(&sqs, &queue).await;
    assert_eq!(messages.len(), 1);
    let envelope: Value = serde_json::from_slice(&consumed(&messages[0])).expect("JSON");
    assert_eq!(envelope["payload"], payload);
    assert_eq!(envelope["topic"], "crm.ping");
}
