//! Amazon EventBridge as an entry point (`claimonce::bridge`), with the real binaries: each
//! function under the Runtime API emulator, given its partner event source and event queue,
//! invoked as Lambda's event source mapping invokes it with the queue's records, beside its
//! webhook path, against one database.

use std::time::Duration;

use claimonce_local::bridge::{function_env, queue_arn, sqs_event};
use claimonce_local::sign::resign;
use claimonce_tests::TestDb;
use claimonce_tests::apigw::payload_outcome;
use claimonce_tests::lambda::{Scheduled, function, sample_event};
use claimonce_tests::outage::Outage;
use claimonce_tests::sign::now;
use serde_json::{Value, json};

/// Stripe's partner event source in the samples.
pub(crate) const STRIPE_SOURCE: &str = "aws.partner/stripe.com/ed_test_claimonce_local";
/// Shopify's.
const SHOPIFY_SOURCE: &str = "aws.partner/shopify.com/1234567/claimonce-local";

/// A provider's function taking `source`'s events (none when `None`), its log lines kept.
pub(crate) struct Bridging(Scheduled);

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
        let bridge = source
            .map(|s| function_env(provider, s))
            .unwrap_or_default();
        let mut env = vec![
            ("DATABASE_URL", database_url),
            (f.secret_var, f.dev_secret),
            ("DB_CONNECT_TIMEOUT_MS", "1000"),
        ];
        env.extend(bridge.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        env.extend_from_slice(extra);
        Self(Scheduled::start(f.binary, &env).await)
    }

    pub(crate) async fn invoke(&self, event: &Value) -> Value {
        self.0
            .run_within(event, Duration::from_secs(30))
            .await
            .expect("the function answers")
    }

    /// Hands `events` to the function as a batch of its event queue, each on its `receive`th
    /// receive; the ids reported failed.
    pub(crate) async fn take(
        &self,
        provider: &str,
        events: &[(&str, &Value)],
        receive: u32,
    ) -> Vec<String> {
        self.take_from(&queue_arn(provider), events, receive).await
    }

    async fn take_from(&self, arn: &str, events: &[(&str, &Value)], receive: u32) -> Vec<String> {
        let answer = self.invoke(&sqs_event(arn, events, receive)).await;
        answer["batchItemFailures"]
            .as_array()
            .unwrap_or_else(|| panic!("a batch response: {answer}"))
            .iter()
            .map(|f| f["itemIdentifier"].as_str().expect("an id").to_owned())
            .collect()
    }

    pub(crate) fn lines(&self, message: &str) -> Vec<Value> {
        self.0.lines(message)
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
    assert!(f.take("stripe", &[("m-1", &twin)], 1).await.is_empty());
    assert_eq!(credit(&db).await, 2000);

    let sample = sample_event("stripe/eventbridge/invoice.paid.json");
    assert!(f.take("stripe", &[("m-2", &sample)], 1).await.is_empty());
    assert!(f.take("stripe", &[("m-2", &sample)], 2).await.is_empty());
    assert_eq!(
        payload_outcome(&f.invoke(&stripe_webhook_of(&sample["detail"])).await),
        (200, "duplicate".into())
    );

    assert_eq!(f.bridged(), ["duplicate", "processed", "duplicate"]);
    let line = &f.lines("bridged")[1];
    assert_eq!(line["event_id"], sample["detail"]["id"]);
    assert_eq!(line["eventbridge_id"], sample["id"]);
    assert_eq!(line["sqs_message_id"], "m-2");
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
    other_account["account"] = json!("123456789012");
    let mut not_stripe = genuine.clone();
    not_stripe["detail"] = json!({"object": "event", "type": "invoice.paid"});
    for (id, event) in [
        ("other source", &other_source),
        ("other account", &other_account),
        ("not a Stripe event", &not_stripe),
    ] {
        assert_eq!(f.take("stripe", &[(id, event)], 1).await, [id], "{id}");
    }
    let other_queue = queue_arn("stripe").replace("-events", "-spill");
    assert_eq!(
        f.take_from(&other_queue, &[("other queue", &genuine)], 1)
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
        without
            .take("stripe", &[("unconfigured", &genuine)], 1)
            .await,
        ["unconfigured"]
    );
    assert!(without.bridged().is_empty());
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 0);
    assert_eq!(credit(&db).await, 0);
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
    assert_eq!(f.take("stripe", &[("m-1", &sample)], 1).await, ["m-1"]);
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
    assert!(f.take("stripe", &[("m-1", &sample)], 2).await.is_empty());
    let dead = claimonce_local::bridge::dead_letter_arn("stripe");
    assert!(f.take_from(&dead, &[("m-1", &sample)], 1).await.is_empty());
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
    assert!(f.take("shopify", &[("m-1", &sample)], 1).await.is_empty());
    assert!(f.take("shopify", &[("m-1", &sample)], 2).await.is_empty());
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

/// `sam local` gives each EventBridge provider's function the partner source and the event
/// queue the local run gives it (events/sam-env.json, rendered by scripts/template), so the
/// SAM check's EventBridge record is one the function takes.
#[test]
fn sam_local_s_event_queue_is_the_local_runs() {
    let text = std::fs::read_to_string(
        claimonce_local::functions::workspace_root().join("events/sam-env.json"),
    )
    .expect("events/sam-env.json");
    let env: Value = serde_json::from_str(&text).expect("JSON");
    for (name, provider) in [("StripeFunction", "stripe"), ("ShopifyFunction", "shopify")] {
        let source = claimonce_local::bridge::local_source(function(provider));
        let var = claimonce::bridge::Bridge::source_var(provider);
        assert_eq!(env[name][&var].as_str(), source.as_deref(), "{name}");
        assert_eq!(env[name]["EVENT_QUEUE_ARN"], queue_arn(provider), "{name}");
        assert_eq!(
            env[name]["EVENT_DEAD_LETTER_QUEUE_ARN"],
            claimonce_local::bridge::dead_letter_arn(provider),
            "{name}"
        );
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
    let f = function("stripe");
    let url = db.function_url_as("stripe");
    let bridge = function_env("stripe", STRIPE_SOURCE);
    let mut env = vec![
        ("DATABASE_URL", url.as_str()),
        ("DB_CONNECT_TIMEOUT_MS", "1000"),
    ];
    env.extend(bridge.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let only = Bridging(Scheduled::start(f.binary, &env).await);

    let sample = sample_event("stripe/eventbridge/invoice.paid.json");
    assert!(only.take("stripe", &[("m-1", &sample)], 1).await.is_empty());
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
