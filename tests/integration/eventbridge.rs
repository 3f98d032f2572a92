//! Amazon EventBridge as an entry point (`shared/src/bridge.rs`), with the real binaries: each
//! function under the Runtime API emulator, given its partner event source and its event queue
//! in moto's SQS, handed what it took from the queue as Lambda's event source mapping hands it
//! over, beside its webhook path, against one database.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use claimonce_local::bridge::EventQueues;
use claimonce_local::sign::resign;
use claimonce_tests::TestDb;
use claimonce_tests::apigw::payload_outcome;
use claimonce_tests::lambda::{Scheduled, function, sample_event};
use claimonce_tests::moto::moto;
use claimonce_tests::outage::Outage;
use claimonce_tests::sign::now;
use serde_json::{Value, json};

/// Stripe's partner event source in the samples.
pub(crate) const STRIPE_SOURCE: &str = "aws.partner/stripe.com/ed_test_claimonce_local";
/// Shopify's.
pub(crate) const SHOPIFY_SOURCE: &str = "aws.partner/shopify.com/1234567/claimonce-local";

/// A provider's function taking `source`'s events (none when `None`) from event queues of its
/// own in moto's SQS, its log lines kept. Tests name the messages they send by a label.
pub(crate) struct Bridging {
    f: Scheduled,
    queues: EventQueues,
    /// Each label's last message: its queue, its id, and its receipt handle while it is on
    /// the queue (reported failed), none once it was deleted.
    sent: Mutex<HashMap<String, Sent>>,
}

#[derive(Clone)]
struct Sent {
    queue: String,
    message_id: String,
    receipt_handle: Option<String>,
}

/// Event queues no other test uses.
pub(crate) async fn fresh_queues(provider: &str) -> EventQueues {
    static QUEUES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = QUEUES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let prefix = format!("t{}-{n}-{provider}", std::process::id());
    EventQueues::create(&moto().await.url, &prefix, 30)
        .await
        .expect("the event queues")
}

impl Bridging {
    pub(crate) async fn start(provider: &str, database_url: &str, source: Option<&str>) -> Self {
        Self::start_with(provider, database_url, source, &[]).await
    }

    /// [`Bridging::start`] with `extra` variables.
    pub(crate) async fn start_with(
        provider: &str,
        database_url: &str,
        source: Option<&str>,
        extra: &[(&str, &str)],
    ) -> Self {
        let f = function(provider);
        let mut env = vec![(f.secret_var, f.dev_secret)];
        env.extend_from_slice(extra);
        Self::spawn(provider, database_url, source, &env).await
    }

    /// `provider`'s function on `database_url` with `env`, and with `source`, its event queues.
    async fn spawn(
        provider: &str,
        database_url: &str,
        source: Option<&str>,
        env: &[(&str, &str)],
    ) -> Self {
        let queues = fresh_queues(provider).await;
        let bridge = source
            .map(|s| queues.function_env(provider, s))
            .unwrap_or_default();
        let mut all = vec![
            ("DATABASE_URL", database_url),
            ("DB_CONNECT_TIMEOUT_MS", "1000"),
        ];
        all.extend(bridge.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        all.extend_from_slice(env);
        Self {
            f: Scheduled::start(function(provider).binary, &all).await,
            queues,
            sent: Mutex::default(),
        }
    }

    pub(crate) async fn invoke(&self, event: &Value) -> Value {
        self.f
            .run_within(event, Duration::from_secs(30))
            .await
            .expect("the function answers")
    }

    /// Puts `events` on the function's event queue, as EventBridge's rule does, and hands
    /// them to it as the event source mapping does; the labels of those it reported failed. A
    /// label whose message is still on the queue (reported failed before) is received again
    /// rather than sent again; one whose message was deleted is sent again, as EventBridge
    /// delivers an event twice.
    pub(crate) async fn take(&self, events: &[(&str, &Value)]) -> Vec<String> {
        self.take_from(&self.queues.url, events).await
    }

    /// [`Bridging::take`] from the queue at `queue`.
    async fn take_from(&self, queue: &str, events: &[(&str, &Value)]) -> Vec<String> {
        let sqs = self.queues.sqs();
        let mut ids = Vec::new();
        for (label, event) in events {
            let known = self.sent.lock().expect("sent").get(*label).cloned();
            let id = match known {
                Some(Sent {
                    queue: q,
                    message_id,
                    receipt_handle: Some(handle),
                }) if q == queue => {
                    sqs.change_message_visibility()
                        .queue_url(queue)
                        .receipt_handle(handle)
                        .visibility_timeout(0)
                        .send()
                        .await
                        .expect("visible again");
                    message_id
                }
                _ => self.queues.send(queue, event).await.expect("sent"),
            };
            self.sent.lock().expect("sent").insert(
                (*label).to_owned(),
                Sent {
                    queue: queue.to_owned(),
                    message_id: id.clone(),
                    receipt_handle: None,
                },
            );
            ids.push(id);
        }
        let messages = self.queues.receive(queue, &ids).await.expect("received");
        let answer = self
            .invoke(&claimonce_local::spill::sqs_event(queue, &messages))
            .await;
        let failed = claimonce_tests::lambda::failed_items(&answer);
        let labels = self.note(&messages, &failed);
        for m in &messages {
            if !failed.contains(&m.message_id().unwrap_or_default()) {
                claimonce_local::spill::delete(sqs, queue, m)
                    .await
                    .expect("deleted");
            }
        }
        labels
    }

    /// Notes which of `messages` were reported `failed` (still on the queue, by the receipt
    /// handle they were received with) and which are deleted; the labels of the failed ones.
    fn note(&self, messages: &[aws_sdk_sqs::types::Message], failed: &[&str]) -> Vec<String> {
        let mut labels = Vec::new();
        let mut sent = self.sent.lock().expect("sent");
        for m in messages {
            let id = m.message_id().unwrap_or_default();
            let label = sent
                .iter()
                .find(|(_, s)| s.message_id == id)
                .map(|(l, _)| l.clone())
                .unwrap_or_else(|| id.to_owned());
            if failed.contains(&id) {
                labels.push(label.clone());
                if let Some(s) = sent.get_mut(&label) {
                    s.receipt_handle = m.receipt_handle().map(str::to_owned);
                }
            } else if let Some(s) = sent.get_mut(&label) {
                // Deleted by the caller: taken again, it is sent again.
                s.receipt_handle = None;
            }
        }
        labels
    }

    /// The SQS message id of `label`'s last message.
    fn message_id(&self, label: &str) -> Option<String> {
        self.sent
            .lock()
            .expect("sent")
            .get(label)
            .map(|s| s.message_id.clone())
    }

    pub(crate) fn lines(&self, message: &str) -> Vec<Value> {
        self.f.lines(message)
    }

    /// The dispositions of its `bridged` lines, in order.
    pub(crate) fn bridged(&self) -> Vec<String> {
        self.lines("bridged")
            .iter()
            .map(|l| l["disposition"].as_str().unwrap_or_default().to_owned())
            .collect()
    }
}

/// The sample's API Gateway event, signed now.
fn signed(relative: &str) -> Value {
    let mut event = sample_event(relative);
    resign(&mut event, now()).expect("sign");
    event
}

/// An API Gateway event carrying `body` to Stripe's route, signed now.
pub(crate) fn stripe_webhook_of(body: &Value) -> Value {
    let mut event = sample_event("stripe/invoice.paid.json");
    event["body"] = Value::from(body.to_string());
    resign(&mut event, now()).expect("sign");
    event
}

/// An EventBridge event of Stripe's partner source in the local account carrying `detail`.
pub(crate) fn stripe_bridged(detail: &Value) -> Value {
    let mut event = sample_event("stripe/eventbridge/invoice.paid.json");
    event["detail-type"] = detail["type"].clone();
    event["detail"] = detail.clone();
    event
}

/// The credit on the sample customer, in cents.
pub(crate) async fn credit(db: &TestDb) -> i64 {
    db.count("SELECT coalesce(sum(credit_balance_cents), 0)::bigint FROM customers")
        .await
}

/// One Stripe event by webhook and by EventBridge is claimed once, whichever comes first: the
/// webhook's `invoice.paid`, then the same event through the event queue (a duplicate); the
/// EventBridge sample, again on a second receive (EventBridge's or SQS's redelivery), then the
/// same event by webhook (a duplicate). Two ledger rows, each credit once.
#[tokio::test]
async fn a_stripe_event_by_webhook_and_by_eventbridge_is_applied_once() {
    let db = TestDb::new().await;
    let f = Bridging::start("stripe", &db.function_url_as("stripe"), Some(STRIPE_SOURCE)).await;

    let webhook = signed("stripe/invoice.paid.json");
    let by_webhook: Value =
        serde_json::from_str(webhook["body"].as_str().expect("a text body")).expect("JSON");
    assert_eq!(
        payload_outcome(&f.invoke(&webhook).await),
        (200, "processed".into())
    );
    let twin = stripe_bridged(&by_webhook);
    assert!(f.take(&[("m-1", &twin)]).await.is_empty());
    assert_eq!(credit(&db).await, 2000);

    let sample = sample_event("stripe/eventbridge/invoice.paid.json");
    assert!(f.take(&[("m-2", &sample)]).await.is_empty());
    assert!(f.take(&[("m-2", &sample)]).await.is_empty());
    assert_eq!(
        payload_outcome(&f.invoke(&stripe_webhook_of(&sample["detail"])).await),
        (200, "duplicate".into())
    );

    assert_eq!(f.bridged(), ["duplicate", "processed", "duplicate"]);
    let line = &f.lines("bridged")[1];
    assert_eq!(line["event_id"], sample["detail"]["id"]);
    assert_eq!(line["eventbridge_id"], sample["id"]);
    let again = &f.lines("bridged")[2];
    assert_eq!(
        again["sqs_message_id"].as_str(),
        f.message_id("m-2").as_deref()
    );
    assert_ne!(
        line["sqs_message_id"], again["sqs_message_id"],
        "sent twice"
    );
    assert_eq!(
        db.count("SELECT count(*) FROM processed_events WHERE provider = 'stripe'")
            .await,
        2
    );
    assert_eq!(credit(&db).await, 2000 + 700);
}

/// Only an event of the configured partner source, in the event queue's account, from the
/// event queue, is applied: one of another source, of another account, from another queue,
/// or whose detail is not a Stripe event is reported failed and writes nothing, and a
/// function given no `STRIPE_EVENT_SOURCE` takes none at all. Each says why on its line.
#[tokio::test]
async fn an_event_not_of_its_source_account_or_queue_is_never_applied() {
    let db = TestDb::new().await;
    let url = db.function_url_as("stripe");
    let f = Bridging::start("stripe", &url, Some(STRIPE_SOURCE)).await;
    let genuine = sample_event("stripe/eventbridge/invoice.paid.json");
    let mut other_source = genuine.clone();
    other_source["source"] = json!("aws.partner/stripe.com/ed_test_someone_else");
    let mut other_account = genuine.clone();
    other_account["account"] = json!("210987654321");
    let mut not_stripe = genuine.clone();
    not_stripe["detail"] = json!({"object": "event", "type": "invoice.paid"});
    for (id, event) in [
        ("other source", &other_source),
        ("other account", &other_account),
        ("not a Stripe event", &not_stripe),
    ] {
        assert_eq!(f.take(&[(id, event)]).await, [id], "{id}");
    }
    let other_queue = claimonce_local::spill::create_queue(
        f.queues.sqs(),
        &format!("t{}-other-queue", std::process::id()),
        &[],
    )
    .await
    .expect("another queue");
    assert_eq!(
        f.take_from(&other_queue, &[("other queue", &genuine)])
            .await,
        ["other queue"]
    );
    let errors: Vec<String> = f
        .lines("bridged")
        .iter()
        .map(|l| l["error"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(errors[0].contains("source"), "{errors:?}");
    assert!(errors[1].contains("account"), "{errors:?}");
    assert!(errors[2].contains("does not parse"), "{errors:?}");
    assert_eq!(
        f.lines("drained").len(),
        1,
        "another queue's record is not bridged"
    );

    let without = Bridging::start("stripe", &url, None).await;
    assert_eq!(
        without.take(&[("unconfigured", &genuine)]).await,
        ["unconfigured"]
    );
    assert!(without.bridged().is_empty());
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 0);
    assert_eq!(credit(&db).await, 0);
}

/// A record SQS never handed out is never applied, whatever its fields say: a direct invoke
/// with the event queue's ARN and a genuine envelope, but a made-up receipt handle, none, the
/// real handle of a message received from another queue, or that of a past receive of a
/// message now visible again (moto's server refuses it as SQS does), is reported failed, its line
/// naming SQS's refusal (the queue was asked), and writes nothing. The same event put on the
/// queue and received from it is applied.
#[tokio::test]
async fn a_record_sqs_never_handed_out_applies_nothing() {
    let db = TestDb::new().await;
    let f = Bridging::start("stripe", &db.function_url_as("stripe"), Some(STRIPE_SOURCE)).await;
    let event = sample_event("stripe/eventbridge/invoice.paid.json");
    let sqs = f.queues.sqs();
    let other = claimonce_local::spill::create_queue(
        sqs,
        &format!("t{}-elsewhere", std::process::id()),
        &[],
    )
    .await
    .expect("another queue");
    let id = f.queues.send(&other, &event).await.expect("sent");
    let elsewhere = f.queues.receive(&other, &[id]).await.expect("received");
    let elsewhere = elsewhere[0].receipt_handle().expect("a handle");
    // A message of the event queue itself, received and then visible again (its visibility
    // ended): the handle of that past receive proves nothing now.
    let id = f.queues.send(&f.queues.url, &event).await.expect("sent");
    let stale = f
        .queues
        .receive(&f.queues.url, &[id])
        .await
        .expect("received");
    let stale = stale[0].receipt_handle().expect("a handle").to_owned();
    sqs.change_message_visibility()
        .queue_url(&f.queues.url)
        .receipt_handle(&stale)
        .visibility_timeout(0)
        .send()
        .await
        .expect("visible again");
    let arn = claimonce_local::spill::queue_arn(&f.queues.url);
    let record = |id: &str, handle: Option<&str>| {
        let mut record = json!({"messageId": id, "body": event.to_string(),
            "attributes": {"ApproximateReceiveCount": "1"}, "messageAttributes": {},
            "eventSource": "aws:sqs", "eventSourceARN": arn});
        if let Some(handle) = handle {
            record["receiptHandle"] = json!(handle);
        }
        record
    };
    let forged = json!({"Records": [
        record("made-up", Some("AQEBmadeUpByAnInvokerWhoReceivedNothing==")),
        record("none", None),
        record("another queue's", Some(elsewhere)),
        record("handed out again", Some(&stale)),
    ]});
    let answer = f.invoke(&forged).await;
    let failed = claimonce_tests::lambda::failed_items(&answer);
    assert_eq!(
        failed,
        ["made-up", "none", "another queue's", "handed out again"]
    );
    let errors: Vec<String> = f
        .lines("bridged")
        .iter()
        .map(|l| l["error"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(errors.len(), 4, "{errors:?}");
    for (i, why) in [
        (0, "ReceiptHandleIsInvalid"),
        (1, "no receipt handle"),
        (2, "ReceiptHandleIsInvalid"),
        (3, "MessageNotInflight"),
    ] {
        assert!(errors[i].contains("not proven"), "{errors:?}");
        assert!(errors[i].contains(why), "{i}: {errors:?}");
    }
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 0);
    assert_eq!(credit(&db).await, 0);
    sqs.delete_message()
        .queue_url(&f.queues.url)
        .receipt_handle(&stale)
        .send()
        .await
        .expect("the stale message gone");

    assert!(f.take(&[("received", &event)]).await.is_empty());
    assert_eq!(
        f.bridged(),
        ["error", "error", "error", "error", "processed"]
    );
    assert_eq!(credit(&db).await, 700);
}

/// A batch that names one receipt handle twice (a record received from the event queue, and a
/// forged twin carrying its handle and queue but another event) applies neither: which of the
/// two is genuine cannot be told, so every record sharing a handle is reported failed, without
/// asking SQS, its line saying so. The genuine message, left in flight, comes back from the
/// queue (here made visible at once, as its visibility timeout would) and is applied alone.
#[tokio::test]
async fn a_batch_naming_one_receipt_handle_twice_applies_neither_record() {
    let db = TestDb::new().await;
    let f = Bridging::start("stripe", &db.function_url_as("stripe"), Some(STRIPE_SOURCE)).await;
    let event = sample_event("stripe/eventbridge/invoice.paid.json");
    let sqs = f.queues.sqs();
    let id = f.queues.send(&f.queues.url, &event).await.expect("sent");
    let received = f
        .queues
        .receive(&f.queues.url, std::slice::from_ref(&id))
        .await
        .expect("received");
    let handle = received[0].receipt_handle().expect("a handle").to_owned();
    let mut batch = claimonce_local::spill::sqs_event(&f.queues.url, &received);
    let mut detail = event["detail"].clone();
    detail["id"] = json!("evt_forged_twin");
    let mut twin = batch["Records"][0].clone();
    twin["messageId"] = json!("forged twin");
    twin["body"] = json!(stripe_bridged(&detail).to_string());
    batch["Records"]
        .as_array_mut()
        .expect("the records")
        .push(twin);
    let answer = f.invoke(&batch).await;
    assert_eq!(
        claimonce_tests::lambda::failed_items(&answer),
        [id.as_str(), "forged twin"]
    );
    let errors: Vec<String> = f
        .lines("bridged")
        .iter()
        .map(|l| l["error"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(errors.len(), 2, "{errors:?}");
    for why in &errors {
        assert!(
            why.contains("not proven") && why.contains("receipt handle is repeated"),
            "{errors:?}"
        );
        assert!(!why.contains(&handle), "the handle is never written: {why}");
    }
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 0);
    assert_eq!(credit(&db).await, 0);

    sqs.change_message_visibility()
        .queue_url(&f.queues.url)
        .receipt_handle(&handle)
        .visibility_timeout(0)
        .send()
        .await
        .expect("still in flight: the batch asked nothing of it");
    let again = f
        .queues
        .receive(&f.queues.url, &[id])
        .await
        .expect("received again");
    let answer = f
        .invoke(&claimonce_local::spill::sqs_event(&f.queues.url, &again))
        .await;
    assert!(claimonce_tests::lambda::failed_items(&answer).is_empty());
    assert_eq!(f.bridged(), ["error", "error", "processed"]);
    assert_eq!(
        db.count("SELECT count(*) FROM processed_events WHERE event_id = 'evt_forged_twin'")
            .await,
        0
    );
    assert_eq!(credit(&db).await, 700);
}

/// The receipt proof leaves a record in flight for its queue's own visibility timeout, so a
/// record reported failed comes back when it would have without the proof. The event queue's
/// timeout is set to 2 s and the message received for 600 s; once the function has proven it
/// (and applied it, the message left undeleted), it is not visible at once, and it is handed
/// out again within the queue's 2 s, long before the receive's 600 s or a fixed timeout of its
/// own would let it.
#[tokio::test]
async fn the_receipt_proof_keeps_the_queue_s_own_visibility_timeout() {
    use aws_sdk_sqs::types::QueueAttributeName;
    let db = TestDb::new().await;
    let f = Bridging::start("stripe", &db.function_url_as("stripe"), Some(STRIPE_SOURCE)).await;
    let sqs = f.queues.sqs();
    sqs.set_queue_attributes()
        .queue_url(&f.queues.url)
        .attributes(QueueAttributeName::VisibilityTimeout, "2")
        .send()
        .await
        .expect("the queue's visibility timeout");
    let event = sample_event("stripe/eventbridge/invoice.paid.json");
    f.queues.send(&f.queues.url, &event).await.expect("sent");
    let received = claimonce_local::spill::receive(sqs, &f.queues.url, Some(600), 0)
        .await
        .expect("received");
    assert_eq!(received.len(), 1);
    let answer = f
        .invoke(&claimonce_local::spill::sqs_event(&f.queues.url, &received))
        .await;
    assert!(claimonce_tests::lambda::failed_items(&answer).is_empty());
    assert_eq!(f.bridged(), ["processed"], "proven, then applied");
    let at_once = claimonce_local::spill::receive(sqs, &f.queues.url, Some(0), 0)
        .await
        .expect("a receive");
    assert!(at_once.is_empty(), "still in flight after the proof");
    let again = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let messages = claimonce_local::spill::receive(sqs, &f.queues.url, Some(600), 1)
                .await
                .expect("a receive");
            if !messages.is_empty() {
                return messages;
            }
        }
    })
    .await
    .expect("handed out again after the queue's own visibility timeout");
    assert_eq!(again[0].message_id(), received[0].message_id());
}

/// An event the database cannot take is reported failed, so the queue hands it out again,
/// and applied once when it is: the first receive finds the database out (its line says so,
/// nothing is written), the second applies it, a third, from the dead-letter queue (its event
/// source turned on by an operator), is a duplicate.
#[tokio::test]
async fn a_bridged_event_the_database_cannot_take_is_received_again_and_applied_once() {
    let db = TestDb::new().await;
    let (outage, through) = Outage::in_front_of(&db.function_url_as("stripe"))
        .await
        .expect("the forwarder");
    let f = Bridging::start("stripe", &through, Some(STRIPE_SOURCE)).await;
    let sample = sample_event("stripe/eventbridge/invoice.paid.json");
    outage.down().await;
    assert_eq!(f.take(&[("m-1", &sample)]).await, ["m-1"]);
    let failed = &f.lines("bridged")[0];
    assert_eq!(failed["disposition"], "error");
    assert!(
        failed["error"]
            .as_str()
            .is_some_and(|e| e.contains("unavailable") || e.contains("connect")),
        "{failed}"
    );
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 0);
    outage.up().await.expect("the forwarder back");
    assert!(f.take(&[("m-1", &sample)]).await.is_empty());
    let dead = f.queues.dead_letter_url.clone();
    assert!(f.take_from(&dead, &[("m-1", &sample)]).await.is_empty());
    assert_eq!(f.bridged(), ["error", "processed", "duplicate"]);
    assert_eq!(credit(&db).await, 700);
}

/// A Shopify webhook through EventBridge: the order in `payload` is kept, with the topic and
/// webhook id from `metadata`, and a redelivery is a duplicate that adds no timeline row. The
/// same order version delivered by webhook too (Shopify's ledger key is the body's hash, so a
/// claim of its own) changes nothing: the order as it was, still one timeline row.
#[tokio::test]
async fn a_shopify_order_through_eventbridge_is_kept_once() {
    let db = TestDb::new().await;
    let f = Bridging::start(
        "shopify",
        &db.function_url_as("shopify"),
        Some(SHOPIFY_SOURCE),
    )
    .await;
    let sample = sample_event("shopify/eventbridge/orders.updated.json");
    assert!(f.take(&[("m-1", &sample)]).await.is_empty());
    assert!(f.take(&[("m-1", &sample)]).await.is_empty());
    assert_eq!(f.bridged(), ["processed", "duplicate"]);
    assert_eq!(
        f.lines("bridged")[0]["delivery_id"],
        sample["detail"]["metadata"]["X-Shopify-Webhook-Id"]
    );
    let order = sample["detail"]["payload"]["id"].as_i64().expect("an id");
    assert_eq!(
        db.count(&format!(
            "SELECT count(*) FROM shopify_orders WHERE order_id = {order} \
             AND source_updated_at = '2026-11-30T11:00:00-05:00'::timestamptz"
        ))
        .await,
        1
    );
    assert_eq!(
        db.count("SELECT count(*) FROM shopify_order_events").await,
        1
    );

    // Shopify's HTTP bytes of the payload, not EventBridge's JSON of it (here: the compact
    // form the record carries): the same order version, another ledger key.
    let mut webhook = sample_event("shopify/orders.create.json");
    let bytes = serde_json::to_string_pretty(&sample["detail"]["payload"]).expect("JSON");
    webhook["body"] = Value::from(bytes);
    webhook["headers"]["x-shopify-topic"] = sample["detail"]["metadata"]["X-Shopify-Topic"].clone();
    resign(&mut webhook, now()).expect("sign");
    assert_eq!(
        payload_outcome(&f.invoke(&webhook).await),
        (200, "processed".into())
    );
    assert_eq!(
        db.count("SELECT count(*) FROM processed_events WHERE provider = 'shopify'")
            .await,
        2,
        "two claims: the body's hash differs between the paths"
    );
    assert_eq!(
        db.count("SELECT count(*) FROM shopify_order_events").await,
        1,
        "one timeline row for the one version"
    );
    assert_eq!(
        db.count(&format!(
            "SELECT count(*) FROM shopify_orders WHERE order_id = {order} \
             AND source_updated_at = '2026-11-30T11:00:00-05:00'::timestamptz"
        ))
        .await,
        1
    );
}

/// `sam local` gives each EventBridge provider's function the partner source its samples name
/// and an event queue in their account (events/sam-env.json, rendered by scripts/template), so
/// that the SAM check's record is refused for its proof alone: the containers reach no SQS.
#[test]
fn sam_local_s_event_queue_is_in_the_samples_account() {
    let text = std::fs::read_to_string(
        claimonce_local::functions::workspace_root().join("events/sam-env.json"),
    )
    .expect("events/sam-env.json");
    let env: Value = serde_json::from_str(&text).expect("JSON");
    for (name, provider) in [("StripeFunction", "stripe"), ("ShopifyFunction", "shopify")] {
        let source = claimonce_local::bridge::local_source(function(provider));
        let var = claimonce::jobs::Bridge::source_var(provider);
        assert_eq!(env[name][&var].as_str(), source.as_deref(), "{name}");
        let sample = function(provider).eventbridge_samples()[0].clone();
        let sample: Value =
            serde_json::from_str(&std::fs::read_to_string(sample).expect("sample")).expect("JSON");
        let account = sample["account"].as_str().expect("an account");
        for var in ["EVENT_QUEUE_URL", "EVENT_DEAD_LETTER_QUEUE_URL"] {
            let url = env[name][var].as_str().unwrap_or_default();
            assert!(url.contains(&format!("/{account}/")), "{name} {var}: {url}");
        }
    }
}

/// A receiver whose sender delivers through EventBridge alone has no signing secret: it starts
/// without one when its partner source is configured, applies the source's events, and
/// refuses every webhook (nothing can be verified) without touching the database. (Without the
/// source the missing secret stops it at start, by name:
/// `lambda::a_binary_without_its_secret_stops_at_start_naming_the_variable`.)
#[tokio::test]
async fn a_receiver_with_eventbridge_alone_needs_no_secret_and_refuses_every_webhook() {
    let db = TestDb::new().await;
    let url = db.function_url_as("stripe");
    let only = Bridging::spawn("stripe", &url, Some(STRIPE_SOURCE), &[]).await;

    let sample = sample_event("stripe/eventbridge/invoice.paid.json");
    assert!(only.take(&[("m-1", &sample)]).await.is_empty());
    assert_eq!(only.bridged(), ["processed"]);
    assert_eq!(credit(&db).await, 700);

    let webhook = signed("stripe/invoice.paid.json");
    assert_eq!(
        payload_outcome(&only.invoke(&webhook).await),
        (400, "signature-mismatch".into())
    );
    assert_eq!(
        db.count("SELECT count(*) FROM processed_events").await,
        1,
        "the webhook wrote nothing"
    );
}
