//! The Stripe receiver end to end: API Gateway event → verify → claim → effect → response.

use std::sync::Arc;

use claimonce::Receiver;
use claimonce_tests::TestDb;
use claimonce_tests::apigw::{
    Answer, assert_generic_500, content_type, json_body, outcome, post_stripe, post_to, send_event,
    v1_event, v2_event,
};
use claimonce_tests::db::all_at_once;
use claimonce_tests::sign::{
    STRIPE_SECRET, checkout_completed, invoice_paid, now, stripe, stripe_event, stripe_header,
    subscription,
};
use serde_json::{Value, json};
use stripe_webhook::Stripe;

const PATH: &str = "/webhooks/stripe";

async fn send(receiver: &Receiver<Stripe>, body: &[u8]) -> Answer {
    let signature = stripe_header(STRIPE_SECRET, now(), body);
    post_to(
        receiver,
        PATH,
        &[
            ("stripe-signature", &signature),
            ("content-type", "application/json"),
        ],
        body,
    )
    .await
}

async fn ledger_rows(db: &TestDb) -> i64 {
    db.count("SELECT count(*) FROM processed_events").await
}

async fn balance(db: &TestDb, customer: &str) -> Option<i64> {
    db.client()
        .await
        .query_opt(
            "SELECT credit_balance_cents FROM customers WHERE stripe_customer_id = $1",
            &[&customer],
        )
        .await
        .expect("query")
        .map(|r| r.get(0))
}

#[tokio::test]
async fn a_new_event_is_applied_once_and_its_redelivery_is_a_duplicate() {
    let db = TestDb::new().await;
    let (receiver, _) = db.receiver(stripe());
    let body = checkout_completed("evt_new", "cus_new", "jenny@example.com");

    let first = send(&receiver, &body).await;
    assert_eq!(outcome(&first), (200, "processed".into()));
    assert_eq!(content_type(&first), "application/json");
    let row = db
        .client()
        .await
        .query_one(
            "SELECT email, credit_balance_cents FROM customers WHERE stripe_customer_id = 'cus_new'",
            &[],
        )
        .await
        .expect("customer provisioned");
    assert_eq!(
        row.get::<_, Option<String>>(0).as_deref(),
        Some("jenny@example.com")
    );
    assert_eq!(row.get::<_, i64>(1), 0);

    let again = send(&receiver, &body).await;
    assert_eq!(outcome(&again), (200, "duplicate".into()));
    assert_eq!(db.count("SELECT count(*) FROM customers").await, 1);
    assert_eq!(ledger_rows(&db).await, 1);
    let ledger = db
        .client()
        .await
        .query_one(
            "SELECT provider, event_id, event_type, length(payload_sha256) FROM processed_events",
            &[],
        )
        .await
        .expect("ledger row");
    assert_eq!(ledger.get::<_, String>(0), "stripe");
    assert_eq!(ledger.get::<_, String>(1), "evt_new");
    assert_eq!(ledger.get::<_, String>(2), "checkout.session.completed");
    assert_eq!(ledger.get::<_, i32>(3), 32);
}

#[tokio::test]
async fn an_invoice_is_credited_once_however_often_it_arrives() {
    let db = TestDb::new().await;
    let (receiver, _) = db.receiver(stripe());
    let body = invoice_paid("evt_inv", "cus_credit", 1250);
    for expected in ["processed", "duplicate", "duplicate"] {
        assert_eq!(
            outcome(&send(&receiver, &body).await),
            (200, expected.into())
        );
    }
    assert_eq!(balance(&db, "cus_credit").await, Some(1250));
    let second = invoice_paid("evt_inv2", "cus_credit", 50);
    assert_eq!(outcome(&send(&receiver, &second).await).1, "processed");
    assert_eq!(balance(&db, "cus_credit").await, Some(1300));
}

#[tokio::test]
async fn twenty_concurrent_environments_credit_an_invoice_once() {
    let db = TestDb::new().await;
    let body = Arc::new(invoice_paid("evt_race", "cus_race", 700));
    // Each is one Lambda execution environment: its own receiver and connection.
    let environments = (0..20).map(|_| db.receiver(stripe()).0).collect();
    let outcomes = all_at_once(environments, |r| {
        let body = Arc::clone(&body);
        async move { outcome(&send(&r, &body).await) }
    })
    .await;
    assert!(
        outcomes.iter().all(|(status, _)| *status == 200),
        "{outcomes:?}"
    );
    let processed = outcomes.iter().filter(|(_, d)| d == "processed").count();
    let duplicate = outcomes.iter().filter(|(_, d)| d == "duplicate").count();
    assert_eq!((processed, duplicate), (1, 19), "{outcomes:?}");
    assert_eq!(balance(&db, "cus_race").await, Some(700));
    assert_eq!(ledger_rows(&db).await, 1);
}

#[tokio::test]
async fn a_failing_effect_rolls_back_its_claim_and_the_retry_heals() {
    let db = TestDb::new().await;
    let admin = db.client().await;
    // Injected failure: the effect's INSERT violates a constraint.
    admin
        .batch_execute(
            "ALTER TABLE customers ADD CONSTRAINT no_poison CHECK (email <> 'poison@example.com')",
        )
        .await
        .expect("add constraint");
    let (receiver, logs) = db.receiver(stripe());
    let body = checkout_completed("evt_fail", "cus_fail", "poison@example.com");

    let failed = send(&receiver, &body).await;
    // The values themselves, not only words: the SQLSTATE code, the constraint, the table and
    // column, and the event's data.
    assert_generic_500(
        &failed,
        &[
            "23514",
            "no_poison",
            "customers",
            "email",
            "poison@example.com",
            "cus_fail",
        ],
    );
    assert_eq!(
        ledger_rows(&db).await,
        0,
        "the claim rolled back with the effect"
    );
    assert_eq!(db.count("SELECT count(*) FROM customers").await, 0);
    let logged = logs.lock().expect("logs").join("\n");
    assert!(logged.contains("\"disposition\":\"error\""), "{logged}");
    assert!(logged.contains("23514"), "the SQLSTATE is logged: {logged}");

    admin
        .batch_execute("ALTER TABLE customers DROP CONSTRAINT no_poison")
        .await
        .expect("drop constraint");
    let healed = send(&receiver, &body).await;
    assert_eq!(outcome(&healed), (200, "processed".into()));
    assert_eq!(ledger_rows(&db).await, 1);
    assert_eq!(db.count("SELECT count(*) FROM customers").await, 1);
}

async fn assert_rejected(
    receiver: &Receiver<Stripe>,
    db: &TestDb,
    headers: &[(&str, &str)],
    body: &[u8],
    slug: &str,
) {
    let response = post_to(receiver, PATH, headers, body).await;
    assert_eq!(response.status().as_u16(), 400, "{slug}");
    assert_eq!(content_type(&response), "application/problem+json");
    let problem = json_body(&response);
    assert_eq!(problem["status"], 400);
    assert_eq!(
        problem["type"],
        Value::String(format!("https://claimonce.dev/problems/{slug}"))
    );
    assert!(problem["title"].is_string() && problem["detail"].is_string());
    assert_eq!(ledger_rows(db).await, 0, "{slug}: nothing written");
}

#[tokio::test]
async fn bad_stale_and_missing_signatures_are_400_and_write_nothing() {
    let db = TestDb::new().await;
    let (receiver, logs) = db.receiver(stripe());
    let body = invoice_paid("evt_bad", "cus_bad", 100);
    let t = now();
    let forged = stripe_header("whsec_attacker", t, &body);
    // A minute beyond the 300 s tolerance each way, read against the wall clock the receiver
    // reads later: 301 s left one second of margin, and a second that ticked between the two
    // reads accepted the "future" one (a pooled-pass failure in CI). The exact boundary, 301 s
    // against a fixed clock, is timestamp_v1's unit test.
    let stale = stripe_header(STRIPE_SECRET, t - 360, &body);
    let future = stripe_header(STRIPE_SECRET, t + 360, &body);
    let garbage = "t=not-a-number,v1=zz".to_owned();
    let cases: [(&[(&str, &str)], &str); 6] = [
        (&[], "missing-signature"),
        (&[("stripe-signature", &forged)], "signature-mismatch"),
        (&[("stripe-signature", &stale)], "stale-timestamp"),
        (&[("stripe-signature", &future)], "stale-timestamp"),
        (&[("stripe-signature", &garbage)], "malformed-signature"),
        (&[("stripe-signature", "")], "malformed-signature"),
    ];
    for (headers, slug) in cases {
        assert_rejected(&receiver, &db, headers, &body, slug).await;
    }
    let mut other_body = body.clone();
    other_body.extend_from_slice(b" ");
    let sig = stripe_header(STRIPE_SECRET, t, &body);
    assert_rejected(
        &receiver,
        &db,
        &[("stripe-signature", &sig)],
        &other_body,
        "signature-mismatch",
    )
    .await;
    assert_eq!(db.count("SELECT count(*) FROM customers").await, 0);
    let logged = logs.lock().expect("logs").join("\n");
    assert_eq!(logged.matches("\"disposition\":\"rejected\"").count(), 7);
}

#[tokio::test]
async fn signed_bodies_that_are_not_stripe_events_are_400() {
    let db = TestDb::new().await;
    let (receiver, _) = db.receiver(stripe());
    for (body, slug) in [
        (&b"{not json"[..], "invalid-payload"),
        (br#"{"id":"evt_x","object":"charge"}"#, "invalid-payload"),
        (
            br#"{"id":"","object":"event","type":"x","created":1,"data":{"object":{}}}"#,
            "invalid-payload",
        ),
    ] {
        let sig = stripe_header(STRIPE_SECRET, now(), body);
        assert_rejected(&receiver, &db, &[("stripe-signature", &sig)], body, slug).await;
    }
}

#[tokio::test]
async fn both_secrets_are_accepted_during_a_rotation() {
    let db = TestDb::new().await;
    let rotating = Stripe::new(&["whsec_old", "whsec_new"], 300).expect("secrets");
    let (receiver, _) = db.receiver(rotating);
    for (i, secret) in ["whsec_old", "whsec_new"].iter().enumerate() {
        let body = invoice_paid(&format!("evt_rot{i}"), "cus_rot", 10);
        let sig = stripe_header(secret, now(), &body);
        let response = post_to(&receiver, PATH, &[("stripe-signature", &sig)], &body).await;
        assert_eq!(outcome(&response), (200, "processed".into()), "{secret}");
    }
    // Stripe sends one v1 per active secret while it rolls a secret.
    let body = invoice_paid("evt_rot_both", "cus_rot", 10);
    let t = now();
    let both = format!(
        "t={t},v1={},v1={}",
        claimonce::verify::timestamp_v1::sign("whsec_unknown", t, &body),
        claimonce::verify::timestamp_v1::sign("whsec_new", t, &body)
    );
    let response = post_to(&receiver, PATH, &[("stripe-signature", &both)], &body).await;
    assert_eq!(outcome(&response), (200, "processed".into()));
    assert_eq!(balance(&db, "cus_rot").await, Some(30));
}

#[tokio::test]
async fn base64_bodies_and_rest_v1_events_verify_on_the_decoded_bytes() {
    let db = TestDb::new().await;
    let (receiver, _) = db.receiver(stripe());
    let body = invoice_paid("evt_b64", "cus_b64", 5);
    let sig = stripe_header(STRIPE_SECRET, now(), &body);
    let headers = [("Stripe-Signature", sig.as_str())];
    let response = send_event(&receiver, &v2_event("POST", PATH, &headers, &body, true)).await;
    assert_eq!(outcome(&response), (200, "processed".into()));

    let body = invoice_paid("evt_rest", "cus_b64", 7);
    let sig = stripe_header(STRIPE_SECRET, now(), &body);
    let headers = [("Stripe-Signature", sig.as_str())];
    let response = send_event(&receiver, &v1_event("POST", PATH, &headers, &body, false)).await;
    assert_eq!(outcome(&response), (200, "processed".into()));
    let body = invoice_paid("evt_rest64", "cus_b64", 11);
    let sig = stripe_header(STRIPE_SECRET, now(), &body);
    let headers = [("Stripe-Signature", sig.as_str())];
    let response = send_event(&receiver, &v1_event("POST", PATH, &headers, &body, true)).await;
    assert_eq!(outcome(&response), (200, "processed".into()));
    assert_eq!(balance(&db, "cus_b64").await, Some(23));
}

#[tokio::test]
async fn unknown_types_are_claimed_and_ignored() {
    let db = TestDb::new().await;
    let (receiver, _) = db.receiver(stripe());
    let body = stripe_event(
        "evt_other",
        "charge.refunded",
        1,
        json!({"id": "ch_1", "amount": 5}),
    );
    assert_eq!(
        outcome(&send(&receiver, &body).await),
        (200, "ignored".into())
    );
    assert_eq!(
        outcome(&send(&receiver, &body).await),
        (200, "duplicate".into())
    );
    assert_eq!(ledger_rows(&db).await, 1);
    assert_eq!(db.count("SELECT count(*) FROM customers").await, 0);
}

#[tokio::test]
async fn subscriptions_keep_the_newest_event() {
    let db = TestDb::new().await;
    let (receiver, _) = db.receiver(stripe());
    let status = || async {
        db.client()
            .await
            .query_one(
                "SELECT status, extract(epoch FROM event_created)::bigint FROM subscriptions WHERE stripe_subscription_id = 'sub_1'",
                &[],
            )
            .await
            .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1)))
            .expect("subscription row")
    };
    let updated = subscription("evt_s2", "updated", "sub_1", "active", 2000);
    assert_eq!(outcome(&send(&receiver, &updated).await).1, "processed");
    // The older `created` arrives late: claimed, but it must not overwrite.
    let created = subscription("evt_s1", "created", "sub_1", "incomplete", 1000);
    assert_eq!(outcome(&send(&receiver, &created).await).1, "processed");
    assert_eq!(status().await, ("active".into(), 2000));
    let past_due = subscription("evt_s3", "updated", "sub_1", "past_due", 3000);
    send(&receiver, &past_due).await;
    assert_eq!(status().await, ("past_due".into(), 3000));
    // A same-second tie keeps the stored state, except for a deletion.
    let tie = subscription("evt_s4", "updated", "sub_1", "active", 3000);
    send(&receiver, &tie).await;
    assert_eq!(status().await, ("past_due".into(), 3000));
    let deleted = subscription("evt_s5", "deleted", "sub_1", "canceled", 3000);
    send(&receiver, &deleted).await;
    assert_eq!(status().await, ("canceled".into(), 3000));
    assert_eq!(ledger_rows(&db).await, 5);
}

#[tokio::test]
async fn a_same_second_tie_ranks_created_before_updated_before_deleted() {
    let db = TestDb::new().await;
    let (receiver, _) = db.receiver(stripe());
    let status = |sub: &'static str| {
        let db = &db;
        async move {
            db.client()
                .await
                .query_one(
                    "SELECT status FROM subscriptions WHERE stripe_subscription_id = $1",
                    &[&sub],
                )
                .await
                .map(|r| r.get::<_, String>(0))
                .expect("subscription row")
        }
    };
    // Stripe's `created` has one-second resolution: a checkout's subscription is created
    // (incomplete) and updated (active) within the same second. Either delivery order ends
    // active.
    let created = subscription("evt_t1", "created", "sub_in_order", "incomplete", 5000);
    let updated = subscription("evt_t2", "updated", "sub_in_order", "active", 5000);
    for body in [&created, &updated] {
        assert_eq!(outcome(&send(&receiver, body).await).1, "processed");
    }
    assert_eq!(status("sub_in_order").await, "active");
    let updated = subscription("evt_t3", "updated", "sub_reversed", "active", 5000);
    let created = subscription("evt_t4", "created", "sub_reversed", "incomplete", 5000);
    for body in [&updated, &created] {
        assert_eq!(outcome(&send(&receiver, body).await).1, "processed");
    }
    assert_eq!(status("sub_reversed").await, "active");
    // A deletion outranks an update of the same second, in either order.
    let deleted = subscription("evt_t5", "deleted", "sub_reversed", "canceled", 6000);
    let updated = subscription("evt_t6", "updated", "sub_reversed", "active", 6000);
    for body in [&deleted, &updated] {
        assert_eq!(outcome(&send(&receiver, body).await).1, "processed");
    }
    assert_eq!(status("sub_reversed").await, "canceled");
}

#[tokio::test]
async fn a_nul_in_any_stored_string_or_a_time_out_of_range_is_refused_before_the_database() {
    let db = TestDb::new().await;
    let (receiver, logs) = db.receiver(stripe());
    // PostgreSQL's text cannot hold U+0000: stored, each of these would fail every retry with
    // a 500. Each is a signed body that can never succeed, so a 400 that writes nothing.
    let bodies = [
        invoice_paid("evt_nul\u{0}", "cus_nul", 1),
        stripe_event("evt_nul_type", "charge.\u{0}", 1, json!({})),
        invoice_paid("evt_nul_cus", "cus_\u{0}", 1),
        checkout_completed("evt_nul_email", "cus_nul", "a\u{0}@example.com"),
        subscription("evt_nul_sub", "updated", "sub_\u{0}", "active", 1),
        subscription("evt_nul_status", "updated", "sub_nul", "act\u{0}ive", 1),
        // A `created` to_timestamp cannot store (22008), and one before 1970.
        subscription("evt_far", "updated", "sub_far", "active", 9_223_372_036_854),
        subscription("evt_early", "updated", "sub_early", "active", -1),
    ];
    for body in &bodies {
        let sig = stripe_header(STRIPE_SECRET, now(), body);
        assert_rejected(
            &receiver,
            &db,
            &[("stripe-signature", &sig)],
            body,
            "invalid-payload",
        )
        .await;
    }
    assert_eq!(db.count("SELECT count(*) FROM customers").await, 0);
    assert_eq!(db.count("SELECT count(*) FROM subscriptions").await, 0);
    let logged = logs.lock().expect("logs").join("\n");
    assert_eq!(
        logged.matches("\"disposition\":\"rejected\"").count(),
        bodies.len()
    );
}

#[tokio::test]
async fn the_dedup_key_is_provider_and_event_id() {
    let db = TestDb::new().await;
    // Another provider already claimed the same id string.
    db.client()
        .await
        .batch_execute(
            "INSERT INTO processed_events (provider, event_id, event_type) VALUES ('resend', 'evt_shared', 'email.sent')",
        )
        .await
        .expect("seed");
    let (receiver, _) = db.receiver(stripe());
    let body = invoice_paid("evt_shared", "cus_ns", 40);
    assert_eq!(
        outcome(&send(&receiver, &body).await),
        (200, "processed".into())
    );
    assert_eq!(balance(&db, "cus_ns").await, Some(40));
    assert_eq!(ledger_rows(&db).await, 2);
}

#[tokio::test]
async fn a_duplicate_with_a_different_payload_is_logged_and_still_200() {
    let db = TestDb::new().await;
    let (receiver, logs) = db.receiver(stripe());
    send(&receiver, &invoice_paid("evt_same", "cus_p", 1)).await;
    let changed = invoice_paid("evt_same", "cus_p", 999);
    assert_eq!(
        outcome(&send(&receiver, &changed).await),
        (200, "duplicate".into())
    );
    assert_eq!(balance(&db, "cus_p").await, Some(1));
    let logged = logs.lock().expect("logs").join("\n");
    assert!(logged.contains("different payload"), "{logged}");
    // An identical redelivery does not warn.
    send(&receiver, &invoice_paid("evt_same", "cus_p", 1)).await;
    let logged = logs.lock().expect("logs").join("\n");
    assert_eq!(logged.matches("different payload").count(), 1);
}

#[tokio::test]
async fn every_delivery_logs_one_line_without_secrets_signatures_or_bodies() {
    let db = TestDb::new().await;
    let (receiver, logs) = db.receiver(stripe());
    let body = checkout_completed("evt_log", "cus_log", "private@example.com");
    let sig = stripe_header(STRIPE_SECRET, now(), &body);
    post_to(&receiver, PATH, &[("stripe-signature", &sig)], &body).await;
    let forged = stripe_header("whsec_other", now(), &body);
    post_to(&receiver, PATH, &[("stripe-signature", &forged)], &body).await;
    let everything = logs.lock().expect("logs").clone();
    // The connection this receiver made on its first delivery has a line of its own.
    let lines: Vec<&String> = everything
        .iter()
        .filter(|l| l.contains(r#""message":"delivery""#))
        .collect();
    assert_eq!(lines.len(), 2, "{everything:?}");
    let first: Value = serde_json::from_str(lines[0]).expect("JSON line");
    assert_eq!(first["provider"], "stripe");
    assert_eq!(first["event_id"], "evt_log");
    assert_eq!(first["event_type"], "checkout.session.completed");
    assert_eq!(first["disposition"], "processed");
    assert!(first["latency_ms"].as_f64().is_some_and(|ms| ms > 0.0));
    let second: Value = serde_json::from_str(lines[1]).expect("JSON line");
    assert_eq!(second["disposition"], "rejected");
    assert_eq!(second["problem"], "signature-mismatch");
    // Every line, not only the deliveries.
    let all = everything.join("\n");
    let v1 = sig.split("v1=").nth(1).expect("v1");
    for secret in [
        STRIPE_SECRET,
        v1,
        "private@example.com",
        "cus_log",
        "whsec_other",
    ] {
        assert!(!all.contains(secret), "log leaks {secret}");
    }
}

#[tokio::test]
async fn get_is_405_and_an_oversized_body_is_413_before_any_work() {
    let db = TestDb::new().await;
    let (receiver, _) = db.receiver(stripe());
    let get = send_event(&receiver, &v2_event("GET", PATH, &[], b"", false)).await;
    assert_eq!(get.status().as_u16(), 405);
    assert_eq!(
        get.headers().get("allow").and_then(|v| v.to_str().ok()),
        Some("POST")
    );
    let big = vec![b' '; (1 << 20) + 1];
    let sig = stripe_header(STRIPE_SECRET, now(), &big);
    let response = post_to(&receiver, PATH, &[("stripe-signature", &sig)], &big).await;
    assert_eq!(response.status().as_u16(), 413);
    assert_eq!(ledger_rows(&db).await, 0);
}

#[tokio::test]
async fn the_delivery_line_carries_its_cloudwatch_metrics() {
    let db = TestDb::new().await;
    let (receiver, logs) = db.receiver(stripe());
    send(&receiver, &invoice_paid("evt_emf", "cus_emf", 1)).await;
    let line: Value = logs
        .lock()
        .expect("logs")
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).expect("JSON"))
        .find(|l| l["message"] == "delivery")
        .expect("a delivery line");
    let directive = &line["_aws"]["CloudWatchMetrics"][0];
    assert_eq!(directive["Namespace"], "claimonce");
    assert_eq!(
        directive["Dimensions"],
        json!([["Provider", "Disposition"]]),
        "one dimension set: a second would double the custom metrics CloudWatch bills"
    );
    // Every dimension and metric the directive names is a member of the line.
    for name in ["Provider", "Disposition", "service"] {
        assert!(line[name].is_string(), "{name}");
    }
    for metric in directive["Metrics"].as_array().expect("metrics") {
        let name = metric["Name"].as_str().expect("name");
        assert!(line[name].is_number(), "{name}");
    }
    assert_eq!(
        (line["Provider"].as_str(), line["Disposition"].as_str()),
        (Some("stripe"), Some("processed"))
    );
    assert_eq!(line["Deliveries"], 1);
    assert!(
        line["_aws"]["Timestamp"]
            .as_u64()
            .is_some_and(|t| t > 1_700_000_000_000)
    );
}

#[tokio::test]
async fn the_replay_procedure_of_operations_md_applies_the_event_again() {
    let db = TestDb::new().await;
    let (receiver, _) = db.receiver(stripe());
    let body = invoice_paid("evt_replayed", "cus_replayed", 500);
    assert_eq!(
        outcome(&send(&receiver, &body).await),
        (200, "processed".into())
    );
    assert_eq!(
        outcome(&send(&receiver, &body).await),
        (200, "duplicate".into())
    );
    // As the page warns: an additive effect is applied again once its claim is removed.
    assert_eq!(
        claimonce_tests::operations::replay(&db, "stripe", "evt_replayed").await,
        1
    );
    assert_eq!(
        outcome(&send(&receiver, &body).await),
        (200, "processed".into())
    );
    assert_eq!(
        outcome(&send(&receiver, &body).await),
        (200, "duplicate".into())
    );
    assert_eq!(balance(&db, "cus_replayed").await, Some(1000));
    assert_eq!(ledger_rows(&db).await, 1);
}

/// A provider that takes no webhooks (its `verifier()` is `None`: stripe-recover's) refuses a
/// delivery signed with the real secret, before the database: 400 `signature-mismatch`,
/// nothing written; the same provider with its verifier processes it.
#[tokio::test]
async fn a_provider_without_a_verifier_takes_no_webhooks() {
    let db = TestDb::new().await;
    let body = invoice_paid("evt_no_webhooks", "cus_no_webhooks", 100);
    let (recover_only, _) = db.receiver(Stripe::without_webhooks());
    assert_eq!(
        outcome(&post_stripe(&recover_only, &body).await),
        (400, "signature-mismatch".into())
    );
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 0);
    let (receiver, _) = db.receiver(stripe());
    assert_eq!(
        outcome(&post_stripe(&receiver, &body).await),
        (200, "processed".into())
    );
}
