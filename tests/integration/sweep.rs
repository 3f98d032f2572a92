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
use claimonce_local::bridge::EventQueues;
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
pub(crate) enum Mode {
    Classic,
    Concurrent,
}

/// The database deadline of a delivery in the sweep; `delay` waits past it.
pub(crate) const DELIVERY_MS: u64 = 1500;

/// A sender the sweep delivers for: one whose effects are SQL (Stripe), one whose effect is
/// Rust on the claim's transaction (Shopify).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sender {
    Stripe,
    Shopify,
}

impl Sender {
    pub(crate) fn provider(self) -> &'static str {
        match self {
            Sender::Stripe => "stripe",
            Sender::Shopify => "shopify",
        }
    }

    fn rust_effect(self) -> bool {
        self == Sender::Shopify
    }

    /// Its partner event source.
    fn source(self) -> &'static str {
        match self {
            Sender::Stripe => crate::eventbridge::STRIPE_SOURCE,
            Sender::Shopify => crate::eventbridge::SHOPIFY_SOURCE,
        }
    }

    /// Event `n` as its partner event source puts it on the event queue.
    fn bridged(self, n: u64) -> Value {
        let mut event = match self {
            Sender::Stripe => {
                let webhook = self.event(n);
                let detail: Value =
                    serde_json::from_str(webhook["body"].as_str().expect("a body")).expect("JSON");
                crate::eventbridge::stripe_bridged(&detail)
            }
            Sender::Shopify => {
                let mut event = sample_event("shopify/eventbridge/orders.updated.json");
                let detail = &mut event["detail"];
                detail["payload"]["id"] = json!(n);
                detail["metadata"]["X-Shopify-Event-Id"] = json!(format!("sweep-event-{n}"));
                detail["metadata"]["X-Shopify-Webhook-Id"] = json!(format!("sweep-hook-{n}"));
                event
            }
        };
        event["id"] = json!(format!("sweep-bridged-{n}"));
        event
    }

    /// Event `n` as an API Gateway request, signed now.
    pub(crate) fn event(self, n: u64) -> Value {
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
pub(crate) fn answered(ran: &Result<Value, String>) -> String {
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

/// Where an environment takes queued records from, besides its webhook.
#[derive(Clone, Copy)]
pub(crate) enum Queues<'a> {
    None,
    /// Its spill queue (which no SQS serves: a send to it fails).
    Spill,
    /// Its sender's partner event source, through these event queues.
    Events(&'a EventQueues),
}

/// One environment of `sender`'s function on `url`, in `mode`, with `faults` armed, taking
/// records from `queues`.
pub(crate) async fn environment(
    sender: Sender,
    url: &str,
    mode: Mode,
    faults: &str,
    queues: Queues<'_>,
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
    let queued: Vec<(String, String)> = match queues {
        Queues::None => Vec::new(),
        Queues::Spill => claimonce_local::spill::function_env(&spill_queue(), NO_SQS)
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
        Queues::Events(events) => events.function_env(sender.provider(), sender.source()),
    };
    env.extend(queued.iter().map(|(k, v)| (k.as_str(), v.as_str())));
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
pub(crate) async fn until_no_transaction(db: &TestDb) -> Result<(), String> {
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
    let queues = if spilling {
        Queues::Spill
    } else {
        Queues::None
    };
    let faults = format!("{}={armed}", point.name());
    let mut env = environment(sender, url, mode, &faults, queues).await;
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
        env = environment(sender, url, mode, "", queues).await;
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

/// How many cells `way` has: over the senders and modes for a way events come in by, over
/// the points and faults alone for a scheduled job (one run at a time, of no sender).
fn cells(way: Way) -> usize {
    match way {
        Way::Relay | Way::Retention | Way::Recover => job_matrix(way).len(),
        _ => SENDERS
            .iter()
            .flat_map(|&s| MODES.map(|m| matrix(way, s, m).len()))
            .sum(),
    }
}

/// The cells of a scheduled job's `way`: each point it reaches, with every fault.
fn job_matrix(way: Way) -> Vec<(Point, Fault)> {
    Point::ALL
        .iter()
        .filter(|p| p.ways().contains(&way))
        .flat_map(|&p| FAULTS.map(|f| (p, f)))
        .collect()
}

/// The ways the sweep drives, with the words RELIABILITY.md names each by.
const WAYS: [(Way, &str); 6] = [
    (Way::Webhook, "the webhook"),
    (Way::Drain, "the drain"),
    (Way::EventBridge, "EventBridge"),
    (Way::Recover, "stripe-recover"),
    (Way::Relay, "the outbox relay"),
    (Way::Retention, "the retention sweep"),
];

/// RELIABILITY.md states the sweep's size as the declarations make it.
#[test]
fn reliability_md_states_the_size_of_the_sweep() {
    let each: Vec<String> = WAYS
        .iter()
        .map(|&(way, words)| format!("{} through {words}", cells(way)))
        .collect();
    let total: usize = WAYS.iter().map(|&(way, _)| cells(way)).sum();
    let (last, rest) = each.split_last().expect("ways");
    let stated = format!(
        "{} points, {total} cells: {} and {last}",
        Point::ALL.len(),
        rest.join(", ")
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
        let env = environment(
            Sender::Shopify,
            &url,
            mode,
            "effect.statement=panic",
            Queues::None,
        )
        .await;
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

/// What a batch invocation answered: the records it reported failed, or a function error.
fn batch_answered(ran: &Result<Value, String>) -> String {
    match ran {
        Ok(answer) => format!("failed {:?}", claimonce_tests::lambda::failed_items(answer)),
        Err(_) => "a function error".into(),
    }
}

/// The queue a batch cell's records come from, as Lambda's event source mapping hands them
/// over: the spill queue's (records the test makes, as the receiver wrote them), or the event
/// queue's (sent to moto's SQS as the rule does, received, and deleted unless reported
/// failed; one reported failed is handed out again under the handle it was received with).
enum BatchQueue {
    Spill,
    Events {
        queues: EventQueues,
        /// Each event's message while it is in flight.
        in_flight: std::sync::Mutex<std::collections::HashMap<u64, aws_sdk_sqs::types::Message>>,
    },
}

impl BatchQueue {
    async fn new(way: Way, sender: Sender) -> Self {
        match way {
            Way::EventBridge => BatchQueue::Events {
                queues: crate::eventbridge::fresh_queues(sender.provider()).await,
                in_flight: std::sync::Mutex::default(),
            },
            _ => BatchQueue::Spill,
        }
    }

    fn queues(&self) -> Queues<'_> {
        match self {
            BatchQueue::Spill => Queues::Spill,
            BatchQueue::Events { queues, .. } => Queues::Events(queues),
        }
    }

    /// Events `batch` of `sender` handed to `env` in one batch: what it answered, and the
    /// events to receive again (every one after a function error, as SQS then does).
    async fn hand(
        &self,
        env: &Scheduled,
        sender: Sender,
        batch: &[u64],
    ) -> Result<(String, Vec<u64>), String> {
        let (records, ids) = match self {
            BatchQueue::Spill => {
                let records: Vec<Value> = batch.iter().map(|&i| spilled(sender, i)).collect();
                let ids = batch.iter().map(|&i| (format!("m-{i}"), i)).collect();
                (records, ids)
            }
            BatchQueue::Events { queues, in_flight } => {
                let messages = self.receive(queues, in_flight, sender, batch).await?;
                let event = claimonce_local::spill::sqs_event(&queues.url, &messages);
                let records = event["Records"].as_array().cloned().unwrap_or_default();
                let ids: std::collections::HashMap<String, u64> = messages
                    .iter()
                    .zip(batch)
                    .map(|(m, &i)| (m.message_id().unwrap_or_default().to_owned(), i))
                    .collect();
                (records, ids)
            }
        };
        let ran = env
            .run_within(&json!({ "Records": records }), Duration::from_secs(30))
            .await;
        let again: Vec<u64> = match &ran {
            Ok(answer) => claimonce_tests::lambda::failed_items(answer)
                .iter()
                .filter_map(|id| ids.get(*id).copied())
                .collect(),
            Err(_) => batch.to_vec(),
        };
        if let BatchQueue::Events { queues, in_flight } = self {
            // The event source mapping deletes what was not reported failed.
            let done: Vec<aws_sdk_sqs::types::Message> = {
                let mut in_flight = in_flight.lock().expect("in flight");
                batch
                    .iter()
                    .filter(|i| !again.contains(i))
                    .filter_map(|i| in_flight.remove(i))
                    .collect()
            };
            for message in &done {
                claimonce_local::spill::delete(queues.sqs(), &queues.url, message).await?;
            }
        }
        Ok((batch_answered(&ran), again))
    }

    /// Events `batch` received from the event queue, in order: each in flight made visible
    /// again and received again, each other sent first.
    async fn receive(
        &self,
        queues: &EventQueues,
        in_flight: &std::sync::Mutex<std::collections::HashMap<u64, aws_sdk_sqs::types::Message>>,
        sender: Sender,
        batch: &[u64],
    ) -> Result<Vec<aws_sdk_sqs::types::Message>, String> {
        let mut ids = Vec::new();
        for &i in batch {
            let held = in_flight.lock().expect("in flight").remove(&i);
            let id = match held {
                Some(message) => {
                    queues
                        .sqs()
                        .change_message_visibility()
                        .queue_url(&queues.url)
                        .receipt_handle(message.receipt_handle().unwrap_or_default())
                        .visibility_timeout(0)
                        .send()
                        .await
                        .map_err(|e| format!("visible again: {e}"))?;
                    message.message_id().unwrap_or_default().to_owned()
                }
                None => queues.send(&queues.url, &sender.bridged(i)).await?,
            };
            ids.push(id);
        }
        let received = queues.receive(&queues.url, &ids).await?;
        let mut ordered = Vec::new();
        let mut in_flight = in_flight.lock().expect("in flight");
        for (&i, id) in batch.iter().zip(&ids) {
            let message = received
                .iter()
                .find(|m| m.message_id() == Some(id.as_str()))
                .cloned()
                .ok_or_else(|| format!("event {i} was not received"))?;
            in_flight.insert(i, message.clone());
            ordered.push(message);
        }
        Ok(ordered)
    }
}

/// One cell of a queue's way in (the drain, EventBridge): a batch of two events (`n`,
/// `n + 1`) with `fault` at `point`, then the queue's redelivery of what came back, then the
/// next batch (`n + 2`).
async fn batch_cell(
    db: &TestDb,
    outage: &Arc<Outage>,
    url: &str,
    way: Way,
    (sender, point, fault, mode): (Sender, Point, Fault, Mode),
    n: u64,
) -> Result<(), String> {
    let queue = BatchQueue::new(way, sender).await;
    let (armed, hold) = arm(fault, outage).await;
    let faults = format!("{}={armed}", point.name());
    let mut env = environment(sender, url, mode, &faults, queue.queues()).await;
    let batch = [n, n + 1];
    let (first, mut again) = queue.hand(&env, sender, &batch).await?;
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
        env = environment(sender, url, mode, "", queue.queues()).await;
    }
    // The queue receives again what came back, a few times.
    for _ in 0..3 {
        if again.is_empty() {
            break;
        }
        again = queue.hand(&env, sender, &again).await?.1;
    }
    if !again.is_empty() {
        return Err(format!("answered {first}; still coming back: {again:?}"));
    }
    let (next, failed) = queue.hand(&env, sender, &[n + 2]).await?;
    if !failed.is_empty() {
        return Err(format!("answered {first}; the next batch {next}"));
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
            Way::Drain | Way::EventBridge => batch_cell(&db, &outage, &url, way, cell, n).await,
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

/// stripe-recover, every cell: each event it lists applied once.
#[tokio::test]
async fn every_fault_at_every_point_of_stripe_recover_applies_each_listed_event_once() {
    job_sweep(Way::Recover).await;
}

/// The outbox relay, every cell: each row sent once to its FIFO queue and marked.
#[tokio::test]
async fn every_fault_at_every_point_of_the_outbox_relay_leaves_each_row_sent_and_marked() {
    job_sweep(Way::Relay).await;
}

/// The retention sweep, every cell: every row past its window removed, none inside it.
#[tokio::test]
async fn every_fault_at_every_point_of_the_retention_sweep_removes_only_rows_past_their_window() {
    job_sweep(Way::Retention).await;
}

/// EventBridge through the event queue, every cell: both senders in both modes.
#[tokio::test]
async fn every_fault_at_every_point_of_eventbridge_leaves_each_event_applied_once() {
    sweep(Way::EventBridge).await;
}

/// Sweeps every cell of a scheduled job's `way`, one after another on a database of their own,
/// and fails naming each cell that broke.
async fn job_sweep(way: Way) {
    let db = TestDb::new().await;
    let (outage, url) = Outage::in_front_of(db.function_url())
        .await
        .expect("the forwarder");
    let outage = Arc::new(outage);
    let cells = job_matrix(way);
    let mut broke = Vec::new();
    for (n, &(point, fault)) in cells.iter().enumerate() {
        if let Err(why) = job_cell(&db, &outage, &url, way, (point, fault), n).await {
            broke.push(format!("{} {fault:?}: {why}", point.name()));
        }
    }
    println!(
        "sweep: {way:?}, {} cells, {} broke",
        cells.len(),
        broke.len()
    );
    assert!(!cells.is_empty(), "the matrix is generated from the points");
    assert!(
        broke.is_empty(),
        "{} of {} cells broke:\n{}",
        broke.len(),
        cells.len(),
        broke.join("\n")
    );
}

/// What a scheduled job's cell starts from and checks: the relay's outbox rows and the FIFO
/// queue they go to, the sweep's ledger rows on either side of the window, or the events
/// stripe-recover lists from Stripe's API, none of them delivered.
enum Job {
    Relay {
        sqs: aws_sdk_sqs::Client,
        queue: String,
    },
    Retention,
    Recover {
        api: claimonce_tests::senders::StripeApi,
    },
}

/// The key stripe-recover reads Stripe's API with.
const RECOVER_KEY: &str = "rk_test_claimonce_sweep";

/// The events stripe-recover lists in a cell: three invoices of customers of their own.
const RECOVERED: u64 = 3;

impl Job {
    /// Rows for cell `n` to work on, and where the job sends them.
    async fn new(db: &TestDb, way: Way, n: usize) -> Self {
        let client = db.client().await;
        match way {
            Way::Relay => {
                client
                    .batch_execute("DELETE FROM outbox")
                    .await
                    .expect("an empty outbox");
                client
                    .execute(
                        "INSERT INTO outbox (topic, payload, provider, event_id) \
                         SELECT 'crm.ping', jsonb_build_object('n', n), 'stripe', 'evt_' || n \
                         FROM generate_series(1, 5) AS n",
                        &[],
                    )
                    .await
                    .expect("outbox rows");
                let (sqs, queue) = crate::outbox::outbox_queue(&format!("sweep-outbox-{n}")).await;
                Job::Relay { sqs, queue }
            }
            Way::Recover => {
                let api = claimonce_tests::senders::StripeApi::start(RECOVER_KEY, 100, None).await;
                for i in 0..RECOVERED {
                    let sample = sample_event("stripe/invoice.paid.json");
                    let mut body: Value =
                        serde_json::from_str(sample["body"].as_str().expect("a body"))
                            .expect("JSON");
                    body["id"] = json!(format!("evt_recover_{n}_{i}"));
                    body["data"]["object"]["customer"] = json!(format!("cus_recover_{n}_{i}"));
                    // An hour old: past the grace left to its webhook, inside the window.
                    body["created"] = json!(claimonce_tests::sign::now() - 3600);
                    api.add(body.to_string().as_bytes(), false);
                }
                Job::Recover { api }
            }
            _ => {
                client
                    .batch_execute("DELETE FROM processed_events")
                    .await
                    .expect("an empty ledger");
                for (prefix, days, count) in [("old", 120, 7_i64), ("kept", 10, 3)] {
                    client
                        .execute(
                            "INSERT INTO processed_events (provider, event_id, event_type, received_at) \
                             SELECT 'stripe', $1 || '-' || n, 'invoice.paid', \
                                    now() - make_interval(days => $2) \
                             FROM generate_series(1, $3::bigint) AS n",
                            &[&prefix, &days, &count],
                        )
                        .await
                        .expect("ledger rows");
                }
                Job::Retention
            }
        }
    }

    /// The job's function on `url` with `faults` armed.
    async fn environment(&self, url: &str, faults: &str) -> Scheduled {
        let mut env = vec![
            ("DATABASE_URL", url.to_owned()),
            ("DB_CONNECT_TIMEOUT_MS", "500".to_owned()),
            ("DB_DELIVERY_TIMEOUT_MS", DELIVERY_MS.to_string()),
            ("CLAIMONCE_FAULTS", faults.to_owned()),
            ("RUST_BACKTRACE", "0".to_owned()),
        ];
        let binary = match self {
            Job::Relay { queue, .. } => {
                let moto = claimonce_tests::moto::moto().await;
                env.extend([
                    ("OUTBOX_QUEUE_URL", queue.clone()),
                    ("OUTBOX_BATCH_SIZE", "2".to_owned()),
                    ("OUTBOX_RETRY_BASE_MS", "0".to_owned()),
                ]);
                env.extend(claimonce_local::spill::aws_env(&moto.url));
                "outbox-relay"
            }
            Job::Retention => {
                env.extend([
                    ("RETENTION_DAYS", "90".to_owned()),
                    ("SWEEP_BATCH_SIZE", "2".to_owned()),
                ]);
                "retention-sweep"
            }
            Job::Recover { api } => {
                env.extend([
                    ("STRIPE_API_BASE", api.url.clone()),
                    ("STRIPE_API_KEY", RECOVER_KEY.to_owned()),
                ]);
                "stripe-recover"
            }
        };
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        Scheduled::start(binary, &env).await
    }

    /// What the job promises once a run finished: every row sent once to its queue and
    /// marked; every row past the window removed and none inside it; each listed event
    /// applied once.
    async fn holds(&self, db: &TestDb, n: usize) -> Result<(), String> {
        match self {
            Job::Relay { sqs, queue } => {
                let pending = db
                    .count("SELECT count(*) FROM outbox WHERE dispatched_at IS NULL")
                    .await;
                if pending != 0 {
                    return Err(format!("{pending} rows never marked"));
                }
                // Each row once: the relay's resends after a fault are dropped by the queue's
                // deduplication on the row's id, which is each message's idempotency key.
                let messages = crate::outbox::drained(sqs, queue).await;
                let keys: std::collections::BTreeSet<_> = messages
                    .iter()
                    .filter_map(|m| crate::outbox::attribute(m, "idempotency-key"))
                    .collect();
                if (messages.len(), keys.len()) != (5, 5) {
                    return Err(format!(
                        "the queue held {} messages, {} rows among them, for 5 rows",
                        messages.len(),
                        keys.len()
                    ));
                }
                Ok(())
            }
            Job::Retention => {
                let count = |prefix: &str| {
                    let sql = format!(
                        "SELECT count(*) FROM processed_events WHERE event_id LIKE '{prefix}-%'"
                    );
                    async move { db.count(&sql).await }
                };
                let (old, kept) = (count("old").await, count("kept").await);
                if (old, kept) != (0, 3) {
                    return Err(format!(
                        "{old} rows past the window left, {kept} of 3 inside it kept"
                    ));
                }
                Ok(())
            }
            Job::Recover { .. } => {
                for i in 0..RECOVERED {
                    let credited = db
                        .count(&format!(
                            "SELECT coalesce(sum(credit_balance_cents), 0)::bigint / 2000 \
                             FROM customers WHERE stripe_customer_id = 'cus_recover_{n}_{i}'"
                        ))
                        .await;
                    if credited != 1 {
                        return Err(format!("event {i} applied {credited} times"));
                    }
                }
                Ok(())
            }
        }
    }
}

/// One cell of a scheduled job: a run with `fault` at `point`, then the schedule's next runs
/// (on a fresh environment after a kill) until one finishes, then the job's promise.
async fn job_cell(
    db: &TestDb,
    outage: &Arc<Outage>,
    url: &str,
    way: Way,
    (point, fault): (Point, Fault),
    n: usize,
) -> Result<(), String> {
    let job = Job::new(db, way, n).await;
    let (armed, hold) = arm(fault, outage).await;
    let mut env = job
        .environment(url, &format!("{}={armed}", point.name()))
        .await;
    let first = env.run().await;
    if !env
        .lines("fault injected")
        .iter()
        .any(|l| l["point"] == point.name())
    {
        return Err(format!("the fault never fired (answered {first:?})"));
    }
    released(hold, outage).await?;
    if fault == Fault::Kill {
        until_no_transaction(db).await?;
        env = job.environment(url, "").await;
    }
    let mut runs = Vec::new();
    for _ in 0..3 {
        let run = env.run().await;
        let finished = run.as_ref().is_ok_and(|r| r["finished"] == true);
        runs.push(run);
        if finished {
            break;
        }
    }
    if !runs
        .last()
        .is_some_and(|r| r.as_ref().is_ok_and(|r| r["finished"] == true))
    {
        return Err(format!("first {first:?}, then no run finished: {runs:?}"));
    }
    job.holds(db, n)
        .await
        .map_err(|e| format!("first {first:?}, then {runs:?}: {e}"))?;
    until_no_transaction(db)
        .await
        .map_err(|e| format!("first {first:?}: {e}"))
}
