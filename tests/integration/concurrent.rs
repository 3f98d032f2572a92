//! Lambda Managed Instances' mode: one execution environment (one `stripe-webhook` process
//! under the Runtime API emulator) given `AWS_LAMBDA_MAX_CONCURRENCY`, serving that many
//! invocations at once through `lambda_runtime`'s concurrent runtime, each delivery on a
//! connection of its own. Each test holds the deliveries in the database (a lock the test
//! takes and releases) to show they were in flight together, which one at a time they never
//! are.

use std::sync::Arc;
use std::time::Duration;

use claimonce::jobs::CLAIM_FUNCTION;
use claimonce_tests::apigw::payload_outcome;
use claimonce_tests::lambda::{Scheduled, failed_items, function, sample_event};
use claimonce_tests::outage::Outage;
use claimonce_tests::{TestDb, claim_call};
use serde_json::{Value, json};

use crate::eventbridge::{STRIPE_SOURCE, credit, fresh_queues, stripe_bridged, stripe_webhook_of};

/// Invocations one environment serves at once here.
const AT_ONCE: usize = 8;

/// Stripe's function as one environment serving [`AT_ONCE`] invocations at once on `url`.
async fn environment(url: &str, extra: &[(&str, &str)]) -> Arc<Scheduled> {
    let f = function("stripe");
    let at_once = AT_ONCE.to_string();
    let mut env = vec![
        ("DATABASE_URL", url),
        (f.secret_var, f.dev_secret),
        ("AWS_LAMBDA_MAX_CONCURRENCY", at_once.as_str()),
        ("DB_CONNECT_TIMEOUT_MS", "1000"),
    ];
    env.extend_from_slice(extra);
    Arc::new(Scheduled::start(f.binary, &env).await)
}

/// Stripe's `invoice.paid` sample as event `id`, as an API Gateway event signed now.
fn invoice(id: &str) -> Value {
    let sample = sample_event("stripe/invoice.paid.json");
    let mut body: Value =
        serde_json::from_str(sample["body"].as_str().expect("a body")).expect("JSON");
    body["id"] = json!(id);
    stripe_webhook_of(&body)
}

/// Invokes the environment with every event at once; the answers in order.
async fn all_at_once(f: &Arc<Scheduled>, events: Vec<Value>) -> Vec<Value> {
    let mut tasks = tokio::task::JoinSet::new();
    for (i, event) in events.into_iter().enumerate() {
        let f = Arc::clone(f);
        tasks.spawn(async move {
            let answer = f.run_within(&event, Duration::from_secs(30)).await;
            (i, answer.expect("the function answers"))
        });
    }
    let mut answers: Vec<(usize, Value)> = tasks.join_all().await;
    answers.sort_by_key(|(i, _)| *i);
    answers.into_iter().map(|(_, a)| a).collect()
}

/// Waits until `n` of this database's client backends wait on a lock: the deliveries held in
/// flight together by the lock the test holds.
pub(crate) async fn until_waiting(db: &TestDb, n: i64) {
    for _ in 0..600 {
        let waiting = db
            .count(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                 AND wait_event_type = 'Lock' AND backend_type = 'client backend'",
            )
            .await;
        if waiting >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{n} deliveries never waited together");
}

/// Invokes the environment with `events` at once, held at their claims (the test locks the
/// ledger) until `n` of them wait together; `meanwhile` runs then, before the lock is
/// released. The answers, in order.
async fn held_at_their_claims(
    db: &TestDb,
    f: &Arc<Scheduled>,
    events: Vec<Value>,
    n: usize,
    meanwhile: impl std::future::Future<Output = ()>,
) -> Vec<Value> {
    let mut admin = db.client().await;
    let lock = admin.transaction().await.expect("begin");
    lock.batch_execute("LOCK TABLE processed_events IN SHARE MODE")
        .await
        .expect("hold every claim");
    let answers = {
        let f = Arc::clone(f);
        tokio::spawn(async move { all_at_once(&f, events).await })
    };
    until_waiting(db, i64::try_from(n).expect("n")).await;
    meanwhile.await;
    lock.commit().await.expect("release the claims");
    answers.await.expect("the deliveries")
}

/// Eight copies of one event at once in one environment: all eight in flight together, one
/// processed and seven duplicates, the customer credited once. Each delivery's line names its
/// own invocation (request id and trace header), and only the environment's first invocation
/// says `cold_start`.
#[tokio::test]
async fn copies_at_once_in_one_environment_are_applied_once_and_each_logs_its_own_invocation() {
    let db = TestDb::new().await;
    let f = environment(&db.function_url_as("stripe"), &[]).await;
    let copies = vec![invoice("evt_concurrent_copies"); AT_ONCE];
    let answers = held_at_their_claims(&db, &f, copies, AT_ONCE, async {}).await;
    let mut dispositions: Vec<String> = answers.iter().map(|a| payload_outcome(a).1).collect();
    dispositions.sort();
    let mut expected = vec!["duplicate".to_owned(); AT_ONCE - 1];
    expected.insert(0, "processed".to_owned());
    expected.sort();
    assert_eq!(dispositions, expected);
    assert_eq!(credit(&db).await, 2000);
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 1);

    let lines = f.lines("delivery");
    assert_eq!(lines.len(), AT_ONCE);
    let mut ids: Vec<&str> = lines
        .iter()
        .map(|l| l["function_request_id"].as_str().expect("a request id"))
        .collect();
    for line in &lines {
        let id = line["function_request_id"].as_str().unwrap_or_default();
        let trace = line["xray_trace_id"].as_str().unwrap_or_default();
        assert!(trace.ends_with(id), "its own trace header: {line}");
    }
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), AT_ONCE, "each line names its own invocation");
    let cold = lines.iter().filter(|l| l["cold_start"] == true).count();
    assert_eq!(cold, 1, "one cold start per environment");
}

/// A delivery whose deadline passes while the others run: all eight are held in flight
/// together (the slow one on its event's claim, which the test holds open; the others on the
/// customers table, which the test holds until then), the others are released and processed
/// while the slow one still waits, and it alone is answered 500 at its deadline (1.5 s, before
/// the claim's 2 s lock timeout would answer for it), its
/// statement cancelled and its connection discarded. No connection of the environment is
/// left in a transaction, and its retry is processed once the claim it waited on is gone.
#[tokio::test]
async fn a_deadline_inside_one_delivery_leaves_the_others_and_no_transaction_open() {
    let db = TestDb::new().await;
    let f = environment(
        &db.function_url_as("stripe"),
        &[("DB_DELIVERY_TIMEOUT_MS", "1500")],
    )
    .await;
    let mut claims = db.client().await;
    let held = claims.transaction().await.expect("begin");
    held.batch_execute(&claim_call("stripe", "evt_slow", "invoice.paid"))
        .await
        .expect("hold the slow event's claim");
    let mut effects = db.client().await;
    let customers = effects.transaction().await.expect("begin");
    customers
        .batch_execute("LOCK TABLE customers IN SHARE MODE")
        .await
        .expect("hold the credits");
    let mut events = vec![invoice("evt_slow")];
    events.extend((1..AT_ONCE).map(|n| invoice(&format!("evt_quick_{n}"))));
    let answers = {
        let f = Arc::clone(&f);
        tokio::spawn(async move { all_at_once(&f, events).await })
    };
    until_waiting(&db, i64::try_from(AT_ONCE).expect("n")).await;
    customers.commit().await.expect("release the credits");
    let answers = answers.await.expect("the deliveries");
    let outcomes: Vec<(u16, String)> = answers.iter().map(payload_outcome).collect();
    assert_eq!(outcomes[0].0, 500, "{outcomes:?}");
    assert!(
        outcomes[1..]
            .iter()
            .all(|o| *o == (200, "processed".to_owned())),
        "{outcomes:?}"
    );
    let slow = f
        .lines("delivery")
        .into_iter()
        .find(|l| l["event_id"] == "evt_slow")
        .expect("the slow delivery's line");
    assert!(
        slow["error"]
            .as_str()
            .is_some_and(|e| e.contains("timed out")),
        "{slow}"
    );
    let open = held
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
             AND state LIKE 'idle in transaction%' AND pid <> pg_backend_pid()",
            &[],
        )
        .await
        .expect("count")
        .get::<_, i64>(0);
    assert_eq!(open, 0, "no connection left in a transaction");
    held.rollback().await.expect("release the claim");
    let retried = f
        .run_within(&invoice("evt_slow"), Duration::from_secs(30))
        .await
        .expect("answer");
    assert_eq!(payload_outcome(&retried), (200, "processed".into()));
    assert_eq!(credit(&db).await, 2000 * i64::try_from(AT_ONCE).expect("n"));
}

/// The database goes away while eight deliveries are in flight (held at their claims): each
/// is answered, none hangs, and once it is back the eight sent again are all served, each
/// slot reconnecting: every event applied exactly once.
#[tokio::test]
async fn a_database_restart_with_eight_in_flight_is_healed_by_the_retries() {
    let db = TestDb::new().await;
    let (outage, through) = Outage::in_front_of(&db.function_url_as("stripe"))
        .await
        .expect("the forwarder");
    let f = environment(&through, &[]).await;
    let events: Vec<Value> = (0..AT_ONCE)
        .map(|n| invoice(&format!("evt_restart_{n}")))
        .collect();
    let first = held_at_their_claims(&db, &f, events.clone(), AT_ONCE, outage.down()).await;
    assert!(
        first.iter().all(|a| payload_outcome(a).0 == 500),
        "the connections were lost: {first:?}"
    );
    outage.up().await.expect("the forwarder back");
    let again = all_at_once(&f, events).await;
    for answer in &again {
        let (status, disposition) = payload_outcome(answer);
        assert!(
            status == 200 && (disposition == "processed" || disposition == "duplicate"),
            "{answer}"
        );
    }
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 8);
    assert_eq!(credit(&db).await, 2000 * 8);
}

/// Three EventBridge batches of the event queue at once in one environment (held at their
/// first claims together, then released), an event in two of them: every record applied, the
/// shared one once.
#[tokio::test]
async fn event_queue_batches_at_once_in_one_environment_apply_each_event_once() {
    let db = TestDb::new().await;
    let queues = fresh_queues("stripe").await;
    let bridge = queues.function_env("stripe", STRIPE_SOURCE);
    let extra: Vec<(&str, &str)> = bridge
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let f = environment(&db.function_url_as("stripe"), &extra).await;
    let detail = |id: &str| {
        let mut detail = sample_event("stripe/eventbridge/invoice.paid.json")["detail"].clone();
        detail["id"] = json!(id);
        stripe_bridged(&detail)
    };
    let mut batches = Vec::new();
    for b in 0..3 {
        let mut ids = Vec::new();
        for n in 0..9 {
            let id = queues
                .send(&queues.url, &detail(&format!("evt_batch_{b}_{n}")))
                .await
                .expect("sent");
            ids.push(id);
        }
        if b < 2 {
            let shared = detail("evt_in_two_batches");
            ids.push(queues.send(&queues.url, &shared).await.expect("sent"));
        }
        let messages = queues.receive(&queues.url, &ids).await.expect("received");
        batches.push(claimonce_local::spill::sqs_event(&queues.url, &messages));
    }
    // The three batches held at their first claims together, then released.
    let answers = held_at_their_claims(&db, &f, batches, 3, async {}).await;
    for answer in &answers {
        assert!(failed_items(answer).is_empty(), "{answer}");
    }
    let dispositions: Vec<String> = f
        .lines("bridged")
        .iter()
        .map(|l| l["disposition"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(dispositions.len(), 29, "{dispositions:?}");
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 28);
    assert_eq!(
        db.count("SELECT count(*) FROM processed_events WHERE event_id = 'evt_in_two_batches'")
            .await,
        1
    );
    let duplicates = dispositions.iter().filter(|d| *d == "duplicate").count();
    assert_eq!(duplicates, 1, "{dispositions:?}");
}

/// `DB_MAX_CONNECTIONS` below the invocations served at once bounds the environment's
/// connections: eight deliveries at once on two connections (the login may hold no more: a
/// third connect is refused), two of them waiting at their claims and the rest for a
/// connection; all eight are processed once the claims are released.
#[tokio::test]
async fn db_max_connections_bounds_the_connections_eight_deliveries_share() {
    let db = TestDb::new().await;
    let login = claimonce_tests::roles::login_name(&db.name, "stripe");
    db.client()
        .await
        .batch_execute(&format!("ALTER ROLE {login} CONNECTION LIMIT 2"))
        .await
        .expect("at most two connections for the login");
    let f = environment(
        &db.function_url_as("stripe"),
        &[
            ("DB_MAX_CONNECTIONS", "2"),
            ("DB_DELIVERY_TIMEOUT_MS", "20000"),
        ],
    )
    .await;
    let events = (0..AT_ONCE)
        .map(|i| invoice(&format!("evt_max_connections_{i}")))
        .collect();
    let answers = held_at_their_claims(&db, &f, events, 2, async {
        let waiting = db
            .count(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                 AND wait_event_type = 'Lock' AND backend_type = 'client backend'",
            )
            .await;
        assert_eq!(
            waiting, 2,
            "two deliveries at their claims, the rest for a connection"
        );
    })
    .await;
    let dispositions: Vec<String> = answers.iter().map(|a| payload_outcome(a).1).collect();
    assert_eq!(dispositions, vec!["processed".to_owned(); AT_ONCE]);
    assert_eq!(
        db.count("SELECT count(*) FROM processed_events").await,
        i64::try_from(AT_ONCE).expect("n")
    );
}

/// The pid of a client backend of this database waiting on a lock other than `not`, once one
/// is: a delivery held at the claim the test holds.
async fn waiting_pid(db: &TestDb, not: Option<i32>) -> i32 {
    let admin = db.client().await;
    for _ in 0..600 {
        let waiting = admin
            .query(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() \
                 AND wait_event_type = 'Lock' AND backend_type = 'client backend'",
                &[],
            )
            .await
            .expect("activity");
        if let Some(pid) = waiting
            .iter()
            .map(|row| row.get::<_, i32>(0))
            .find(|pid| Some(*pid) != not)
        {
            return pid;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("no delivery waited at its claim");
}

/// Two deliveries in flight together in one environment, one of which reconnects: its
/// connection is ended while it waits at its claim (which the test holds; the claim's own
/// lock timeout raised so that only the test ends the wait), and its retry runs on a new
/// connection and waits again. The other, on the environment's other open connection, is
/// answered meanwhile and reports no reconnect; only the delivery that made it does, with
/// `Reconnects` 1. The environment's connections made first (two deliveries held together
/// before) are no reconnect either.
#[tokio::test]
async fn only_the_delivery_that_reconnected_reports_its_reconnect() {
    let db = TestDb::new().await;
    db.client()
        .await
        .batch_execute(&format!(
            "ALTER FUNCTION {CLAIM_FUNCTION}(text, text, text, bytea) SET lock_timeout = '60s'"
        ))
        .await
        .expect("only the test ends a wait at a claim");
    let f = environment(
        &db.function_url_as("stripe"),
        &[("DB_DELIVERY_TIMEOUT_MS", "20000")],
    )
    .await;
    let warm = vec![invoice("evt_opens_1"), invoice("evt_opens_2")];
    let answers = held_at_their_claims(&db, &f, warm, 2, async {}).await;
    assert!(
        answers
            .iter()
            .all(|a| payload_outcome(a) == (200, "processed".to_owned())),
        "{answers:?}"
    );

    let mut claims = db.client().await;
    let held = claims.transaction().await.expect("begin");
    held.batch_execute(&claim_call("stripe", "evt_reconnects", "invoice.paid"))
        .await
        .expect("hold its claim");
    let reconnecting = {
        let f = Arc::clone(&f);
        tokio::spawn(async move {
            f.run_within(&invoice("evt_reconnects"), Duration::from_secs(30))
                .await
        })
    };
    let first = waiting_pid(&db, None).await;
    db.client()
        .await
        .execute("SELECT pg_terminate_backend($1)", &[&first])
        .await
        .expect("its connection ended, as a failover or an administrator would");
    waiting_pid(&db, Some(first)).await;
    let other = f
        .run_within(&invoice("evt_beside"), Duration::from_secs(30))
        .await
        .expect("the other delivery's answer");
    assert_eq!(payload_outcome(&other), (200, "processed".into()));
    held.rollback().await.expect("release its claim");
    let reconnected = reconnecting
        .await
        .expect("joined")
        .expect("the reconnecting delivery's answer");
    assert_eq!(payload_outcome(&reconnected), (200, "processed".into()));
    let said: Vec<(String, f64)> = f
        .lines("reconnected")
        .iter()
        .map(|l| {
            (
                l["event_id"].as_str().unwrap_or_default().to_owned(),
                l["Reconnects"].as_f64().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(said, [("evt_reconnects".to_owned(), 1.0)]);
}

/// A line the connection's own task writes (a PostgreSQL warning, raised here by a trigger on
/// the ledger as each delivery claims) names the invocation whose delivery was using the
/// connection, with its trace header and `cold_start`, as that delivery's own line does:
/// three deliveries in flight together in one environment.
#[tokio::test]
async fn a_postgres_warning_names_the_invocation_whose_delivery_raised_it() {
    let db = TestDb::new().await;
    db.client()
        .await
        .batch_execute(
            "CREATE FUNCTION claimonce_test_warns() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN RAISE WARNING 'raised for %', NEW.event_id; RETURN NEW; END $$; \
             CREATE TRIGGER claimonce_test_warns AFTER INSERT ON processed_events \
             FOR EACH ROW EXECUTE FUNCTION claimonce_test_warns()",
        )
        .await
        .expect("a ledger that warns");
    let f = environment(&db.function_url_as("stripe"), &[]).await;
    let ids = ["evt_warns_1", "evt_warns_2", "evt_warns_3"];
    let events = ids.iter().map(|id| invoice(id)).collect();
    let answers = held_at_their_claims(&db, &f, events, ids.len(), async {}).await;
    assert!(
        answers
            .iter()
            .all(|a| payload_outcome(a) == (200, "processed".to_owned())),
        "{answers:?}"
    );
    let deliveries = f.lines("delivery");
    for id in ids {
        let delivery = deliveries
            .iter()
            .find(|l| l["event_id"] == id)
            .expect("its delivery line");
        let warned = f.lines(&format!("WARNING 01000: raised for {id}"));
        assert_eq!(warned.len(), 1, "{id}: {warned:?}");
        for key in ["function_request_id", "xray_trace_id", "cold_start"] {
            assert_eq!(warned[0][key], delivery[key], "{id}'s {key}: {}", warned[0]);
        }
    }
}
