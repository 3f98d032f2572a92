//! The Lambda boundary and hostile requests: every request that can never succeed is a clear
//! 4xx with a problem body, and none of them reaches the database: each receiver here talks
//! to the database through a [`WireProxy`], and every refused request is shown to open no
//! connection and send no byte through it.

use claimonce::Receiver;
use claimonce::log::Captured;
use claimonce_tests::TestDb;
use claimonce_tests::apigw::{payload_outcome, v1_event, v2_event};
use claimonce_tests::db::receiver_at;
use claimonce_tests::proxy::WireProxy;
use claimonce_tests::sign::{STRIPE_SECRET, invoice_paid, now, stripe, stripe_header};
use serde_json::{Value, json};
use stripe_webhook::Stripe;

const PATH: &str = "/webhooks/stripe";

/// A Stripe receiver whose database is reached only through a proxy that counts what it
/// carries. It has not connected yet: its first delivery that reaches the database does.
struct Watched {
    receiver: Receiver<Stripe>,
    logs: Captured,
    proxy: WireProxy,
}

impl Watched {
    async fn new(db: &TestDb) -> Self {
        let (proxy, url) = WireProxy::in_front_of(db.function_url()).await;
        let (receiver, logs) = receiver_at(&url, stripe());
        Self {
            receiver,
            logs,
            proxy,
        }
    }

    /// The response payload as the runtime sends it (serialised), checked against what the
    /// proxy saw meanwhile: a refused event (any status but 200) opened no connection and
    /// sent no byte to the database; a delivered one (200) sent it something.
    async fn payload_of(&self, event: &str) -> Value {
        let before = self.proxy.traffic();
        let payload =
            serde_json::to_value(claimonce::lambda::handle_event(&self.receiver, event).await)
                .expect("a JSON payload");
        let after = self.proxy.traffic();
        if payload["statusCode"] == 200 {
            assert!(after.1 > before.1, "a 200 that never reached the database");
        } else {
            assert_eq!(
                after, before,
                "a refused request reached the database (connections, bytes): {payload}"
            );
        }
        payload
    }

    async fn answer(&self, event: &Value) -> (u16, String) {
        payload_outcome(&self.payload_of(&event.to_string()).await)
    }
}

#[tokio::test]
async fn a_body_flagged_base64_that_is_not_base64_is_400_not_a_crash() {
    let db = TestDb::new().await;
    let watched = Watched::new(&db).await;
    let logs = &watched.logs;
    let body = invoice_paid("evt_b64bad", "cus_x", 1);
    let sig = stripe_header(STRIPE_SECRET, now(), &body);
    for mut event in [
        v2_event("POST", PATH, &[("stripe-signature", &sig)], &body, true),
        v1_event("POST", PATH, &[("stripe-signature", &sig)], &body, true),
    ] {
        event["body"] = Value::String("%%% not base64 %%%".into());
        let payload = watched.payload_of(&event.to_string()).await;
        assert_eq!(payload["statusCode"], 400);
        assert_eq!(payload_outcome(&payload).1, "unreadable-body");
    }
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 0);
    let logged = logs.lock().expect("logs").join("\n");
    assert_eq!(logged.matches("\"problem\":\"unreadable-body\"").count(), 2);
}

#[tokio::test]
async fn responses_come_back_in_the_format_the_event_came_in() {
    let db = TestDb::new().await;
    let watched = Watched::new(&db).await;
    let body = invoice_paid("evt_fmt2", "cus_f", 1);
    let sig = stripe_header(STRIPE_SECRET, now(), &body);
    let v2 = watched
        .payload_of(
            &v2_event("POST", PATH, &[("stripe-signature", &sig)], &body, false).to_string(),
        )
        .await;
    assert_eq!(v2["statusCode"], 200);
    assert_eq!(v2["headers"]["content-type"], "application/json");
    assert!(v2.get("multiValueHeaders").is_none());
    assert_eq!(v2["isBase64Encoded"], false);
    let body = invoice_paid("evt_fmt1", "cus_f", 1);
    let sig = stripe_header(STRIPE_SECRET, now(), &body);
    let v1 = watched
        .payload_of(&v1_event("POST", PATH, &[("Stripe-Signature", &sig)], &body, true).to_string())
        .await;
    assert_eq!(v1["statusCode"], 200);
    assert_eq!(
        v1["multiValueHeaders"]["content-type"][0],
        "application/json"
    );
    assert_eq!(payload_outcome(&v1).1, "processed");
}

#[tokio::test]
async fn hostile_and_malformed_requests_are_refused_before_the_database() {
    let db = TestDb::new().await;
    let watched = Watched::new(&db).await;
    let t = now();
    let body = invoice_paid("evt_hostile", "cus_h", 1);
    let good = stripe_header(STRIPE_SECRET, t, &body);
    let v1 = good.split("v1=").nth(1).expect("v1").to_owned();
    let sign = |b: &[u8]| stripe_header(STRIPE_SECRET, t, b);
    let binary: Vec<u8> = vec![0xff, 0xfe, 0x00, 0x80];
    let not_json = b"hello, world".to_vec();
    let not_event = br#"{"id":"evt_1","object":"charge"}"#.to_vec();
    let huge = vec![b'{'; (1 << 20) + 1];
    let post = |headers: &[(&str, &str)], b: &[u8], base64: bool| {
        v2_event("POST", PATH, headers, b, base64)
    };
    let cases: Vec<(&str, Value, u16, &str)> = vec![
        (
            "empty body",
            post(&[("stripe-signature", &sign(b""))], b"", false),
            400,
            "invalid-payload",
        ),
        (
            "empty body, no signature",
            post(&[], b"", false),
            400,
            "missing-signature",
        ),
        (
            "non-UTF-8 body",
            post(&[("stripe-signature", &sign(&binary))], &binary, true),
            400,
            "invalid-payload",
        ),
        (
            "oversized body",
            post(&[("stripe-signature", &sign(&huge))], &huge, false),
            413,
            "payload-too-large",
        ),
        (
            "spaces around =",
            post(
                &[("stripe-signature", &format!("t = {t}, v1 = {v1}"))],
                &body,
                false,
            ),
            400,
            "malformed-signature",
        ),
        (
            "tabs and padding",
            post(
                &[("stripe-signature", &format!("\tt={t},\tv1={v1}  "))],
                &body,
                false,
            ),
            200,
            "processed",
        ),
        (
            "duplicate t=",
            post(
                &[("stripe-signature", &format!("t={t},t={},v1={v1}", t + 1))],
                &body,
                false,
            ),
            400,
            "malformed-signature",
        ),
        (
            "upper-case hex",
            post(
                &[(
                    "stripe-signature",
                    &format!("t={t},v1={}", v1.to_uppercase()),
                )],
                &body,
                false,
            ),
            400,
            "malformed-signature",
        ),
        (
            "another secret",
            post(
                &[("stripe-signature", &stripe_header("whsec_other", t, &body))],
                &body,
                false,
            ),
            400,
            "signature-mismatch",
        ),
        (
            "signed, not JSON",
            post(&[("stripe-signature", &sign(&not_json))], &not_json, false),
            400,
            "invalid-payload",
        ),
        (
            "signed JSON, not an event",
            post(
                &[("stripe-signature", &sign(&not_event))],
                &not_event,
                false,
            ),
            400,
            "invalid-payload",
        ),
        (
            "GET",
            v2_event("GET", PATH, &[("stripe-signature", &good)], b"", false),
            405,
            "method-not-allowed",
        ),
        (
            "not an API Gateway event",
            Value::String("just a string".into()),
            400,
            "unreadable-body",
        ),
        // Found by the apigw_event fuzzer: each made lambda_http's converter panic.
        (
            "empty host",
            json!({"version": "2.0", "requestContext": {"domainName": "?", "http": {"method": "POST"}}}),
            400,
            "missing-signature",
        ),
        (
            "bad port in the path",
            json!({"version": "2.0", "rawPath": ":99999", "requestContext": {"http": {"method": "POST"}}}),
            400,
            "missing-signature",
        ),
        (
            "quote in the query",
            json!({"version": "2.0", "rawQueryString": "a=\"b", "requestContext": {"http": {"method": "POST"}}}),
            400,
            "missing-signature",
        ),
        (
            "odd forwarded proto",
            json!({"version": "2.0", "headers": {"host": "h", "x-forwarded-proto": "1"}, "requestContext": {"http": {"method": "POST"}}}),
            400,
            "missing-signature",
        ),
        (
            "v1 empty host",
            json!({"httpMethod": "POST", "path": "/", "headers": {"host": "?"}, "requestContext": {"httpMethod": "POST"}}),
            400,
            "missing-signature",
        ),
    ];
    let mut processed = 0;
    for (name, event, status, expected) in cases {
        let got = watched.answer(&event).await;
        assert_eq!(got, (status, expected.to_owned()), "{name}");
        if expected == "processed" {
            processed += 1;
        }
    }
    // Only the one valid (if oddly padded) delivery reached the ledger, and the database at
    // all: the one connection the receiver ever opened is that delivery's.
    assert_eq!(
        db.count("SELECT count(*) FROM processed_events").await,
        processed
    );
    assert_eq!((processed, watched.proxy.traffic().0), (1, 1));
}

#[tokio::test]
async fn an_escaped_base64_flag_is_still_the_flag() {
    let db = TestDb::new().await;
    let watched = Watched::new(&db).await;
    // JSON allows the key to be written with escapes; it is the same key.
    let event = r#"{"version":"2.0","isBase64\u0045ncoded":true,"body":"!!","requestContext":{"http":{"method":"POST"}}}"#;
    let payload = watched.payload_of(event).await;
    assert_eq!(
        payload_outcome(&payload),
        (400, "unreadable-body".to_owned())
    );
}

#[tokio::test]
async fn headers_are_read_from_either_map_and_refused_when_http_cannot_carry_them() {
    let db = TestDb::new().await;
    let watched = Watched::new(&db).await;
    let body = invoice_paid("evt_hdrs", "cus_h", 1);
    let sig = stripe_header(STRIPE_SECRET, now(), &body);
    let headers = [("stripe-signature", sig.as_str())];

    // A name or a value HTTP cannot carry: the event is unreadable, nothing is written.
    for (name, value) in [
        ("stripe signature", sig.as_str()),
        ("stripe-signature", "t=1\nv1=00"),
    ] {
        let mut event = v2_event("POST", PATH, &headers, &body, false);
        event["headers"] = json!({ name: value });
        assert_eq!(
            watched.answer(&event).await,
            (400, "unreadable-body".to_owned()),
            "{name:?}"
        );
    }
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 0);

    // A REST event whose signature is only in `multiValueHeaders` (single-value `headers`
    // null) is read from there.
    let mut event = v1_event("POST", PATH, &headers, &body, false);
    event["headers"] = Value::Null;
    assert_eq!(watched.answer(&event).await, (200, "processed".to_owned()));

    // Where both maps name a header, the single value wins: a wrong multi-value twin does not
    // hide a right single value.
    let body = invoice_paid("evt_hdrs2", "cus_h", 1);
    let sig = stripe_header(STRIPE_SECRET, now(), &body);
    let mut event = v1_event("POST", PATH, &[("stripe-signature", &sig)], &body, false);
    event["multiValueHeaders"] = json!({ "Stripe-Signature": ["t=1,v1=00"] });
    assert_eq!(watched.answer(&event).await, (200, "processed".to_owned()));
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 2);
}

#[tokio::test]
async fn a_flood_of_headers_is_400_not_a_crash() {
    let db = TestDb::new().await;
    let watched = Watched::new(&db).await;
    let logs = &watched.logs;
    let body = invoice_paid("evt_flood", "cus_flood", 1);
    let sig = stripe_header(STRIPE_SECRET, now(), &body);
    let many = |n: usize, multi: bool| -> serde_json::Map<String, Value> {
        let mut map = serde_json::Map::new();
        map.insert(
            "stripe-signature".into(),
            if multi { json!([sig]) } else { json!(sig) },
        );
        for i in 1..n {
            let value = format!("v{i}");
            map.insert(
                format!("x-flood-{i}"),
                if multi { json!([value]) } else { json!(value) },
            );
        }
        map
    };
    // About 25,000 distinct names is past what `http`'s HeaderMap can hold: its `insert`
    // panics. Every header line beyond the reader's limit is refused instead, in both maps,
    // and so is one name repeated past it.
    let mut v2 = v2_event("POST", PATH, &[], &body, false);
    v2["headers"] = Value::Object(many(25_000, false));
    let mut v1 = v1_event("POST", PATH, &[], &body, false);
    v1["headers"] = Value::Null;
    v1["multiValueHeaders"] = Value::Object(many(25_000, true));
    let mut repeated = v1_event("POST", PATH, &[], &body, false);
    repeated["headers"] = Value::Null;
    repeated["multiValueHeaders"] = json!({
        "stripe-signature": [sig],
        "x-flood": vec!["v"; 25_000],
    });
    let mut over = v2_event("POST", PATH, &[], &body, false);
    over["headers"] = Value::Object(many(claimonce::lambda::MAX_HEADERS + 1, false));
    for (name, event) in [
        ("v2", &v2),
        ("v1", &v1),
        ("repeated", &repeated),
        ("over", &over),
    ] {
        assert_eq!(
            watched.answer(event).await,
            (400, "unreadable-body".to_owned()),
            "{name}"
        );
    }
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 0);
    let logged = logs.lock().expect("logs").join("\n");
    assert_eq!(logged.matches("\"problem\":\"unreadable-body\"").count(), 4);
    // Up to the limit, the delivery is read and processed.
    let mut at = v2_event("POST", PATH, &[], &body, false);
    at["headers"] = Value::Object(many(claimonce::lambda::MAX_HEADERS, false));
    assert_eq!(watched.answer(&at).await, (200, "processed".to_owned()));
}

/// An SQS batch the reader cannot read is answered as a partial batch response that fails
/// every record it can name, or, naming none, the whole batch (an empty item identifier, which
/// Lambda takes as a complete failure): never an API Gateway answer, which Lambda would take as
/// a complete success and delete what was never applied. Nothing reaches the database, and the
/// function says so in an ERROR line that holds no record's contents.
#[tokio::test]
async fn an_unreadable_sqs_batch_fails_every_record_it_can_name_and_reaches_no_database() {
    let db = TestDb::new().await;
    let watched = Watched::new(&db).await;
    for (records, failed) in [
        (
            json!([{"messageId": "m-1", "body": 5}, {"messageId": "m-2", "body": "secret-body"}]),
            json!([{"itemIdentifier": "m-1"}, {"itemIdentifier": "m-2"}]),
        ),
        (json!("secret-records"), json!([{"itemIdentifier": ""}])),
        (
            json!([{"body": "secret-body"}]),
            json!([{"itemIdentifier": ""}]),
        ),
    ] {
        let event = json!({ "Records": records }).to_string();
        let before = watched.proxy.traffic();
        let answer = serde_json::to_value(
            claimonce::lambda::handle_invocation(
                &watched.receiver,
                &claimonce::Queues::default(),
                &event,
            )
            .await,
        )
        .expect("JSON");
        assert_eq!(answer, json!({ "batchItemFailures": failed }), "{records}");
        assert_eq!(
            watched.proxy.traffic(),
            before,
            "{records}: reached the database"
        );
    }
    let lines: Vec<Value> = watched
        .logs
        .lock()
        .expect("logs")
        .iter()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let refused: Vec<&Value> = lines
        .iter()
        .filter(|l| {
            l["message"] == "an SQS batch that cannot be read: every record reported failed"
        })
        .collect();
    assert_eq!(refused.len(), 3, "{lines:?}");
    assert_eq!(refused[0]["named_records"], 2);
    assert!(
        !lines.iter().any(|l| l.to_string().contains("secret-")),
        "no record's contents in the log"
    );
}
