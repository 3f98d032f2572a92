//! No verified delivery lost while the database is down (`shared/src/spill.rs`), with the real
//! binaries: each provider's function under the Runtime API emulator, its database behind a
//! forwarder the test stops and starts (`claimonce_tests::outage`), and its spill queue and
//! dead-letter queue in moto's SQS, created with the attributes template.yaml gives them.
//! The drain is invoked as Lambda's event source mapping invokes it: the messages received
//! from the queue as an SQS event, those not reported failed deleted afterwards.

use std::time::Duration;

use aws_sdk_sqs::types::QueueAttributeName;
use claimonce_local::functions::{self, Function};
use claimonce_local::runtime_api::RuntimeApi;
use claimonce_local::sign::resign;
use claimonce_tests::TestDb;
use claimonce_tests::apigw::payload_outcome;
use claimonce_tests::lambda::{binaries, function, sample_event};
use claimonce_tests::outage::Outage;
use claimonce_tests::sign::now;
use serde_json::{Value, json};
use tokio::process::Child;

/// A provider's spill queue attribute as template.yaml declares it (`<Name>SpillQueue`).
fn declared(attribute: &str) -> String {
    declared_in("StripeSpillQueue", attribute)
        .unwrap_or_else(|| panic!("StripeSpillQueue has no {attribute}"))
}

/// An attribute of the template.yaml resource `resource`, if it declares one.
fn declared_in(resource: &str, attribute: &str) -> Option<String> {
    let template = std::fs::read_to_string(functions::workspace_root().join("template.yaml"))
        .expect("template.yaml");
    let block = template
        .split(&format!("\n  {resource}:\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("a {resource} resource"));
    block
        .lines()
        .take_while(|l| l.is_empty() || l.starts_with("    "))
        .find_map(|l| l.trim().strip_prefix(&format!("{attribute}: ")))
        .map(|v| v.trim_matches('\'').to_owned())
}

/// A spill queue and its dead-letter queue in moto, as the template makes them; the queue's
/// URL and the dead-letter queue's.
async fn queues(sqs: &aws_sdk_sqs::Client, name: &str, max_receives: &str) -> (String, String) {
    let dead = sqs
        .create_queue()
        .queue_name(format!("{name}-dead"))
        .attributes(QueueAttributeName::MessageRetentionPeriod, "1209600")
        .send()
        .await
        .expect("the dead-letter queue");
    let dead_url = dead.queue_url().expect("url").to_owned();
    let dead_arn = sqs
        .get_queue_attributes()
        .queue_url(&dead_url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .expect("its ARN")
        .attributes()
        .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
        .expect("an ARN");
    let queue = sqs
        .create_queue()
        .queue_name(name)
        .attributes(
            QueueAttributeName::VisibilityTimeout,
            declared("VisibilityTimeout"),
        )
        .attributes(
            QueueAttributeName::MaximumMessageSize,
            declared("MaximumMessageSize"),
        )
        .attributes(
            QueueAttributeName::MessageRetentionPeriod,
            declared("MessageRetentionPeriod"),
        )
        .attributes(
            QueueAttributeName::RedrivePolicy,
            json!({"deadLetterTargetArn": dead_arn, "maxReceiveCount": max_receives}).to_string(),
        )
        .send()
        .await
        .expect("the spill queue");
    (queue.queue_url().expect("url").to_owned(), dead_url)
}

/// Messages on the queue now (visible ones: what the dead-letter alarm reads).
async fn depth(sqs: &aws_sdk_sqs::Client, url: &str) -> u64 {
    sqs.get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .send()
        .await
        .expect("attributes")
        .attributes()
        .and_then(|a| {
            a.get(&QueueAttributeName::ApproximateNumberOfMessages)
                .cloned()
        })
        .and_then(|n| n.parse().ok())
        .expect("a count")
}

/// A provider's function, its database behind `outage`, its spill queue `queue`; its log
/// lines kept in a file.
struct Spilling {
    api: std::sync::Arc<RuntimeApi>,
    instance: Child,
    log: std::path::PathBuf,
}

async fn start(f: &Function, database_url: &str, queue: &str, sqs_endpoint: &str) -> Spilling {
    start_with(f, database_url, queue, sqs_endpoint, &[]).await
}

/// [`start`] with `extra` variables over the suite's.
async fn start_with(
    f: &Function,
    database_url: &str,
    queue: &str,
    sqs_endpoint: &str,
    extra: &[(&str, &str)],
) -> Spilling {
    let api = std::sync::Arc::new(RuntimeApi::start(f.binary).await.expect("api"));
    let mut env = vec![
        ("DATABASE_URL", database_url),
        (f.secret_var, f.dev_secret),
        ("DB_CONNECT_TIMEOUT_MS", "1000"),
        ("SPILL_TIMEOUT_MS", "5000"),
    ];
    env.extend_from_slice(extra);
    let log = std::env::temp_dir().join(format!(
        "claimonce-spill-{}-{}.log",
        std::process::id(),
        api.address().rsplit(':').next().unwrap_or("0")
    ));
    let instance = api
        .command(&binaries().await.join(f.binary), &env)
        .envs(claimonce_local::spill::function_env(queue, sqs_endpoint))
        .stdout(std::fs::File::create(&log).expect("a log file"))
        .spawn()
        .expect("spawn");
    Spilling { api, instance, log }
}

impl Spilling {
    /// The function's `delivery` lines so far.
    fn deliveries(&self) -> Vec<Value> {
        self.lines("delivery")
    }

    /// The function's lines whose `message` is `message`, so far.
    fn lines(&self, message: &str) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|l| l["message"] == message)
            .collect()
    }

    async fn invoke(&self, event: &Value) -> Value {
        claimonce_tests::lambda::invoke(&self.api, event, Duration::from_secs(30)).await
    }

    /// One poll of the event source mapping (`claimonce_local::spill::drain_once`), with a
    /// visibility timeout of 0 so a failed message is back at once: (received, failed).
    async fn drain_once(&self, sqs: &aws_sdk_sqs::Client, queue: &str) -> (usize, usize) {
        claimonce_local::spill::drain_once(sqs, queue, &self.api, 0, 0)
            .await
            .expect("a drain")
    }
}

/// The log file goes with the function: a run leaves nothing in the temporary folder.
impl Drop for Spilling {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.log);
    }
}

/// Up to 10 messages, hidden for `visibility` seconds once received.
async fn receive(
    sqs: &aws_sdk_sqs::Client,
    queue: &str,
    visibility: i32,
) -> Vec<aws_sdk_sqs::types::Message> {
    claimonce_local::spill::receive(sqs, queue, Some(visibility), 0)
        .await
        .expect("receive")
}

/// Stripe's function as most tests here start it: a database of its own behind a forwarder,
/// and a spill queue (with its dead-letter queue after `max_receives`) in moto.
struct StripeSpilling {
    moto: &'static claimonce_tests::moto::Moto,
    sqs: aws_sdk_sqs::Client,
    db: TestDb,
    queue: String,
    dead: String,
    outage: Outage,
    through: String,
}

impl StripeSpilling {
    async fn new(test: &str, max_receives: &str) -> Self {
        let moto = claimonce_tests::moto::moto().await;
        let sqs = aws_sdk_sqs::Client::new(&moto.aws_config().await);
        let db = TestDb::new().await;
        let (queue, dead) = queues(
            &sqs,
            &format!("spill-{test}-{}", std::process::id()),
            max_receives,
        )
        .await;
        let (outage, through) = Outage::in_front_of(&db.function_url_as("stripe"))
            .await
            .expect("the forwarder");
        Self {
            moto,
            sqs,
            db,
            queue,
            dead,
            outage,
            through,
        }
    }
}

fn signed(sample: &std::path::Path) -> Value {
    let text = std::fs::read_to_string(sample).expect("sample");
    let mut event: Value = serde_json::from_str(&text).expect("JSON");
    resign(&mut event, now()).expect("sign");
    event
}

/// The whole outage, for every provider of the registry: with its database stopped, each
/// sample is answered 200 `queued` and is on the provider's queue, with nothing in the
/// database; the sender's retry during the outage is queued again; once the database is back,
/// a retry before the drain is processed by the webhook itself, and the drain applies every
/// spilled copy exactly once (the ledger holds one row per sample; the retried one's copies
/// are duplicates), and the queue is empty.
#[tokio::test]
async fn with_the_database_down_every_delivery_is_queued_and_the_drain_applies_each_once() {
    let moto = claimonce_tests::moto::moto().await;
    let sqs = aws_sdk_sqs::Client::new(&moto.aws_config().await);
    let db = TestDb::new().await;
    let admin = db.client().await;
    for f in functions::all().expect("registry") {
        let samples = f.samples();
        assert!(!samples.is_empty(), "{}: no samples", f.provider);
        let (queue, dead) = queues(
            &sqs,
            &format!("spill-{}-{}", f.provider, std::process::id()),
            &declared("maxReceiveCount"),
        )
        .await;
        let (outage, through) = Outage::in_front_of(&db.function_url_as(f.provider))
            .await
            .expect("the forwarder");
        let function = start(f, &through, &queue, &moto.url).await;
        let events: Vec<Value> = samples.iter().map(|s| signed(s)).collect();

        outage.down().await;
        for (sample, event) in samples.iter().zip(&events) {
            assert_eq!(
                payload_outcome(&function.invoke(event).await),
                (200, "queued".into()),
                "{}",
                sample.display()
            );
        }
        // The sender retries the first one while the database is still down.
        assert_eq!(
            payload_outcome(&function.invoke(&events[0]).await),
            (200, "queued".into())
        );
        let ledger = format!(
            "SELECT count(*) FROM processed_events WHERE provider = '{}'",
            f.provider
        );
        let rows = |sql: String| {
            let admin = &admin;
            async move {
                admin
                    .query_one(&sql, &[])
                    .await
                    .expect("count")
                    .get::<_, i64>(0)
            }
        };
        assert_eq!(
            rows(ledger.clone()).await,
            0,
            "{}: nothing in the database",
            f.provider
        );
        assert_eq!(depth(&sqs, &queue).await, samples.len() as u64 + 1);

        outage.up().await.expect("up again");
        // The sender's retry after the outage, before the drain: the webhook applies it.
        let first = payload_outcome(&function.invoke(&events[0]).await);
        assert!(
            first == (200, "processed".into()) || first == (200, "ignored".into()),
            "{}: {first:?}",
            f.provider
        );
        let mut drained = 0;
        loop {
            let (received, failed) = function.drain_once(&sqs, &queue).await;
            assert_eq!(failed, 0, "{}: the drain reported failures", f.provider);
            if received == 0 {
                break;
            }
            drained += received;
        }
        assert_eq!(drained, samples.len() + 1, "{}", f.provider);
        assert_eq!(rows(ledger).await, samples.len() as i64, "{}", f.provider);
        assert_eq!(depth(&sqs, &queue).await, 0);
        assert_eq!(depth(&sqs, &dead).await, 0);
        // And a copy of each arriving now, from the sender, is a duplicate.
        for event in &events {
            let mut event = event.clone();
            resign(&mut event, now()).expect("sign");
            assert_eq!(
                payload_outcome(&function.invoke(&event).await),
                (200, "duplicate".into())
            );
        }
    }
    // The effects, once each: Stripe's samples credit 2500 and keep one subscription.
    assert_eq!(
        db.count("SELECT credit_balance_cents FROM customers").await,
        2500
    );
    assert_eq!(db.count("SELECT count(*) FROM email_events").await, 2);
}

/// A message that fails every time (here one that names another provider, which the drain
/// refuses) is reported failed on each receive, and after the stated number of receives SQS
/// moves it to the dead-letter queue, whose depth is what the alarm reads.
#[tokio::test]
async fn a_message_that_fails_every_time_reaches_the_dead_letter_queue() {
    let StripeSpilling {
        moto,
        sqs,
        db,
        queue,
        dead,
        ..
    } = StripeSpilling::new("poison", "2").await;
    let f = function("stripe");
    let function = start(f, &db.function_url_as("stripe"), &queue, &moto.url).await;
    sqs.send_message()
        .queue_url(&queue)
        .message_body("{}")
        .message_attributes("claimonce-spill", number("2"))
        .message_attributes("claimonce-provider", string("resend"))
        .message_attributes("claimonce-received-at", number("1796070269"))
        .send()
        .await
        .expect("send");
    for receive in 1..=2 {
        assert_eq!(
            function.drain_once(&sqs, &queue).await,
            (1, 1),
            "receive {receive}"
        );
        assert_eq!(depth(&sqs, &dead).await, 0);
    }
    // The third receive finds it moved.
    assert_eq!(function.drain_once(&sqs, &queue).await, (0, 0));
    assert_eq!(depth(&sqs, &dead).await, 1);
}

fn string(value: &str) -> aws_sdk_sqs::types::MessageAttributeValue {
    aws_sdk_sqs::types::MessageAttributeValue::builder()
        .data_type("String")
        .string_value(value)
        .build()
        .expect("attribute")
}

fn number(value: &str) -> aws_sdk_sqs::types::MessageAttributeValue {
    aws_sdk_sqs::types::MessageAttributeValue::builder()
        .data_type("Number")
        .string_value(value)
        .build()
        .expect("attribute")
}

/// With the database down and SQS unreachable too, the answer is 500: never 200 without a
/// durable copy.
#[tokio::test]
async fn with_the_queue_unreachable_too_the_answer_is_500() {
    let db = TestDb::new().await;
    let f = function("stripe");
    let (outage, through) = Outage::in_front_of(&db.function_url_as("stripe"))
        .await
        .expect("the forwarder");
    // Nothing listens on port 9 of the loopback: every SQS call is refused.
    let function = start(
        f,
        &through,
        "http://127.0.0.1:9/123456789012/spill",
        "http://127.0.0.1:9",
    )
    .await;
    outage.down().await;
    let answer = function
        .invoke(&signed(&sample("stripe/invoice.paid.json")))
        .await;
    assert_eq!(answer["statusCode"], 500, "{answer}");
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 0);
}

fn sample(relative: &str) -> std::path::PathBuf {
    functions::workspace_root().join("events").join(relative)
}

/// A slow database within the deadline is not an outage: the delivery held at the database
/// (the forwarder holds its statement until the test releases it) is processed, and nothing
/// is queued.
#[tokio::test]
async fn a_slow_database_within_the_deadline_is_not_spilled() {
    let StripeSpilling {
        moto,
        sqs,
        queue,
        outage,
        through,
        ..
    } = StripeSpilling::new("slow", "5").await;
    let f = function("stripe");
    let function = std::sync::Arc::new(start(f, &through, &queue, &moto.url).await);
    // The cold start's connection is made before the hold.
    let warm = sample_event("stripe/checkout.session.completed.json");
    let mut warm = warm;
    resign(&mut warm, now()).expect("sign");
    assert_eq!(
        payload_outcome(&function.invoke(&warm).await),
        (200, "processed".into())
    );
    outage.hold();
    let delivery = {
        let function = std::sync::Arc::clone(&function);
        tokio::spawn(async move {
            function
                .invoke(&signed(&sample("stripe/invoice.paid.json")))
                .await
        })
    };
    // The statement is at the database, held.
    claimonce_tests::until("the statement is held at the database", || {
        outage.waiting() > 0
    })
    .await;
    outage.release();
    let answer = delivery.await.expect("the delivery");
    assert_eq!(payload_outcome(&answer), (200, "processed".into()));
    assert_eq!(depth(&sqs, &queue).await, 0);
}

/// The drain killed in the middle of a batch, after its statement reached the database and
/// before it answered: the statement commits without its client (the ledger holds the claim
/// before anything else runs), the message, never deleted, comes back after its visibility
/// timeout, and the next drain finds the claim taken (a duplicate) and deletes it. Applied
/// once.
#[tokio::test]
async fn a_drain_killed_mid_batch_returns_its_message_which_is_applied_once() {
    let StripeSpilling {
        moto,
        sqs,
        db,
        queue,
        outage,
        through,
        ..
    } = StripeSpilling::new("killed", "5").await;
    let f = function("stripe");
    let receiver = start(f, &through, &queue, &moto.url).await;
    outage.down().await;
    let event = signed(&sample("stripe/invoice.paid.json"));
    assert_eq!(
        payload_outcome(&receiver.invoke(&event).await),
        (200, "queued".into())
    );
    outage.up().await.expect("up again");

    let mut drain = start(f, &through, &queue, &moto.url).await;
    let messages = receive(&sqs, &queue, 2).await;
    assert_eq!(messages.len(), 1);
    // Its connection first, then hold what it sends.
    let warm = signed(&sample("stripe/checkout.session.completed.json"));
    assert_eq!(
        payload_outcome(&drain.invoke(&warm).await),
        (200, "processed".into())
    );
    outage.hold();
    let batch = {
        let api = std::sync::Arc::clone(&drain.api);
        let event = claimonce_local::spill::sqs_event(&queue, &messages).to_string();
        tokio::spawn(async move { api.invoke(event, Duration::from_secs(60)).await })
    };
    claimonce_tests::until("the drain's statement is held at the database", || {
        outage.waiting() > 0
    })
    .await;
    drain.instance.start_kill().expect("kill");
    let _ = drain.instance.wait().await;
    batch.abort();
    // The statement, already sent, goes on to the server and commits; nobody answers SQS.
    outage.release();
    let ledger = "SELECT count(*) FROM processed_events WHERE event_type = 'invoice.paid'";
    tokio::time::timeout(Duration::from_secs(30), async {
        while db.count(ledger).await == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the killed drain's statement committed without its client");

    // Back after the visibility timeout, and drained by a new environment: a duplicate now.
    let again = start(f, &through, &queue, &moto.url).await;
    let returned = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let found = receive(&sqs, &queue, 0).await;
            if !found.is_empty() {
                break found;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("the message comes back after its visibility timeout");
    assert_eq!(returned.len(), 1);
    let answer = again
        .invoke(&claimonce_local::spill::sqs_event(&queue, &returned))
        .await;
    assert_eq!(answer["batchItemFailures"], json!([]), "{answer}");
    assert_eq!(db.count(ledger).await, 1, "the redrive was a duplicate");
    // Credited once: the invoice's amount, not twice that.
    let body: Value =
        serde_json::from_str(event["body"].as_str().expect("a text body")).expect("JSON");
    let amount = body["data"]["object"]["amount_paid"]
        .as_i64()
        .expect("amount_paid");
    assert_eq!(
        db.count("SELECT coalesce(sum(credit_balance_cents), 0)::bigint FROM customers")
            .await,
        amount
    );
}

/// The template's `MAX_BODY_BYTES` is the largest body a delivery can be spilled with: a
/// receiver with a spill queue refuses a larger one at start, so a higher value in
/// template.yaml would keep every deployed receiver from starting.
#[test]
fn the_template_s_body_limit_is_one_a_delivery_can_be_spilled_with() {
    let template = std::fs::read_to_string(functions::workspace_root().join("template.yaml"))
        .expect("template.yaml");
    let value = template
        .lines()
        .find_map(|l| l.trim().strip_prefix("MAX_BODY_BYTES: "))
        .expect("MAX_BODY_BYTES in template.yaml")
        .trim_matches('\'');
    assert_eq!(
        value.parse::<usize>().expect("a number"),
        claimonce::jobs::SPILL_BODY_LIMIT
    );
}

/// A drain that finds the database unavailable does not try the rest of its batch: each would
/// wait out its own connect, and the batch the function's timeout. Three spilled deliveries
/// drained in one batch against a database that accepts connections and closes them make as
/// many connection attempts as one alone does, and all three come back.
#[tokio::test]
async fn a_drain_that_finds_the_database_out_leaves_the_rest_of_its_batch_untried() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let StripeSpilling {
        moto,
        sqs,
        db,
        queue,
        outage,
        through,
        ..
    } = StripeSpilling::new("untried", "5").await;
    let f = function("stripe");
    let receiver = start(f, &through, &queue, &moto.url).await;
    outage.down().await;
    for name in [
        "stripe/invoice.paid.json",
        "stripe/checkout.session.completed.json",
        "stripe/customer.subscription.updated.json",
    ] {
        assert_eq!(
            payload_outcome(&receiver.invoke(&signed(&sample(name))).await),
            (200, "queued".into())
        );
    }
    // A database that accepts every connection and closes it at once, counting them.
    let closing = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = closing.local_addr().expect("addr").port();
    let accepted = std::sync::Arc::new(AtomicU64::new(0));
    let counter = std::sync::Arc::clone(&accepted);
    tokio::spawn(async move {
        while let Ok((socket, _)) = closing.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            drop(socket);
        }
    });
    let url = db
        .function_url_as("stripe")
        .replace(&format!(":{}/", outage_upstream(&db)), &format!(":{port}/"));
    let drain = start(f, &url, &queue, &moto.url).await;
    let messages = receive(&sqs, &queue, 0).await;
    assert_eq!(messages.len(), 3);
    // Once for the cold start's own attempt, then counted alone.
    for _ in 0..2 {
        accepted.store(0, Ordering::SeqCst);
        let one = drain
            .invoke(&claimonce_local::spill::sqs_event(&queue, &messages[..1]))
            .await;
        assert_eq!(one["batchItemFailures"].as_array().map(Vec::len), Some(1));
    }
    let per_message = accepted.swap(0, Ordering::SeqCst);
    assert!(per_message > 0, "the drain tried the database");
    let all = drain
        .invoke(&claimonce_local::spill::sqs_event(&queue, &messages))
        .await;
    assert_eq!(
        all["batchItemFailures"].as_array().map(Vec::len),
        Some(messages.len()),
        "{all}"
    );
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        per_message,
        "only the first was tried"
    );
    // Waiting for the database is what the queue is for: each such line is a WARN, never an
    // ERROR (an ERROR is a record that cannot be applied however long it waits).
    let drained = drain.lines("drained");
    assert_eq!(drained.len(), 2 + messages.len(), "{drained:#?}");
    assert!(
        drained
            .iter()
            .all(|l| l["level"] == "WARN" && l["disposition"] == "error"),
        "{drained:#?}"
    );
    assert_eq!(
        drained
            .iter()
            .filter(|l| l["error"]
                .as_str()
                .is_some_and(|e| e.starts_with("not tried: the database is unavailable")))
            .count(),
        messages.len() - 1,
        "{drained:#?}"
    );
}

/// The port of the server the test database is on, as its function URL names it.
fn outage_upstream(db: &TestDb) -> u16 {
    use std::str::FromStr;
    let config =
        tokio_postgres::Config::from_str(&db.function_url_as("stripe")).expect("a PostgreSQL URL");
    config.get_ports().first().copied().expect("a port")
}

/// A spilled record as the event source mapping hands one over: `body`, the attributes a
/// receiver writes (`headers` among them), from the queue `arn`.
fn spilled_record(id: &str, body: &str, headers: &[(&str, &str)], arn: &str) -> Value {
    spilled_record_of("stripe", id, body, headers, arn)
}

/// A spilled record of `provider`'s, as [`spilled_record`] makes Stripe's.
fn spilled_record_of(
    provider: &str,
    id: &str,
    body: &str,
    headers: &[(&str, &str)],
    arn: &str,
) -> Value {
    let attribute = |v: &str, t: &str| json!({"stringValue": v, "dataType": t});
    let headers: serde_json::Map<String, Value> = headers
        .iter()
        .map(|(n, v)| ((*n).to_owned(), Value::from(*v)))
        .collect();
    json!({
        "messageId": id,
        "body": body,
        "attributes": {"ApproximateReceiveCount": "1"},
        "messageAttributes": {
            "claimonce-spill": attribute("2", "Number"),
            "claimonce-provider": attribute(provider, "String"),
            "claimonce-received-at": attribute("1796070269", "Number"),
            "claimonce-headers": attribute(&Value::Object(headers).to_string(), "String"),
        },
        "eventSource": "aws:sqs",
        "eventSourceARN": arn,
    })
}

/// A spilled record's headers: (name, value).
type Headers = Vec<(String, String)>;

/// Stripe's `invoice.paid` sample signed `age` seconds ago: its body and signature header.
fn signed_invoice(age: u64) -> (String, String) {
    let mut event = sample_event("stripe/invoice.paid.json");
    resign(&mut event, now() - age).expect("sign");
    let body = event["body"].as_str().expect("a text body").to_owned();
    let signature = event["headers"]
        .as_object()
        .expect("headers")
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("stripe-signature"))
        .and_then(|(_, v)| v.as_str())
        .expect("a stripe-signature header")
        .to_owned();
    (body, signature)
}

/// The drain applies only what it can prove. Invoked directly, as any principal allowed
/// `lambda:InvokeFunction` could, the Stripe function is handed records it must refuse: an
/// unsigned `invoice.paid` crediting 99,999,999 with the spill attributes, the genuine delivery
/// with its signature altered, its body altered under the genuine signature, and the genuine
/// delivery from a queue that is not the function's. Each is reported failed and nothing is
/// written. The genuine delivery from its own queue, signed an hour ago (far past the 300 s
/// tolerance), is applied: only the timestamp's age is waived.
#[tokio::test]
async fn the_drain_applies_only_a_signed_delivery_from_its_own_queue() {
    let db = TestDb::new().await;
    let f = function("stripe");
    let queue = format!(
        "http://127.0.0.1:9/123456789012/stripe-spill-{}",
        std::process::id()
    );
    let own = claimonce_local::spill::queue_arn(&queue);
    let function = start(
        f,
        &db.function_url_as("stripe"),
        &queue,
        "http://127.0.0.1:9",
    )
    .await;
    let (body, signature) = signed_invoice(3600);
    let mut forged: Value = serde_json::from_str(&body).expect("JSON");
    forged["data"]["object"]["amount_paid"] = json!(99_999_999);
    let forged = forged.to_string();
    let flipped = {
        let last = signature.chars().last().expect("a signature");
        let other = if last == '0' { '1' } else { '0' };
        format!("{}{other}", &signature[..signature.len() - 1])
    };
    let stripe_signature = |value: &str| vec![("stripe-signature".to_owned(), value.to_owned())];
    let cases: [(&str, &str, Headers, String); 5] = [
        ("unsigned", &forged, vec![], own.clone()),
        (
            "signature altered",
            &body,
            stripe_signature(&flipped),
            own.clone(),
        ),
        (
            "body altered",
            &forged,
            stripe_signature(&signature),
            own.clone(),
        ),
        (
            "another queue",
            &body,
            stripe_signature(&signature),
            own.replace("stripe-spill", "github-spill"),
        ),
        (
            "no queue named",
            &body,
            stripe_signature(&signature),
            String::new(),
        ),
    ];
    for (case, body, headers, arn) in &cases {
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        let answer = function
            .invoke(&json!({"Records": [spilled_record(case, body, &headers, arn)]}))
            .await;
        assert_eq!(
            answer,
            json!({"batchItemFailures": [{"itemIdentifier": case}]}),
            "{case}"
        );
        assert_eq!(
            db.count("SELECT count(*) FROM processed_events").await,
            0,
            "{case}: nothing applied"
        );
        assert_eq!(
            db.count("SELECT count(*) FROM customers").await,
            0,
            "{case}: nothing credited"
        );
    }
    // A record refused for what it is, not for the database, is an ERROR: waiting cannot fix it.
    let refused = function.lines("drained");
    assert_eq!(refused.len(), cases.len(), "{refused:#?}");
    assert!(
        refused.iter().all(|l| l["level"] == "ERROR"),
        "{refused:#?}"
    );
    let genuine = spilled_record("genuine", &body, &[("stripe-signature", &signature)], &own);
    let answer = function.invoke(&json!({"Records": [genuine]})).await;
    assert_eq!(answer, json!({"batchItemFailures": []}));
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 1);
    let paid: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(
        db.count("SELECT coalesce(sum(credit_balance_cents), 0)::bigint FROM customers")
            .await,
        paid["data"]["object"]["amount_paid"]
            .as_i64()
            .expect("amount")
    );
}

/// No replay outlives its claim through the drain: a genuine, correctly signed delivery
/// whose signature is a minute older than any spilled message can be (the queues' 14 days and
/// the largest tolerance) is refused as stale and applies nothing, even with no ledger row left
/// to make it a duplicate (the sweep keeps rows at least 31 days); one a minute younger, as a
/// message kept through a whole outage may be, is applied. The bound is the template's: both
/// spill queues are standard queues that keep a message 14 days.
#[tokio::test]
async fn the_drain_refuses_a_signature_older_than_any_spilled_message_and_applies_a_younger_one() {
    // A standard queue's message keeps its first enqueue time in its dead-letter queue (a FIFO
    // queue's would start again), so the longer of the two retentions bounds its age.
    for queue in ["StripeSpillQueue", "StripeSpillDeadLetterQueue"] {
        assert_eq!(
            declared_in(queue, "MessageRetentionPeriod"),
            Some(claimonce::jobs::SPILL_RETENTION_SECONDS.to_string()),
            "the bound is {queue}'s retention as deployed"
        );
        assert_eq!(declared_in(queue, "FifoQueue"), None, "{queue} is standard");
    }
    the_drain_bounds_the_signed_age("stripe", "customers", |id, age, own| {
        let (body, signature) = signed_invoice(age);
        spilled_record(id, &body, &[("stripe-signature", &signature)], own)
    })
    .await;
}

/// `provider`'s function draining records (`record(id, age, queue ARN)`) on either side of the
/// oldest signature a spilled message can carry (the spill queues' 14 days and the largest
/// tolerance): one signed a minute before it is reported failed, its `drained` line saying
/// why, no ledger row and no row in `effect`; one signed a minute after it is applied, one of
/// each.
async fn the_drain_bounds_the_signed_age(
    provider: &str,
    effect: &str,
    record: impl Fn(&str, u64, &str) -> Value,
) {
    let db = TestDb::new().await;
    let queue = format!(
        "http://127.0.0.1:9/123456789012/{provider}-spill-age-{}",
        std::process::id()
    );
    let own = claimonce_local::spill::queue_arn(&queue);
    let function = start(
        function(provider),
        &db.function_url_as(provider),
        &queue,
        "http://127.0.0.1:9",
    )
    .await;
    let oldest =
        claimonce::jobs::SPILL_RETENTION_SECONDS + claimonce::config::MAX_TOLERANCE_SECONDS;
    let answer = function
        .invoke(&json!({"Records": [record("just-outside", oldest + 60, &own)]}))
        .await;
    assert_eq!(
        answer,
        json!({"batchItemFailures": [{"itemIdentifier": "just-outside"}]})
    );
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 0);
    let effects = format!("SELECT count(*) FROM {effect}");
    assert_eq!(db.count(&effects).await, 0);
    let refused = function.lines("drained");
    assert!(
        refused.iter().any(|l| l["error"]
            .as_str()
            .is_some_and(|e| e.contains("older than any spilled message can be"))),
        "refused as stale: {refused:#?}"
    );

    let answer = function
        .invoke(&json!({"Records": [record("just-inside", oldest - 60, &own)]}))
        .await;
    assert_eq!(answer, json!({"batchItemFailures": []}));
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 1);
    assert_eq!(db.count(&effects).await, 1);
}

/// Stripe's function on `db` with `extra` variables, draining a spill queue named for `test`
/// that nothing sends to (its SQS endpoint refuses): the function and the queue's ARN, which
/// the records it is handed name.
async fn stripe_draining(db: &TestDb, test: &str, extra: &[(&str, &str)]) -> (Spilling, String) {
    let queue = format!(
        "http://127.0.0.1:9/123456789012/stripe-spill-{test}-{}",
        std::process::id()
    );
    let function = start_with(
        function("stripe"),
        &db.function_url_as("stripe"),
        &queue,
        "http://127.0.0.1:9",
        extra,
    )
    .await;
    (function, claimonce_local::spill::queue_arn(&queue))
}

/// A spilled thin event of Stripe's of type `kind`, `id`, signed now, as the SQS record
/// `message` from the queue `arn`; its related object an invoice named after it.
fn spilled_thin(message: &str, id: &str, kind: &str, arn: &str) -> Value {
    let secret = function("stripe").dev_secret;
    let object = format!("in_{}", id.trim_start_matches("evt_"));
    let body = json!({
        "id": id, "object": "v2.core.event", "type": kind, "livemode": false,
        "created": claimonce_tests::sign::rfc3339_ago(3600), "context": null,
        "related_object": {"id": object, "type": "invoice",
                           "url": format!("/v1/invoices/{object}")},
    })
    .to_string();
    let signature = claimonce_tests::sign::stripe_header(secret, now(), body.as_bytes());
    spilled_record(message, &body, &[("stripe-signature", &signature)], arn)
}

/// A drain near its deadline puts off only a thin event it would complete from Stripe's API:
/// in an invocation of 6 s, where the database's 4 s of bounds fit and Stripe's 3 s more do
/// not, a thin `v1.invoice.paid` is reported failed untried and a thin `v1.charge.succeeded`,
/// whose type has no effect here and reads no API, is claimed and ignored. Nothing is read.
#[tokio::test]
async fn a_drain_near_its_deadline_still_takes_a_thin_event_that_reads_no_api() {
    use claimonce_tests::senders::StripeApi;
    let db = TestDb::new().await;
    let api = StripeApi::start("rk_test_noeffect", 10, None).await;
    let (function, own) = stripe_draining(
        &db,
        "noeffect",
        &[
            ("STRIPE_API_KEY", "rk_test_noeffect"),
            ("STRIPE_API_BASE", &api.url),
            ("SENDER_API_TIMEOUT_MS", "3000"),
            ("DB_DELIVERY_TIMEOUT_MS", "2000"),
        ],
    )
    .await;
    let records = [
        spilled_thin("effect", "evt_test_neareffect", "v1.invoice.paid", &own),
        spilled_thin("none", "evt_test_nearnone", "v1.charge.succeeded", &own),
    ];
    let answer = claimonce_tests::lambda::invoke(
        &function.api,
        &json!({ "Records": records }),
        Duration::from_secs(6),
    )
    .await;
    assert_eq!(claimonce_tests::lambda::failed_items(&answer), ["effect"]);
    let drained = function.lines("drained");
    assert_eq!(drained.len(), 2, "{drained:#?}");
    assert!(
        drained[0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("no longer fits before the invocation's deadline")),
        "{drained:#?}"
    );
    assert_eq!(drained[1]["disposition"], "ignored", "{drained:#?}");
    assert_eq!(api.fetched(), Vec::<String>::new(), "nothing read");
    assert_eq!(
        db.count("SELECT count(*) FROM processed_events WHERE event_id LIKE 'evt_test_near%'")
            .await,
        1,
        "the event with no effect claimed, the other not"
    );
}

/// A drained batch beats its invocation's deadline: six spilled thin events whose fetch from
/// Stripe's API hangs, then one plain delivery, in one invocation of 15 s. Each thin record is
/// taken only while its bounds (Stripe's 3 s and the database's) still fit, then the rest are
/// reported failed untried; the plain record, which reads no API, is applied. The batch is
/// answered before the deadline, where six fetches of 3 s each ran the whole batch past it and
/// nothing of it was answered.
#[tokio::test]
async fn a_drained_batch_beats_its_deadline_and_applies_what_fits() {
    use claimonce_tests::senders::StripeApi;
    let db = TestDb::new().await;
    let api = StripeApi::start("rk_test_deadline", 10, None).await;
    let _held = api.hold_retrievals();
    let (function, own) = stripe_draining(
        &db,
        "deadline",
        &[
            ("STRIPE_API_KEY", "rk_test_deadline"),
            ("STRIPE_API_BASE", &api.url),
            ("SENDER_API_TIMEOUT_MS", "3000"),
            ("DB_DELIVERY_TIMEOUT_MS", "2000"),
        ],
    )
    .await;
    let mut records = Vec::new();
    for n in 1..=6 {
        records.push(spilled_thin(
            &format!("thin-{n}"),
            &format!("evt_test_late{n}"),
            "v1.invoice.paid",
            &own,
        ));
    }
    let (plain, signature) = signed_invoice(0);
    records.push(spilled_record(
        "plain",
        &plain,
        &[("stripe-signature", &signature)],
        &own,
    ));
    let answer = claimonce_tests::lambda::invoke(
        &function.api,
        &json!({ "Records": records }),
        Duration::from_secs(15),
    )
    .await;
    let failed = claimonce_tests::lambda::failed_items(&answer);
    assert_eq!(
        failed,
        ["thin-1", "thin-2", "thin-3", "thin-4", "thin-5", "thin-6"],
        "every thin record failed, the plain one applied"
    );
    assert_eq!(
        db.count("SELECT count(*) FROM processed_events").await,
        1,
        "the plain delivery, once"
    );
    let fetched = api.fetched().len();
    assert!(
        (1..6).contains(&fetched),
        "some thin records were tried and the rest left untried: {fetched} fetched"
    );
    let untried = function.lines("drained");
    assert!(
        untried.iter().any(|l| l["error"]
            .as_str()
            .is_some_and(|e| e.contains("no longer fits before the invocation's deadline"))),
        "{untried:#?}"
    );
}

/// A drained batch takes a record only while the database's bounds still fit before the
/// invocation's deadline. Six plain spilled invoices, each of its own customer, in one
/// invocation of 8 s; the test holds each customer's row, so each record's effect waits on its
/// lock and is let through after 1.6 s of its 2 s delivery timeout. A record needs 4 s of
/// bounds (1 s connect, 2 s delivery, 1 s cancel), so the first ones are applied and the rest
/// reported failed untried, each with its warning line and no claim, and the batch is answered
/// before its deadline. Tried one after another regardless, the six ran about 9.6 s and the
/// batch was never answered.
#[tokio::test]
async fn a_drain_takes_a_record_only_while_the_database_s_bounds_fit_before_its_deadline() {
    const RECORDS: usize = 6;
    let hold = Duration::from_millis(1600);
    let timeout = Duration::from_secs(8);
    let db = TestDb::new().await;
    let (function, own) =
        stripe_draining(&db, "budget", &[("DB_DELIVERY_TIMEOUT_MS", "2000")]).await;
    let secret = claimonce_tests::lambda::function("stripe").dev_secret;
    let owner = db.client().await;
    let mut records = Vec::new();
    let mut holders = Vec::new();
    for n in 1..=RECORDS {
        let customer = format!("cus_budget{n}");
        owner
            .execute(
                "INSERT INTO customers (stripe_customer_id) VALUES ($1)",
                &[&customer],
            )
            .await
            .expect("a customer");
        let mut body: Value =
            serde_json::from_str(&signed_invoice(0).0).expect("the sample's JSON");
        body["id"] = json!(format!("evt_budget{n}"));
        body["data"]["object"]["customer"] = json!(customer);
        let body = body.to_string();
        let signature = claimonce_tests::sign::stripe_header(secret, now(), body.as_bytes());
        records.push(spilled_record(
            &format!("budget-{n}"),
            &body,
            &[("stripe-signature", &signature)],
            &own,
        ));
        // The customer's row, locked by a session of its own until the test lets it go.
        let holder = db.client().await;
        holder.batch_execute("BEGIN").await.expect("begin");
        holder
            .execute(
                "SELECT 1 FROM customers WHERE stripe_customer_id = $1 FOR UPDATE",
                &[&customer],
            )
            .await
            .expect("the row locked");
        let pid: i32 = holder
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .expect("a pid")
            .get(0);
        holders.push((holder, pid));
    }
    let sent = tokio::time::Instant::now();
    let batch = json!({ "Records": records });
    let mut invocation = std::pin::pin!(function.api.invoke(batch.to_string(), timeout));
    let mut held = 0;
    let answer = loop {
        let Some((holder, pid)) = holders.get(held) else {
            break invocation.await;
        };
        let blocked = async {
            let waiting =
                "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))";
            loop {
                let row = owner.query_one(waiting, &[pid]).await;
                if row.expect("pg_stat_activity").get::<_, i64>(0) > 0 {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::select! {
            answer = &mut invocation => break answer,
            () = blocked => {
                // The moment under test: the record's effect held for most of its timeout.
                tokio::time::sleep(hold).await;
                holder.batch_execute("COMMIT").await.expect("the row let go");
                held += 1;
            }
        }
    };
    let answered_after = sent.elapsed();
    let answer = match answer {
        Ok(claimonce_local::runtime_api::Outcome::Response(payload)) => {
            serde_json::from_slice::<Value>(&payload).expect("JSON")
        }
        Ok(claimonce_local::runtime_api::Outcome::Error(error)) => panic!(
            "the function reported an error: {}",
            String::from_utf8_lossy(&error)
        ),
        Err(e) => panic!("the batch was not answered before its deadline: {e:?}"),
    };
    assert!(
        answered_after < timeout,
        "answered after {answered_after:?}"
    );
    let failed = claimonce_tests::lambda::failed_items(&answer);
    let untried: Vec<String> = (held + 1..=RECORDS)
        .map(|n| format!("budget-{n}"))
        .collect();
    assert!(
        (1..RECORDS).contains(&held),
        "some records were tried and the rest left untried: {held} tried"
    );
    assert_eq!(
        failed, untried,
        "the untried records, and only those, failed"
    );
    let warned: Vec<String> = function
        .lines("not tried: too near the invocation's deadline; received again")
        .iter()
        .filter(|l| l["level"] == "WARN")
        .filter_map(|l| l["sqs_message_id"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(warned, untried, "one warning line for each untried record");
    for n in 1..=RECORDS {
        let claims = db
            .count(&format!(
                "SELECT count(*) FROM processed_events WHERE event_id = 'evt_budget{n}'"
            ))
            .await;
        assert_eq!(claims, i64::from(n <= held), "evt_budget{n}'s claim");
    }
}

/// The binary drains its spill queue's dead-letter queue too, once `SPILL_DEAD_LETTER_QUEUE_ARN`
/// names it (the template sets it; an operator turns that queue's event source on): a record
/// from it is applied through the same claim, and one from a queue named nowhere is refused.
#[tokio::test]
async fn the_binary_drains_a_dead_letter_record_when_its_queue_is_named() {
    let db = TestDb::new().await;
    let queue = format!(
        "http://127.0.0.1:9/123456789012/stripe-spill-dlq-{}",
        std::process::id()
    );
    let dead_letters = format!("{}-dead-letters", claimonce_local::spill::queue_arn(&queue));
    let function = start_with(
        function("stripe"),
        &db.function_url_as("stripe"),
        &queue,
        "http://127.0.0.1:9",
        &[("SPILL_DEAD_LETTER_QUEUE_ARN", &dead_letters)],
    )
    .await;
    let (body, signature) = signed_invoice(600);
    let from = |id: &str, arn: &str| json!({"Records": [spilled_record(id, &body, &[("stripe-signature", &signature)], arn)]});
    let other = dead_letters.replace("-dead-letters", "-elsewhere");
    assert_eq!(
        function.invoke(&from("elsewhere", &other)).await,
        json!({"batchItemFailures": [{"itemIdentifier": "elsewhere"}]}),
        "a queue named nowhere"
    );
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 0);
    assert_eq!(
        function.invoke(&from("dead-letter", &dead_letters)).await,
        json!({"batchItemFailures": []})
    );
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 1);
}

/// The drain's age bound holds for every scheme that signs a time, not only Stripe's: a Resend
/// delivery whose `svix-timestamp` is a minute past the bound, correctly signed, is refused and
/// writes no ledger row and no `email_events` row; the same delivery a minute inside it is
/// applied.
#[tokio::test]
async fn the_drain_refuses_a_resend_signature_older_than_any_spilled_message() {
    the_drain_bounds_the_signed_age("resend", "email_events", |id, age, own| {
        let mut event = sample_event("resend/email.delivered.json");
        resign(&mut event, now() - age).expect("sign");
        let body = event["body"].as_str().expect("a text body");
        let header = |name: &str| {
            event["headers"][name]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        };
        let headers = ["svix-id", "svix-timestamp", "svix-signature"].map(|n| (n, header(n)));
        let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        spilled_record_of("resend", id, body, &headers, own)
    })
    .await;
}

/// A function with no spill queue drains nothing: the genuine record is reported failed and
/// nothing is written.
#[tokio::test]
async fn a_function_without_a_spill_queue_drains_nothing() {
    let db = TestDb::new().await;
    let f = function("stripe");
    let api = std::sync::Arc::new(RuntimeApi::start(f.binary).await.expect("api"));
    let url = db.function_url_as("stripe");
    let _instance = api
        .command(
            &binaries().await.join(f.binary),
            &[("DATABASE_URL", url.as_str()), (f.secret_var, f.dev_secret)],
        )
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let (body, signature) = signed_invoice(0);
    let record = spilled_record(
        "m-1",
        &body,
        &[("stripe-signature", &signature)],
        "arn:aws:sqs:us-east-1:123456789012:spill",
    );
    let answer = claimonce_tests::lambda::invoke(
        &api,
        &json!({"Records": [record]}),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(
        answer,
        json!({"batchItemFailures": [{"itemIdentifier": "m-1"}]})
    );
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 0);
}

/// The HTTP path never drains: an SQS event holding a well-formed spilled delivery, handed to
/// `lambda::handle_event` (the API Gateway entry point), is refused as not an API Gateway
/// event and writes nothing; only `lambda::handle_invocation` applies it.
#[tokio::test]
async fn an_sqs_event_on_the_http_path_is_refused_and_applies_nothing() {
    let db = TestDb::new().await;
    let queue = "https://sqs.us-east-1.amazonaws.com/123456789012/spill";
    let (receiver, _) = db.receiver(claimonce_tests::sign::stripe());
    let queues = claimonce::Queues::new(
        Some(claimonce::jobs::Spill::new(queue, Duration::from_secs(1))),
        None,
    );
    let (body, _) = signed_invoice(0);
    let signature = claimonce_tests::sign::stripe_header(
        claimonce_tests::sign::STRIPE_SECRET,
        now(),
        body.as_bytes(),
    );
    let event = json!({"Records": [spilled_record(
        "m-1",
        &body,
        &[("stripe-signature", &signature)],
        "arn:aws:sqs:us-east-1:123456789012:spill",
    )]})
    .to_string();
    let refused = claimonce::lambda::handle_event(&receiver, &event).await;
    assert_eq!(refused.status(), 400);
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 0);
    // The same event as an invocation is drained: the delivery is applied.
    let drained = serde_json::to_value(
        claimonce::lambda::handle_invocation(&receiver, &queues, &event).await,
    )
    .expect("JSON");
    assert_eq!(drained, json!({"batchItemFailures": []}));
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 1);
}

/// A delivery's own failure is not an outage: an effect that raises (a trigger on the
/// customers table, SQLSTATE P0001) and a login refused its effect function (42501) are each
/// answered 500 with the error in the delivery line, nothing written and nothing queued.
#[tokio::test]
async fn a_delivery_s_own_failure_is_answered_500_and_never_spilled() {
    let StripeSpilling {
        moto,
        sqs,
        db,
        queue,
        outage: _up,
        through,
        ..
    } = StripeSpilling::new("own-failure", "5").await;
    let f = function("stripe");
    let function = start(f, &through, &queue, &moto.url).await;
    let admin = db.client().await;
    for (fault, sqlstate, undo) in [
        (
            "CREATE FUNCTION refuse_credit() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN RAISE EXCEPTION 'refused by the test'; END $$; \
             CREATE TRIGGER refuse_credit BEFORE INSERT OR UPDATE ON customers \
             FOR EACH ROW EXECUTE FUNCTION refuse_credit();",
            "P0001",
            "DROP TRIGGER refuse_credit ON customers; DROP FUNCTION refuse_credit();",
        ),
        (
            "REVOKE EXECUTE ON FUNCTION stripe_credit_v1(text, text, bigint) FROM claimonce_stripe",
            "42501",
            "GRANT EXECUTE ON FUNCTION stripe_credit_v1(text, text, bigint) TO claimonce_stripe",
        ),
    ] {
        admin.batch_execute(fault).await.expect("the fault");
        let answer = function
            .invoke(&signed(&sample("stripe/invoice.paid.json")))
            .await;
        let line = function.deliveries().pop().expect("a delivery line");
        assert_eq!(answer["statusCode"], 500, "{sqlstate}: {answer} {line}");
        assert!(
            line["error"].as_str().is_some_and(|e| e.contains(sqlstate)),
            "the statement ran and failed with {sqlstate}: {line}"
        );
        assert_eq!(line["disposition"], "error", "{line}");
        assert_eq!(depth(&sqs, &queue).await, 0, "{sqlstate}: nothing queued");
        assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 0);
        admin.batch_execute(undo).await.expect("undo the fault");
    }
    // The sender's retry, with the cause fixed, is applied.
    let answer = function
        .invoke(&signed(&sample("stripe/invoice.paid.json")))
        .await;
    assert_eq!(payload_outcome(&answer), (200, "processed".into()));
}

/// A database slow for most of the delivery's deadline is not spilled: the statement held
/// at the database for two thirds of a 1.5 s deadline, then let through, is processed and
/// nothing is queued. Another invoice, not processed before, held past the deadline is spilled
/// (200 `queued`); its held statement may still commit once let through, and the drain then
/// finds it a duplicate or applies it: either way it is credited once.
#[tokio::test]
async fn a_database_slow_for_most_of_the_deadline_is_not_spilled_and_one_slow_past_it_is() {
    let StripeSpilling {
        moto,
        sqs,
        db,
        queue,
        outage,
        through,
        ..
    } = StripeSpilling::new("slower", "5").await;
    let f = function("stripe");
    let deadline = Duration::from_millis(1500);
    let function = std::sync::Arc::new(
        start_with(
            f,
            &through,
            &queue,
            &moto.url,
            &[("DB_DELIVERY_TIMEOUT_MS", "1500")],
        )
        .await,
    );
    let mut warm = sample_event("stripe/checkout.session.completed.json");
    resign(&mut warm, now()).expect("sign");
    assert_eq!(
        payload_outcome(&function.invoke(&warm).await),
        (200, "processed".into())
    );
    let invoice = signed(&sample("stripe/invoice.paid.json"));
    // The second delivery is an event of its own, so that what it applies is seen.
    let late = {
        let mut event = invoice.clone();
        let mut body: Value =
            serde_json::from_str(event["body"].as_str().expect("a body")).expect("JSON");
        body["id"] = json!("evt_slow_past_the_deadline");
        body["data"]["object"]["customer"] = json!("cus_SlowPastTheDeadline");
        event["body"] = json!(body.to_string());
        resign(&mut event, now()).expect("sign");
        event
    };
    for (held_for, expected, event) in [
        (deadline * 2 / 3, "processed", &invoice),
        (deadline * 3, "queued", &late),
    ] {
        outage.hold();
        let sent = tokio::time::Instant::now();
        let delivery = {
            let (function, event) = (std::sync::Arc::clone(&function), event.clone());
            tokio::spawn(async move { function.invoke(&event).await })
        };
        claimonce_tests::until("the statement is held at the database", || {
            outage.waiting() > 0
        })
        .await;
        if expected == "processed" {
            // The moment under test: the database answers after most of the deadline.
            tokio::time::sleep_until(sent + held_for).await;
            outage.release();
            let answer = delivery.await.expect("the delivery");
            assert_eq!(payload_outcome(&answer), (200, expected.into()));
            assert_eq!(depth(&sqs, &queue).await, 0, "nothing queued");
        } else {
            // The deadline passes while the statement is held: answered before the release.
            let answer = delivery.await.expect("the delivery");
            assert_eq!(payload_outcome(&answer), (200, expected.into()));
            assert_eq!(depth(&sqs, &queue).await, 1, "the delivery is on the queue");
            outage.release();
        }
    }
    // The queued one drained: applied (or found applied by its held statement), once.
    let (received, failed) = function.drain_once(&sqs, &queue).await;
    assert_eq!((received, failed), (1, 0), "the queued delivery drained");
    assert_eq!(depth(&sqs, &queue).await, 0);
    let invoices = "SELECT count(*) FROM processed_events WHERE event_type = 'invoice.paid'";
    assert_eq!(db.count(invoices).await, 2, "each invoice once");
    let paid: Value = serde_json::from_str(late["body"].as_str().expect("a body")).expect("JSON");
    assert_eq!(
        db.count(
            "SELECT credit_balance_cents FROM customers \
             WHERE stripe_customer_id = 'cus_SlowPastTheDeadline'"
        )
        .await,
        paid["data"]["object"]["amount_paid"]
            .as_i64()
            .expect("an amount"),
        "the late invoice credited once"
    );
}

/// SQS refusing and SQS hanging, with the database down, told apart and each bounded: a
/// queue endpoint that closes every connection gives `not queued: SQS SendMessage: ...`, one
/// that accepts and never answers gives `not queued: SQS SendMessage timed out after 1000 ms`,
/// the `SPILL_TIMEOUT_MS` it was given and no other; both are answered 500, and each endpoint
/// was tried.
#[tokio::test]
async fn sqs_refusing_and_sqs_hanging_are_told_apart_and_each_is_a_500() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let db = TestDb::new().await;
    let f = function("stripe");
    let (outage, through) = Outage::in_front_of(&db.function_url_as("stripe"))
        .await
        .expect("the forwarder");
    outage.down().await;
    // The refusing endpoint gets a bound long enough for the SDK's own retries to end first.
    for (hangs, expected, bound) in [
        (false, "not queued: SQS SendMessage: ", "10000"),
        (
            true,
            "not queued: SQS SendMessage timed out after 1000 ms (SPILL_TIMEOUT_MS)",
            "1000",
        ),
    ] {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let endpoint = format!("http://{}", listener.local_addr().expect("addr"));
        let tried = std::sync::Arc::new(AtomicUsize::new(0));
        let counter = std::sync::Arc::clone(&tried);
        let server = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                if hangs {
                    held.push(socket);
                }
            }
        });
        let queue = format!("{endpoint}/123456789012/spill");
        let function = start_with(
            f,
            &through,
            &queue,
            &endpoint,
            &[("SPILL_TIMEOUT_MS", bound)],
        )
        .await;
        let answer = function
            .invoke(&signed(&sample("stripe/invoice.paid.json")))
            .await;
        assert_eq!(answer["statusCode"], 500, "{answer}");
        let line = function.deliveries().pop().expect("a delivery line");
        assert!(
            line["error"].as_str().is_some_and(|e| e.contains(expected)),
            "{expected}: {line}"
        );
        assert!(tried.load(Ordering::SeqCst) > 0, "the queue was tried");
        server.abort();
    }
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 0);
}
