//! Every fault point, tried: the matrix of [`Point::ALL`] × every fault × both runtime modes ×
//! each way in that reaches the point, generated from the points' declarations
//! (`claimonce::fault`), so a point joins it by being declared. Each cell starts the real
//! binary with the point armed (`CLAIMONCE_FAULTS`), drives one delivery into the fault, shows
//! that the fault fired (the binary's `fault injected` line), lets the sender retry as it
//! really would (on the same environment, or on a fresh one after a kill), sends the next
//! event on that environment, and checks the invariants:
//!
//! - the event's effect is applied exactly once, and so is the next event's;
//! - an answer of 200 was durable (its retry is a duplicate);
//! - the next delivery commits on its own: another session sees it at once;
//! - no session is left in a transaction.
//!
//! The faults: `error`, `panic`, `kill` (the process ends at the point), `delay` (past the
//! delivery's database deadline) and `gone` (the database stops at the point: the binary waits
//! there while the test takes the database down, and goes on without it).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use claimonce::fault::{Point, Way};
use claimonce_tests::TestDb;
use claimonce_tests::apigw::payload_outcome;
use claimonce_tests::lambda::{Scheduled, function, sample_event};
use claimonce_tests::outage::Outage;
use serde_json::{Value, json};

/// The faults every point is tried with.
const FAULTS: [Fault; 5] = [
    Fault::Error,
    Fault::Panic,
    Fault::Kill,
    Fault::Delay,
    Fault::Gone,
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Error,
    Panic,
    Kill,
    Delay,
    Gone,
}

/// The runtime modes: one invocation at a time, or several at once on a pool smaller than
/// them (Lambda Managed Instances), where a connection left dirty would serve another
/// invocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Classic,
    Concurrent,
}

/// The database deadline of a delivery in the sweep; `delay` waits past it.
const DELIVERY_MS: u64 = 1500;

/// A sender the sweep delivers for: one whose effects are SQL (Stripe), one whose effect is
/// Rust on the claim's transaction (Shopify).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sender {
    Stripe,
    Shopify,
}

impl Sender {
    fn provider(self) -> &'static str {
        match self {
            Sender::Stripe => "stripe",
            Sender::Shopify => "shopify",
        }
    }

    fn rust_effect(self) -> bool {
        self == Sender::Shopify
    }

    /// Event `n` as an API Gateway request, signed now.
    fn event(self, n: u64) -> Value {
        let mut event = match self {
            Sender::Stripe => {
                let mut event = sample_event("stripe/invoice.paid.json");
                let mut body: Value =
                    serde_json::from_str(event["body"].as_str().expect("a body")).expect("JSON");
                body["id"] = json!(format!("evt_sweep_{n}"));
                body["data"]["object"]["customer"] = json!(format!("cus_sweep_{n}"));
                event["body"] = json!(body.to_string());
                event
            }
            Sender::Shopify => {
                let mut event = sample_event("shopify/orders.create.json");
                let mut body: Value =
                    serde_json::from_str(event["body"].as_str().expect("a body")).expect("JSON");
                body["id"] = json!(n);
                event["body"] = json!(body.to_string());
                event["headers"]["x-shopify-event-id"] = json!(format!("sweep-event-{n}"));
                event["headers"]["x-shopify-webhook-id"] = json!(format!("sweep-hook-{n}"));
                event
            }
        };
        event["headers"]
            .as_object_mut()
            .expect("headers")
            .remove("content-length");
        claimonce_local::sign::resign(&mut event, claimonce_tests::sign::now()).expect("signed");
        event
    }

    /// How many times event `n`'s effect was applied, as its rows show.
    async fn applied(self, db: &TestDb, n: u64) -> i64 {
        match self {
            Sender::Stripe => {
                db.count(&format!(
                    "SELECT coalesce(sum(credit_balance_cents), 0)::bigint / 2000 FROM customers \
                     WHERE stripe_customer_id = 'cus_sweep_{n}'"
                ))
                .await
            }
            Sender::Shopify => {
                db.count(&format!(
                    "SELECT count(*) FROM shopify_order_events WHERE order_id = {n}"
                ))
                .await
            }
        }
    }
}

/// What one invocation answered: a status and disposition, or a function error.
fn answered(ran: &Result<Value, String>) -> String {
    match ran {
        Ok(payload) => {
            let (status, disposition) = payload_outcome(payload);
            format!("{status} {disposition}")
        }
        Err(error) => {
            let error: Value = serde_json::from_str(error).unwrap_or(Value::Null);
            format!(
                "function error {}",
                error["errorType"].as_str().unwrap_or("?")
            )
        }
    }
}

/// A spill queue no SQS serves: a send to it fails, as one to an unreachable queue does.
const NO_SQS: &str = "http://127.0.0.1:9";

/// What `env` answered `event` (a webhook's), given half a minute.
async fn deliver(env: &Scheduled, event: &Value) -> String {
    answered(&env.run_within(event, Duration::from_secs(30)).await)
}

/// One environment of `sender`'s function on `url`, in `mode`, with `faults` armed (and a
/// spill queue, when `spilling`).
async fn environment(
    sender: Sender,
    url: &str,
    mode: Mode,
    faults: &str,
    spilling: bool,
) -> Scheduled {
    let f = function(sender.provider());
    let delivery_ms = DELIVERY_MS.to_string();
    let mut env = vec![
        ("DATABASE_URL", url),
        (f.secret_var, f.dev_secret),
        ("DB_CONNECT_TIMEOUT_MS", "500"),
        ("DB_DELIVERY_TIMEOUT_MS", delivery_ms.as_str()),
        ("CLAIMONCE_FAULTS", faults),
        ("RUST_BACKTRACE", "0"),
    ];
    if mode == Mode::Concurrent {
        env.extend([
            ("AWS_LAMBDA_MAX_CONCURRENCY", "4"),
            ("DB_MAX_CONNECTIONS", "1"),
        ]);
    }
    let spill = claimonce_local::spill::function_env(&spill_queue(), NO_SQS);
    if spilling {
        env.extend(spill.iter().map(|(k, v)| (*k, v.as_str())));
    }
    Scheduled::start(f.binary, &env).await
}

/// Sessions of this database in a transaction or running a statement, other than ours.
async fn busy_sessions(db: &TestDb) -> i64 {
    db.count(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
         AND pid <> pg_backend_pid() AND backend_type = 'client backend' \
         AND (state LIKE 'idle in transaction%' OR state = 'active')",
    )
    .await
}

/// Waits until no session of this database is in a transaction: a killed client's backend
/// ends its transaction once the server sees the socket closed.
async fn until_no_transaction(db: &TestDb) -> Result<(), String> {
    for _ in 0..400 {
        if busy_sessions(db).await == 0 {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    Err("a session stayed in a transaction".into())
}

/// The `hold` socket of a `gone` cell: when the binary reaches the point, the database goes
/// down, then the binary is released.
async fn take_down_at_the_point(outage: &Arc<Outage>) -> (String, tokio::task::JoinHandle<bool>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    static SOCKETS: AtomicU64 = AtomicU64::new(0);
    let path = std::env::temp_dir().join(format!(
        "claimonce-sweep-{}-{}.sock",
        std::process::id(),
        SOCKETS.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_file(&path);
    let listener = tokio::net::UnixListener::bind(&path).expect("bind the hold socket");
    let outage = Arc::clone(outage);
    let reached = tokio::spawn(async move {
        let Ok((mut socket, _)) = listener.accept().await else {
            return false;
        };
        let mut said = [0u8; 64];
        let _ = socket.read(&mut said).await;
        outage.down().await;
        socket.write_all(b"go").await.is_ok()
    });
    (path.display().to_string(), reached)
}

/// `fault` as `CLAIMONCE_FAULTS` spells it, with the hold of a `gone` fault.
async fn arm(
    fault: Fault,
    outage: &Arc<Outage>,
) -> (String, Option<tokio::task::JoinHandle<bool>>) {
    match fault {
        Fault::Error => ("error".to_owned(), None),
        Fault::Panic => ("panic".to_owned(), None),
        Fault::Kill => ("kill".to_owned(), None),
        Fault::Delay => (format!("delay:{}", DELIVERY_MS + 500), None),
        Fault::Gone => {
            let (path, reached) = take_down_at_the_point(outage).await;
            (format!("hold:{path}"), Some(reached))
        }
    }
}

/// After the fault: the held binary was released, and the database is back.
async fn released(
    hold: Option<tokio::task::JoinHandle<bool>>,
    outage: &Outage,
) -> Result<(), String> {
    if let Some(reached) = hold
        && !reached.await.unwrap_or(false)
    {
        return Err("the binary was not released at the point".into());
    }
    outage
        .up()
        .await
        .map_err(|e| format!("the database back: {e}"))
}

/// One cell: `sender`'s webhook with `fault` at `point` in `mode`, event `n` (and `n + 1` as
/// the next). An error names what broke.
async fn webhook_cell(
    db: &TestDb,
    outage: &Arc<Outage>,
    url: &str,
    (sender, point, fault, mode): (Sender, Point, Fault, Mode),
    n: u64,
) -> Result<(), String> {
    let (armed, hold) = arm(fault, outage).await;
    let spilling = point == Point::SpillSend;
    let faults = format!("{}={armed}", point.name());
    let mut env = environment(sender, url, mode, &faults, spilling).await;
    if spilling {
        // The spill queue's send is reached only with the database unavailable.
        outage.down().await;
    }
    let event = sender.event(n);
    let first = deliver(&env, &event).await;
    let fired = env.lines("fault injected");
    if !fired.iter().any(|l| l["point"] == point.name()) {
        return Err(format!("the fault never fired (answered {first})"));
    }
    released(hold, outage).await?;
    if fault == Fault::Kill {
        // The sender's retry reaches a fresh environment, once the server has ended what the
        // killed one left.
        until_no_transaction(db).await?;
        env = environment(sender, url, mode, "", spilling).await;
    }
    // The sender retries at once, and again on a 5xx, as a sender does (a few times here).
    let mut retries = Vec::new();
    for _ in 0..3 {
        let retry = deliver(&env, &event).await;
        let settled = retry.starts_with("200 ");
        retries.push(retry);
        if settled {
            break;
        }
    }
    let retry = retries.last().cloned().unwrap_or_default();
    let durable = !first.starts_with("200 ") || retry == "200 duplicate";
    if !retry.starts_with("200 ") || !durable {
        return Err(format!("answered {first}, then the retries {retries:?}"));
    }
    let next = deliver(&env, &sender.event(n + 1)).await;
    if next != "200 processed" {
        return Err(format!("answered {first}; the next event {next}"));
    }
    // Another session sees both at once: each committed on its own.
    for event in [n, n + 1] {
        let applied = sender.applied(db, event).await;
        if applied != 1 {
            return Err(format!(
                "answered {first} then {retries:?}: event {event} applied {applied} times"
            ));
        }
    }
    until_no_transaction(db)
        .await
        .map_err(|e| format!("answered {first}: {e}"))
}

/// The senders and modes every way in is swept with.
const SENDERS: [Sender; 2] = [Sender::Stripe, Sender::Shopify];
const MODES: [Mode; 2] = [Mode::Classic, Mode::Concurrent];

/// The cells of `way` for `sender` in `mode`, from the points' declarations: each point that
/// way reaches (a Rust effect's only for a sender with one), with every fault.
fn matrix(way: Way, sender: Sender, mode: Mode) -> Vec<(Sender, Point, Fault, Mode)> {
    Point::ALL
        .iter()
        .filter(|p| p.ways().contains(&way) && (!p.needs_rust_effect() || sender.rust_effect()))
        .flat_map(|&p| FAULTS.map(|f| (sender, p, f, mode)))
        .collect()
}

/// How many cells `way` has, over the senders and modes.
fn cells(way: Way) -> usize {
    SENDERS
        .iter()
        .flat_map(|&s| MODES.map(|m| matrix(way, s, m).len()))
        .sum()
}

/// RELIABILITY.md states the sweep's size as the declarations make it.
#[test]
fn reliability_md_states_the_size_of_the_sweep() {
    let (webhook, drain) = (cells(Way::Webhook), cells(Way::Drain));
    let points = Point::ALL.len();
    let stated = format!(
        "{points} points, {} cells: {webhook} through the webhook and {drain} through the drain",
        webhook + drain
    );
    let path = claimonce_local::functions::workspace_root().join("RELIABILITY.md");
    let text = std::fs::read_to_string(path).expect("RELIABILITY.md");
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        text.contains(&stated),
        "RELIABILITY.md should say: {stated}"
    );
}

/// A Rust effect that panics between its statements, one invocation at a time and several at
/// once on one connection: nothing of the panicked delivery commits, no session is left in its
/// transaction, the sender's retry applies it once, and the next delivery on the same
/// environment commits on its own (another session sees it at once).
#[tokio::test]
async fn a_rust_effect_that_panics_between_its_statements_leaves_nothing_for_the_next_delivery() {
    for mode in MODES {
        let db = TestDb::new().await;
        let url = db.function_url_as("shopify");
        let env = environment(Sender::Shopify, &url, mode, "effect.statement=panic", false).await;
        let first = deliver(&env, &Sender::Shopify.event(1)).await;
        assert!(
            first.starts_with("function error"),
            "{mode:?}: the panic answered {first}"
        );
        assert_eq!(
            env.lines("fault injected").len(),
            1,
            "{mode:?}: it panicked"
        );
        assert_eq!(
            db.count("SELECT count(*) FROM processed_events").await,
            0,
            "{mode:?}: nothing of the panicked delivery"
        );
        // At once, on the same environment: the next delivery, then the sender's retry.
        let next = deliver(&env, &Sender::Shopify.event(2)).await;
        assert_eq!(next, "200 processed", "{mode:?}");
        assert_eq!(
            Sender::Shopify.applied(&db, 2).await,
            1,
            "{mode:?}: seen at once"
        );
        assert_eq!(
            db.count("SELECT count(*) FROM processed_events").await,
            1,
            "{mode:?}: the next delivery's claim alone"
        );
        let retry = deliver(&env, &Sender::Shopify.event(1)).await;
        assert_eq!(retry, "200 processed", "{mode:?}: the retry");
        assert_eq!(
            Sender::Shopify.applied(&db, 1).await,
            1,
            "{mode:?}: applied once"
        );
        until_no_transaction(&db)
            .await
            .unwrap_or_else(|e| panic!("{mode:?}: {e}"));
    }
}

/// What a panic costs the deliveries in flight beside it on Lambda Managed Instances, unwound
/// (as built) and aborted (`panic = "abort"`, which the `kill` fault is: the process ends at
/// the point): four Shopify deliveries wait together at their claims in one environment, and
/// the first to win its claim panics. Unwound, it alone fails and the other three are
/// processed; aborted, every invocation in flight fails with the environment
/// (docs/decisions/0049). Either way each event is applied once after the retries.
#[tokio::test]
async fn under_managed_instances_a_panic_fails_its_own_delivery_and_an_abort_every_one_in_flight() {
    for (fault, failed_in_flight) in [("panic", 1), ("kill", 4)] {
        let db = TestDb::new().await;
        let url = db.function_url_as("shopify");
        let f = function("shopify");
        let faults = format!("claim.won={fault}");
        let env = std::sync::Arc::new(
            Scheduled::start(
                f.binary,
                &[
                    ("DATABASE_URL", url.as_str()),
                    (f.secret_var, f.dev_secret),
                    ("AWS_LAMBDA_MAX_CONCURRENCY", "4"),
                    ("CLAIMONCE_FAULTS", faults.as_str()),
                    ("RUST_BACKTRACE", "0"),
                ],
            )
            .await,
        );
        let mut admin = db.client().await;
        let lock = admin.transaction().await.expect("begin");
        lock.batch_execute("LOCK TABLE processed_events IN SHARE MODE")
            .await
            .expect("hold every claim");
        let mut in_flight = tokio::task::JoinSet::new();
        for n in 1..=4 {
            let env = std::sync::Arc::clone(&env);
            in_flight.spawn(async move { deliver(&env, &Sender::Shopify.event(n)).await });
        }
        crate::concurrent::until_waiting(&db, 4).await;
        lock.commit().await.expect("release the claims");
        let answers = in_flight.join_all().await;
        let failed = answers.iter().filter(|a| !a.starts_with("200 ")).count();
        println!("under managed instances, {fault}: {failed} of 4 in flight failed: {answers:?}");
        assert_eq!(failed, failed_in_flight, "{fault}: {answers:?}");
        assert_eq!(
            env.lines("fault injected").len(),
            1,
            "{fault}: it fired once"
        );
        until_no_transaction(&db)
            .await
            .expect("no transaction left");
        // The senders retry, on a fresh environment after the abort: each event once.
        let retry_env = Scheduled::start(
            f.binary,
            &[("DATABASE_URL", url.as_str()), (f.secret_var, f.dev_secret)],
        )
        .await;
        for n in 1..=4 {
            let retry = deliver(&retry_env, &Sender::Shopify.event(n)).await;
            assert!(
                retry.starts_with("200 "),
                "{fault}: event {n}'s retry {retry}"
            );
            assert_eq!(
                Sender::Shopify.applied(&db, n).await,
                1,
                "{fault}: event {n}"
            );
        }
    }
}

/// The spill queue the sweep's functions drain (no SQS serves it: nothing is sent there).
fn spill_queue() -> String {
    format!("{NO_SQS}/123456789012/sweep-spill")
}

/// Event `n` of `sender` as a record of its spill queue: the bytes and headers it was
/// delivered with, signed now.
fn spilled(sender: Sender, n: u64) -> Value {
    let event = sender.event(n);
    let headers: serde_json::Map<String, Value> = event["headers"]
        .as_object()
        .expect("headers")
        .iter()
        .filter(|(name, _)| name.starts_with("x-") || name.starts_with("stripe"))
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect();
    let attribute = |v: &str, t: &str| json!({"stringValue": v, "dataType": t});
    json!({
        "messageId": format!("m-{n}"),
        "body": event["body"],
        "attributes": {"ApproximateReceiveCount": "1"},
        "messageAttributes": {
            "claimonce-spill": attribute("2", "Number"),
            "claimonce-provider": attribute(sender.provider(), "String"),
            "claimonce-received-at": attribute(&claimonce_tests::sign::now().to_string(), "Number"),
            "claimonce-headers": attribute(&Value::Object(headers).to_string(), "String"),
        },
        "eventSource": "aws:sqs",
        "eventSourceARN": claimonce_local::spill::queue_arn(&spill_queue()),
    })
}

/// A batch's answer: the message ids to receive again (every one after a function error,
/// as SQS receives a whole batch again then), or why it is not an answer.
fn to_receive_again(ran: &Result<Value, String>, batch: &[u64]) -> Vec<u64> {
    match ran {
        Ok(answer) => claimonce_tests::lambda::failed_items(answer)
            .iter()
            .filter_map(|id| id.strip_prefix("m-")?.parse().ok())
            .collect(),
        Err(_) => batch.to_vec(),
    }
}

/// What a batch invocation answered: the records it reported failed, or a function error.
fn batch_answered(ran: &Result<Value, String>) -> String {
    match ran {
        Ok(answer) => format!("failed {:?}", claimonce_tests::lambda::failed_items(answer)),
        Err(_) => "a function error".into(),
    }
}

/// One cell of the drain: a batch of two spilled events (`n`, `n + 1`) with `fault` at
/// `point`, then the queue's redelivery of what came back, then the next batch (`n + 2`).
async fn drain_cell(
    db: &TestDb,
    outage: &Arc<Outage>,
    url: &str,
    (sender, point, fault, mode): (Sender, Point, Fault, Mode),
    n: u64,
) -> Result<(), String> {
    let (armed, hold) = arm(fault, outage).await;
    let faults = format!("{}={armed}", point.name());
    let mut env = environment(sender, url, mode, &faults, true).await;
    let batch = [n, n + 1];
    let records = |ids: &[u64]| json!({"Records": ids.iter().map(|&i| spilled(sender, i)).collect::<Vec<_>>()});
    let ran = env
        .run_within(&records(&batch), Duration::from_secs(30))
        .await;
    let first = batch_answered(&ran);
    let mut again = to_receive_again(&ran, &batch);
    if !env
        .lines("fault injected")
        .iter()
        .any(|l| l["point"] == point.name())
    {
        return Err(format!("the fault never fired (answered {first})"));
    }
    released(hold, outage).await?;
    // What the batch did not report failed is deleted from the queue: it must be applied.
    for &event in batch.iter().filter(|e| !again.contains(e)) {
        if sender.applied(db, event).await != 1 {
            return Err(format!(
                "event {event} deleted from the queue, not applied ({first})"
            ));
        }
    }
    if fault == Fault::Kill {
        until_no_transaction(db).await?;
        env = environment(sender, url, mode, "", true).await;
    }
    // The queue receives again what came back, a few times.
    for _ in 0..3 {
        if again.is_empty() {
            break;
        }
        let ran = env
            .run_within(&records(&again), Duration::from_secs(30))
            .await;
        again = to_receive_again(&ran, &again);
    }
    if !again.is_empty() {
        return Err(format!("answered {first}; still coming back: {again:?}"));
    }
    let next = env
        .run_within(&records(&[n + 2]), Duration::from_secs(30))
        .await;
    if !to_receive_again(&next, &[n + 2]).is_empty() {
        return Err(format!(
            "answered {first}; the next batch {}",
            batch_answered(&next)
        ));
    }
    for event in [n, n + 1, n + 2] {
        let applied = sender.applied(db, event).await;
        if applied != 1 {
            return Err(format!(
                "answered {first}: event {event} applied {applied} times"
            ));
        }
    }
    until_no_transaction(db)
        .await
        .map_err(|e| format!("answered {first}: {e}"))
}

/// Every cell of `way` for `sender` in `mode`, on a database of their own; the cells that
/// broke, named.
async fn sweep_one(way: Way, sender: Sender, mode: Mode) -> Vec<String> {
    let db = TestDb::new().await;
    let (outage, url) = Outage::in_front_of(&db.function_url_as(sender.provider()))
        .await
        .expect("the forwarder");
    let outage = Arc::new(outage);
    let mut broke = Vec::new();
    for (n, cell) in (1000..).step_by(3).zip(matrix(way, sender, mode)) {
        let swept = match way {
            Way::Webhook => webhook_cell(&db, &outage, &url, cell, n).await,
            Way::Drain => drain_cell(&db, &outage, &url, cell, n).await,
            other => Err(format!("the sweep has no driver for {other:?}")),
        };
        if let Err(why) = swept {
            let (_, point, fault, _) = cell;
            broke.push(format!(
                "{sender:?} {} {fault:?} {mode:?}: {why}",
                point.name()
            ));
        }
    }
    broke
}

/// Sweeps every cell of `way`, both senders in both modes at once, and fails naming each
/// cell that broke.
async fn sweep(way: Way) {
    let cells = cells(way);
    let mut sweeps = tokio::task::JoinSet::new();
    for sender in SENDERS {
        for mode in MODES {
            sweeps.spawn(sweep_one(way, sender, mode));
        }
    }
    let broke: Vec<String> = sweeps.join_all().await.concat();
    println!("sweep: {way:?}, {cells} cells, {} broke", broke.len());
    assert!(
        cells >= 2 * 5 * 2,
        "the matrix is generated from the points"
    );
    assert!(
        broke.is_empty(),
        "{} of {cells} cells broke:\n{}",
        broke.len(),
        broke.join("\n")
    );
}

/// The webhook way in, every cell: both senders (SQL and Rust effects) in both modes.
#[tokio::test]
async fn every_fault_at_every_point_of_the_webhook_leaves_each_event_applied_once() {
    sweep(Way::Webhook).await;
}

/// The spill queue's drain, every cell: both senders in both modes.
#[tokio::test]
async fn every_fault_at_every_point_of_the_drain_leaves_each_event_applied_once() {
    sweep(Way::Drain).await;
}
