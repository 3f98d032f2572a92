//! The Resend receiver end to end: Standard Webhooks headers, the svix-id as the ledger key,
//! email events and suppressions.

use std::sync::Arc;

use claimonce::Receiver;
use claimonce_tests::TestDb;
use claimonce_tests::apigw::{
    Answer, assert_generic_500, content_type, outcome, post_stripe, post_to,
};
use claimonce_tests::db::all_at_once;
use claimonce_tests::sign::{
    RESEND_SECRET, invoice_paid, now, resend, resend_email, stripe, svix_headers,
};
use resend_webhook::Resend;
use serde_json::json;

const PATH: &str = "/webhooks/resend";

async fn send_as(receiver: &Receiver<Resend>, headers: &[(String, String)], body: &[u8]) -> Answer {
    let headers: Vec<(&str, &str)> = headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    post_to(receiver, PATH, &headers, body).await
}

async fn send(receiver: &Receiver<Resend>, id: &str, body: &[u8]) -> Answer {
    send_as(
        receiver,
        &svix_headers("svix", RESEND_SECRET, id, now(), body),
        body,
    )
    .await
}

#[tokio::test]
async fn an_email_event_is_recorded_once_keyed_by_its_svix_id() {
    let db = TestDb::new().await;
    let (receiver, _) = db.receiver(resend());
    let body = resend_email("delivered", "em_1", &["jenny@example.com"]);
    assert_eq!(
        outcome(&send(&receiver, "msg_1", &body).await),
        (200, "processed".into())
    );
    assert_eq!(
        outcome(&send(&receiver, "msg_1", &body).await),
        (200, "duplicate".into())
    );
    let row = db
        .client()
        .await
        .query_one(
            "SELECT event_id, email_id, event_type, recipients, occurred_at = '2026-11-29T10:00:01.126Z' FROM email_events",
            &[],
        )
        .await
        .expect("one email event");
    assert_eq!(row.get::<_, String>(0), "msg_1");
    assert_eq!(row.get::<_, String>(1), "em_1");
    assert_eq!(row.get::<_, String>(2), "email.delivered");
    assert_eq!(
        row.get::<_, Vec<String>>(3),
        vec!["jenny@example.com".to_owned()]
    );
    assert!(row.get::<_, bool>(4));
    assert_eq!(
        db.count(
            "SELECT count(*) FROM processed_events WHERE provider = 'resend' AND event_id = 'msg_1'"
        )
        .await,
        1
    );
    // The same body under a new message id is a new event.
    assert_eq!(
        outcome(&send(&receiver, "msg_2", &body).await),
        (200, "processed".into())
    );
    assert_eq!(db.count("SELECT count(*) FROM email_events").await, 2);
}

#[tokio::test]
async fn bounces_and_complaints_suppress_every_recipient_keeping_the_first_reason() {
    let db = TestDb::new().await;
    let (receiver, _) = db.receiver(resend());
    let bounce = resend_email("bounced", "em_b", &["A@Example.com", "b@example.com"]);
    assert_eq!(
        outcome(&send(&receiver, "msg_b", &bounce).await).1,
        "processed"
    );
    let complaint = resend_email("complained", "em_c", &["b@example.com", "c@example.com"]);
    assert_eq!(
        outcome(&send(&receiver, "msg_c", &complaint).await).1,
        "processed"
    );
    let rows = db
        .client()
        .await
        .query(
            "SELECT email, reason, source_event_id FROM email_suppressions ORDER BY email",
            &[],
        )
        .await
        .expect("suppressions");
    let got: Vec<(String, String, String)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        got,
        vec![
            ("a@example.com".into(), "bounced".into(), "msg_b".into()),
            ("b@example.com".into(), "bounced".into(), "msg_b".into()),
            ("c@example.com".into(), "complained".into(), "msg_c".into()),
        ]
    );
    // A delivered event suppresses nobody.
    let delivered = resend_email("delivered", "em_d", &["d@example.com"]);
    send(&receiver, "msg_d", &delivered).await;
    assert_eq!(db.count("SELECT count(*) FROM email_suppressions").await, 3);
    assert_eq!(db.count("SELECT count(*) FROM email_events").await, 3);
}

#[tokio::test]
async fn a_transient_bounce_is_recorded_and_suppresses_nobody() {
    let db = TestDb::new().await;
    let (receiver, _) = db.receiver(resend());
    // A full mailbox: Resend's bounce.type "Transient".
    let mut transient: serde_json::Value =
        serde_json::from_slice(&resend_email("bounced", "em_t", &["full@example.com"]))
            .expect("json");
    transient["data"]["bounce"]["type"] = "Transient".into();
    transient["data"]["bounce"]["subType"] = "MailboxFull".into();
    let body = serde_json::to_vec(&transient).expect("json");
    assert_eq!(
        outcome(&send(&receiver, "msg_t", &body).await),
        (200, "processed".into())
    );
    assert_eq!(
        db.count("SELECT count(*) FROM email_events WHERE event_type = 'email.bounced'")
            .await,
        1
    );
    assert_eq!(db.count("SELECT count(*) FROM email_suppressions").await, 0);
}

#[tokio::test]
async fn other_event_families_are_claimed_and_ignored() {
    let db = TestDb::new().await;
    let (receiver, _) = db.receiver(resend());
    let body = serde_json::to_vec(&json!({
        "type": "contact.created",
        "created_at": "2026-11-29T10:00:00.000Z",
        "data": { "id": "e169aa45", "audience_id": "78261eea", "email": "x@example.com" }
    }))
    .expect("json");
    assert_eq!(
        outcome(&send(&receiver, "msg_contact", &body).await),
        (200, "ignored".into())
    );
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 1);
    assert_eq!(db.count("SELECT count(*) FROM email_events").await, 0);
}

#[tokio::test]
async fn concurrent_copies_in_separate_environments_apply_once() {
    let db = TestDb::new().await;
    let body = Arc::new(resend_email("bounced", "em_race", &["race@example.com"]));
    let headers = Arc::new(svix_headers(
        "svix",
        RESEND_SECRET,
        "msg_race",
        now(),
        &body,
    ));
    let environments = (0..12).map(|_| db.receiver(resend()).0).collect();
    let outcomes = all_at_once(environments, |r| {
        let (body, headers) = (Arc::clone(&body), Arc::clone(&headers));
        async move { outcome(&send_as(&r, &headers, &body).await) }
    })
    .await;
    let processed = outcomes.iter().filter(|o| o.1 == "processed").count();
    assert!(outcomes.iter().all(|o| o.0 == 200), "{outcomes:?}");
    assert_eq!(processed, 1, "{outcomes:?}");
    assert_eq!(db.count("SELECT count(*) FROM email_events").await, 1);
    assert_eq!(db.count("SELECT count(*) FROM email_suppressions").await, 1);
}

#[tokio::test]
async fn webhook_prefixed_headers_and_rotated_secrets_are_accepted() {
    let db = TestDb::new().await;
    let next = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    let (receiver, _) = db.receiver(Resend::new(&[RESEND_SECRET, next], 300).expect("secrets"));
    let body = resend_email("sent", "em_w", &["w@example.com"]);
    let webhook = svix_headers("webhook", RESEND_SECRET, "msg_w1", now(), &body);
    assert_eq!(
        outcome(&send_as(&receiver, &webhook, &body).await).1,
        "processed"
    );
    let rotated = svix_headers("svix", next, "msg_w2", now(), &body);
    assert_eq!(
        outcome(&send_as(&receiver, &rotated, &body).await).1,
        "processed"
    );
    assert_eq!(db.count("SELECT count(*) FROM email_events").await, 2);
}

#[tokio::test]
async fn bad_stale_future_and_malformed_signatures_are_400_and_write_nothing() {
    let db = TestDb::new().await;
    let (receiver, _) = db.receiver(resend());
    let body = resend_email("bounced", "em_x", &["x@example.com"]);
    let t = now();
    let good = svix_headers("svix", RESEND_SECRET, "msg_x", t, &body);
    let with = |name: &str, value: &str| -> Vec<(String, String)> {
        good.iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    if k == name {
                        value.to_owned()
                    } else {
                        v.clone()
                    },
                )
            })
            .collect()
    };
    let forged = svix_headers(
        "svix",
        "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
        "msg_x",
        t,
        &body,
    );
    // A minute beyond the 300 s tolerance each way (as in stripe::bad_stale_…): the receiver
    // reads the wall clock later, and 301 s left one second of margin. The exact boundary is
    // standard_webhooks' unit test, against a fixed clock.
    let cases = [
        (
            svix_headers("svix", RESEND_SECRET, "msg_x", t - 360, &body),
            "stale-timestamp",
        ),
        (
            svix_headers("svix", RESEND_SECRET, "msg_x", t + 360, &body),
            "stale-timestamp",
        ),
        (forged, "signature-mismatch"),
        (
            with("svix-signature", "v1,!!!not-base64!!!"),
            "malformed-signature",
        ),
        (with("svix-signature", "v1"), "malformed-signature"),
        (with("svix-timestamp", "soon"), "malformed-signature"),
        (with("svix-id", "msg_other"), "signature-mismatch"),
        (good[..2].to_vec(), "missing-signature"),
        (Vec::new(), "missing-signature"),
    ];
    for (headers, slug) in cases {
        let response = send_as(&receiver, &headers, &body).await;
        assert_eq!(outcome(&response), (400, slug.to_owned()), "{headers:?}");
        assert_eq!(content_type(&response), "application/problem+json");
    }
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 0);
    assert_eq!(db.count("SELECT count(*) FROM email_suppressions").await, 0);
}

#[tokio::test]
async fn a_failing_effect_rolls_back_and_the_redelivery_heals() {
    let db = TestDb::new().await;
    let admin = db.client().await;
    admin
        .batch_execute(
            "ALTER TABLE email_suppressions ADD CONSTRAINT no_x CHECK (email <> 'x@example.com')",
        )
        .await
        .expect("constraint");
    let (receiver, _) = db.receiver(resend());
    let body = resend_email("complained", "em_f", &["ok@example.com", "x@example.com"]);
    let headers = svix_headers("svix", RESEND_SECRET, "msg_f", now(), &body);
    let response = send_as(&receiver, &headers, &body).await;
    assert_generic_500(
        &response,
        &[
            "23514",
            "no_x",
            "email_suppressions",
            "x@example.com",
            "msg_f",
        ],
    );
    // The first statement (email_events) succeeded before the second failed: all rolled back.
    assert_eq!(db.count("SELECT count(*) FROM email_events").await, 0);
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 0);
    admin
        .batch_execute("ALTER TABLE email_suppressions DROP CONSTRAINT no_x")
        .await
        .expect("drop");
    assert_eq!(
        outcome(&send_as(&receiver, &headers, &body).await).1,
        "processed"
    );
    assert_eq!(db.count("SELECT count(*) FROM email_suppressions").await, 2);
    assert_eq!(db.count("SELECT count(*) FROM email_events").await, 1);
}

#[tokio::test]
async fn values_postgresql_refuses_are_400_and_write_nothing() {
    let db = TestDb::new().await;
    let (receiver, _) = db.receiver(resend());
    let with = |field: &str, value: serde_json::Value| {
        let mut body: serde_json::Value =
            serde_json::from_slice(&resend_email("bounced", "em_v", &["v@example.com"]))
                .expect("JSON");
        match field {
            "type" | "created_at" => body[field] = value,
            _ => body["data"][field] = value,
        }
        serde_json::to_vec(&body).expect("serialisable")
    };
    // PostgreSQL refuses a zone offset past 15:59 ("time zone displacement out of range")
    // and U+0000 in text: stored, each would fail every retry with a 500.
    let bodies = [
        with("created_at", json!("2026-11-29T10:00:01+16:00")),
        with("created_at", json!("2026-11-29T10:00:01.5-23:59")),
        // A fraction of 130 digits: PostgreSQL's date-time field holds 128 bytes (22007).
        with(
            "created_at",
            json!(format!("2026-11-29T10:00:01.{}Z", "1".repeat(130))),
        ),
        with("type", json!("email.bounced\u{0}")),
        with("email_id", json!("em_\u{0}")),
        with("to", json!(["v\u{0}@example.com"])),
    ];
    for (i, body) in bodies.iter().enumerate() {
        let response = send(&receiver, &format!("msg_refused_{i}"), body).await;
        assert_eq!(outcome(&response), (400, "invalid-payload".into()), "{i}");
        assert_eq!(content_type(&response), "application/problem+json");
    }
    for table in ["processed_events", "email_events", "email_suppressions"] {
        assert_eq!(
            db.count(&format!("SELECT count(*) FROM {table}")).await,
            0,
            "{table}"
        );
    }
    // The largest offset PostgreSQL accepts is still stored.
    let body = with("created_at", json!("2026-11-29T10:00:01+15:59"));
    assert_eq!(
        outcome(&send(&receiver, "msg_east", &body).await),
        (200, "processed".into())
    );
}

#[tokio::test]
async fn stripe_and_resend_ids_live_in_separate_namespaces() {
    let db = TestDb::new().await;
    let (resend_receiver, _) = db.receiver(resend());
    let (stripe_receiver, _) = db.receiver(stripe());
    let body = resend_email("sent", "em_ns", &["ns@example.com"]);
    assert_eq!(
        outcome(&send(&resend_receiver, "evt_same_id", &body).await).1,
        "processed"
    );
    let invoice = invoice_paid("evt_same_id", "cus_ns2", 3);
    let response = post_stripe(&stripe_receiver, &invoice).await;
    assert_eq!(outcome(&response), (200, "processed".into()));
    assert_eq!(
        db.count("SELECT count(*) FROM processed_events WHERE event_id = 'evt_same_id'")
            .await,
        2
    );
}

#[tokio::test]
async fn an_event_delivered_again_after_the_sweep_removed_its_claim_is_processed() {
    let db = TestDb::new().await;
    let (receiver, _) = db.receiver(resend());
    let body = resend_email("bounced", "em_swept", &["swept@example.com"]);
    assert_eq!(
        outcome(&send(&receiver, "msg_swept", &body).await),
        (200, "processed".into())
    );
    // The retention window passes and the sweep removes the claim; the effect's rows stay.
    db.client()
        .await
        .batch_execute("UPDATE processed_events SET received_at = now() - interval '100 days'")
        .await
        .expect("age the claim");
    let settings = db.settings();
    let client = settings.connect().await.expect("connect");
    let report = retention_sweep::sweep(
        &client,
        settings.timeouts(),
        &retention_sweep::Policy::new(90, 5000).expect("policy"),
        &claimonce::jobs::Budget::until(
            std::time::Instant::now() + std::time::Duration::from_secs(60),
        ),
    )
    .await;
    assert_eq!(report.removed, 1, "{report:?}");
    // Resend (Svix) delivers it again: claimed anew and processed, not 500 on every retry
    // (resend_record_v1 inserted without ON CONFLICT and met its own first row).
    assert_eq!(
        outcome(&send(&receiver, "msg_swept", &body).await),
        (200, "processed".into())
    );
    // And after OPERATIONS.md's "Replay an event safely", run as the page writes it.
    assert_eq!(
        claimonce_tests::operations::replay(&db, "resend", "msg_swept").await,
        1
    );
    assert_eq!(
        outcome(&send(&receiver, "msg_swept", &body).await),
        (200, "processed".into())
    );
    for (sql, expected) in [
        ("SELECT count(*) FROM processed_events", 1),
        (
            "SELECT count(*) FROM email_events WHERE event_id = 'msg_swept'",
            1,
        ),
        ("SELECT count(*) FROM email_suppressions", 1),
    ] {
        assert_eq!(db.count(sql).await, expected, "{sql}");
    }
}
