//! Stripe's thin events (`stripe_webhook::thin`), with the real `stripe-webhook` binary under
//! the Runtime API emulator and a stand-in of Stripe's API that follows its published
//! description (`GET /v1/events/{id}`, `GET` of an object by its `url`, the `error` body with
//! `resource_missing` on a 404): each thin event is completed from the API before its claim.

use std::time::{Duration, Instant};

use claimonce_tests::TestDb;
use claimonce_tests::apigw::payload_outcome;
use claimonce_tests::lambda::{Scheduled, sample_event};
use claimonce_tests::senders::StripeApi;
use serde_json::{Value, json};

use crate::eventbridge::{Bridging, STRIPE_SOURCE, credit, stripe_bridged, stripe_webhook_of};

const KEY: &str = "rk_test_claimonce_thin";

/// `event` as one of the connected account `account`'s (its `context`).
fn in_account(mut event: Value, account: &str) -> Value {
    event["context"] = json!(account);
    event
}

/// A thin event notification as Stripe sends one.
fn thin(id: &str, kind: &str, url: Option<&str>, snapshot_event: Option<&str>) -> Value {
    let mut event = json!({
        "id": id, "object": "v2.core.event", "type": kind, "livemode": false,
        "created": claimonce_tests::sign::rfc3339_ago(3600), "context": null,
    });
    if let Some(url) = url {
        let object = url.rsplit('/').next().unwrap_or_default();
        event["related_object"] = json!({"id": object, "type": "invoice", "url": url});
    }
    if let Some(snapshot) = snapshot_event {
        event["snapshot_event"] = json!(snapshot);
    }
    event
}

/// An invoice as `GET /v1/invoices/{id}` returns it (the fields the effect reads, and others).
fn invoice(id: &str, customer: &str, amount_paid: i64) -> Value {
    json!({"id": id, "object": "invoice", "customer": customer, "amount_paid": amount_paid,
           "amount_due": amount_paid, "customer_email": "thin@example.com", "status": "paid"})
}

/// The Stripe function with the stand-in as its API, each GET bounded by `timeout_ms`.
async fn start(db: &TestDb, api: &StripeApi, timeout_ms: &str) -> Bridging {
    Bridging::start_with(
        "stripe",
        &db.function_url_as("stripe"),
        Some(STRIPE_SOURCE),
        &[
            ("STRIPE_API_KEY", KEY),
            ("STRIPE_API_BASE", &api.url),
            ("SENDER_API_TIMEOUT_MS", timeout_ms),
        ],
    )
    .await
}

/// The credit balance of one customer (0 when it has no row).
async fn credit_of(db: &TestDb, customer: &str) -> i64 {
    db.count(&format!(
        "SELECT coalesce(sum(credit_balance_cents), 0)::bigint FROM customers \
         WHERE stripe_customer_id = '{customer}'"
    ))
    .await
}

/// A thin `v1.invoice.paid` by webhook is applied from the invoice as Stripe's API returns it
/// (one GET of its `related_object.url`), and again is a duplicate; another through
/// EventBridge is applied the same way; a thin event whose invoice is gone (404) is claimed and
/// answered `ignored`; a `v2.` type is claimed and ignored with no GET.
#[tokio::test]
async fn a_thin_event_is_applied_from_the_object_stripe_holds() {
    let db = TestDb::new().await;
    let api = StripeApi::start(KEY, 10, None).await;
    api.put_object(
        "/v1/invoices/in_thin1",
        invoice("in_thin1", "cus_Thin1", 1200),
    );
    api.put_object(
        "/v1/invoices/in_thin2",
        invoice("in_thin2", "cus_Thin1", 300),
    );
    let f = start(&db, &api, "3000").await;

    let first = thin(
        "evt_test_thin1",
        "v1.invoice.paid",
        Some("/v1/invoices/in_thin1"),
        None,
    );
    for expected in ["processed", "duplicate"] {
        assert_eq!(
            payload_outcome(&f.invoke(&stripe_webhook_of(&first)).await),
            (200, expected.into())
        );
    }
    let bridged = thin(
        "evt_test_thin2",
        "v1.invoice.paid",
        Some("/v1/invoices/in_thin2"),
        None,
    );
    assert!(
        f.take(&[("m-1", &stripe_bridged(&bridged))])
            .await
            .is_empty()
    );
    let gone = thin(
        "evt_test_thin3",
        "v1.invoice.paid",
        Some("/v1/invoices/in_gone"),
        None,
    );
    assert_eq!(
        payload_outcome(&f.invoke(&stripe_webhook_of(&gone)).await),
        (200, "ignored".into())
    );
    let v2 = thin(
        "evt_test_thin4",
        "v2.core.event_destination.ping",
        None,
        None,
    );
    assert_eq!(
        payload_outcome(&f.invoke(&stripe_webhook_of(&v2)).await),
        (200, "ignored".into())
    );
    assert_eq!(
        api.fetched(),
        [
            "/v1/invoices/in_thin1",
            "/v1/invoices/in_thin1",
            "/v1/invoices/in_thin2",
            "/v1/invoices/in_gone",
        ]
    );
    assert_eq!(credit(&db).await, 1200 + 300);
    assert_eq!(
        db.count("SELECT count(*) FROM processed_events WHERE event_id LIKE 'evt_test_thin%'")
            .await,
        4
    );
}

/// A connected account's thin event is completed in its `context`: the related invoice, which
/// Stripe serves only to a request naming that account in `Stripe-Context` (a request without
/// it gets 404, as the stand-in shows), is read in that context and credited; a second copy is
/// a duplicate. A 404 in a context the key does not reach is a 500 that says so, never a silent
/// `ignored`, and claims nothing; the same 404 with no context is still `ignored`.
#[tokio::test]
async fn a_connected_account_s_thin_event_is_completed_in_its_context_and_never_silently_dropped() {
    let db = TestDb::new().await;
    let api = StripeApi::start(KEY, 10, None).await;
    api.put_object_in(
        Some("acct_1Connected"),
        "/v1/invoices/in_connect1",
        invoice("in_connect1", "cus_Connect1", 4200),
    );
    let f = start(&db, &api, "3000").await;
    let connected = in_account(
        thin(
            "evt_test_connect1",
            "v1.invoice.paid",
            Some("/v1/invoices/in_connect1"),
            None,
        ),
        "acct_1Connected",
    );
    for expected in ["processed", "duplicate"] {
        assert_eq!(
            payload_outcome(&f.invoke(&stripe_webhook_of(&connected)).await),
            (200, expected.into())
        );
    }
    assert_eq!(credit(&db).await, 4200);

    // The context is what reaches the object: the same event without it finds nothing.
    let unreachable = in_account(
        thin(
            "evt_test_connect2",
            "v1.invoice.paid",
            Some("/v1/invoices/in_connect1"),
            None,
        ),
        "acct_1NotOurs",
    );
    let (status, _) = payload_outcome(&f.invoke(&stripe_webhook_of(&unreachable)).await);
    assert_eq!(
        status, 500,
        "a 404 in another account's context is not ignored"
    );
    let lines = f.lines("delivery");
    assert!(
        lines.iter().any(|l| l["event_id"] == "evt_test_connect2"
            && l["error"].as_str().is_some_and(
                |e| e.contains("in context acct_1NotOurs") && e.contains("not ignored")
            )),
        "{lines:#?}"
    );
    let mut platform = thin(
        "evt_test_connect3",
        "v1.invoice.paid",
        Some("/v1/invoices/in_connect1"),
        None,
    );
    platform["context"] = Value::Null;
    assert_eq!(
        payload_outcome(&f.invoke(&stripe_webhook_of(&platform)).await),
        (200, "ignored".into()),
        "without a context the invoice is not the key's account's: gone"
    );
    assert_eq!(credit(&db).await, 4200);
    assert_eq!(
        db.count("SELECT count(*) FROM processed_events WHERE event_id = 'evt_test_connect2'")
            .await,
        0,
        "the unreachable event is not claimed: Stripe's retry can still apply it"
    );
}

/// A thin event whose type has no effect here is claimed and answered `ignored` without any
/// read of Stripe's API: the restricted key DEPLOY prescribes may not read its object (a
/// `v1.charge.succeeded` would get 403 on every retry), and there is nothing to apply.
#[tokio::test]
async fn a_thin_event_whose_type_has_no_effect_is_ignored_with_no_fetch() {
    let db = TestDb::new().await;
    let api = StripeApi::start(KEY, 10, None).await;
    let f = start(&db, &api, "3000").await;
    for (id, kind, url) in [
        (
            "evt_test_noeffect1",
            "v1.charge.succeeded",
            "/v1/charges/ch_1",
        ),
        (
            "evt_test_noeffect2",
            "v1.invoice.created",
            "/v1/invoices/in_1",
        ),
    ] {
        let event = thin(id, kind, Some(url), None);
        assert_eq!(
            payload_outcome(&f.invoke(&stripe_webhook_of(&event)).await),
            (200, "ignored".into()),
            "{kind}"
        );
    }
    assert_eq!(api.fetched(), Vec::<String>::new(), "nothing read");
    assert_eq!(
        db.count("SELECT count(*) FROM processed_events WHERE event_id LIKE 'evt_test_noeffect%'")
            .await,
        2,
        "both claimed"
    );
}

/// A connected account's snapshot event (one carrying `account`) and a thin event of the same
/// account are treated alike, on the shipped tables keyed as they are: the snapshot by webhook
/// credits its customer; its thin twin, whose `snapshot_event` Stripe serves only in the
/// account's context, is a duplicate; a thin event whose snapshot was never delivered is read
/// in its context and credited; the same read in a context that does not hold the event (404)
/// is a 500 that claims nothing. The platform's own customer is untouched.
#[tokio::test]
async fn a_connected_account_s_snapshot_and_thin_events_apply_the_same_effects_in_its_context() {
    let db = TestDb::new().await;
    let api = StripeApi::start(KEY, 10, None).await;
    let f = start(&db, &api, "3000").await;
    let webhook = sample_event("stripe/invoice.paid.json");
    let platform: Value =
        serde_json::from_str(webhook["body"].as_str().expect("a body")).expect("JSON");
    let connected = |id: &str, customer: &str, amount: i64| {
        let mut event = platform.clone();
        event["id"] = json!(id);
        event["account"] = json!("acct_1Connected");
        event["data"]["object"]["customer"] = json!(customer);
        event["data"]["object"]["amount_paid"] = json!(amount);
        event
    };

    let snapshot = connected("evt_test_connsnap1", "cus_Connect2", 1500);
    api.add(snapshot.to_string().as_bytes(), true);
    assert_eq!(
        payload_outcome(&f.invoke(&stripe_webhook_of(&snapshot)).await),
        (200, "processed".into())
    );
    let twin = in_account(
        thin(
            "evt_test_conntwin1",
            "v1.invoice.paid",
            None,
            Some("evt_test_connsnap1"),
        ),
        "acct_1Connected",
    );
    assert_eq!(
        payload_outcome(&f.invoke(&stripe_webhook_of(&twin)).await),
        (200, "duplicate".into()),
        "the twin's snapshot is read in the account's context"
    );

    let undelivered = connected("evt_test_connsnap2", "cus_Connect2", 300);
    api.add(undelivered.to_string().as_bytes(), false);
    let elsewhere = in_account(
        thin(
            "evt_test_conntwin2",
            "v1.invoice.paid",
            None,
            Some("evt_test_connsnap2"),
        ),
        "acct_1NotOurs",
    );
    let (status, _) = payload_outcome(&f.invoke(&stripe_webhook_of(&elsewhere)).await);
    assert_eq!(status, 500, "a 404 in a context is never ignored");
    let twin = in_account(
        thin(
            "evt_test_conntwin3",
            "v1.invoice.paid",
            None,
            Some("evt_test_connsnap2"),
        ),
        "acct_1Connected",
    );
    assert_eq!(
        payload_outcome(&f.invoke(&stripe_webhook_of(&twin)).await),
        (200, "processed".into())
    );

    assert_eq!(credit_of(&db, "cus_Connect2").await, 1500 + 300);
    assert_eq!(credit_of(&db, "cus_LocalDev0001").await, 0);
    assert_eq!(
        db.count(
            "SELECT count(*) FROM processed_events WHERE event_id IN \
             ('evt_test_connsnap1', 'evt_test_connsnap2')"
        )
        .await,
        2,
        "each twin is claimed under its snapshot's id, the refused one not at all"
    );
}

/// stripe-recover finds a connected account's events only in that account's context, as
/// Stripe lists them: with `RECOVER_CONTEXTS` unset, a connected account's undelivered
/// snapshot event and thin event are not listed and nothing is applied; naming the account,
/// each is listed in its context, the thin one completed from its invoice read in that context,
/// and both are credited once; a second run finds both claimed.
#[tokio::test]
async fn stripe_recover_lists_and_completes_a_connected_account_s_events_in_its_context() {
    const SECRET_KEY: &str = "sk_test_claimonce_connect_recovery";
    let db = TestDb::new().await;
    let api = StripeApi::start(SECRET_KEY, 10, None).await;
    api.put_object_in(
        Some("acct_1Connected"),
        "/v1/invoices/in_connrec",
        invoice("in_connrec", "cus_ConnRec", 700),
    );
    let webhook = sample_event("stripe/invoice.paid.json");
    let mut snapshot: Value =
        serde_json::from_str(webhook["body"].as_str().expect("a body")).expect("JSON");
    snapshot["id"] = json!("evt_test_connrec1");
    snapshot["account"] = json!("acct_1Connected");
    snapshot["created"] = json!(claimonce_tests::sign::now() - 1800);
    snapshot["data"]["object"]["customer"] = json!("cus_ConnRec");
    snapshot["data"]["object"]["amount_paid"] = json!(50);
    api.add(snapshot.to_string().as_bytes(), false);
    let lost = in_account(
        thin(
            "evt_test_connrec2",
            "v1.invoice.paid",
            Some("/v1/invoices/in_connrec"),
            None,
        ),
        "acct_1Connected",
    );
    api.add(lost.to_string().as_bytes(), false);
    let recover = |contexts: &'static str| {
        let env = [
            ("DATABASE_URL", db.function_url()),
            ("STRIPE_API_BASE", api.url.as_str()),
            ("STRIPE_API_KEY", SECRET_KEY),
            ("RECOVER_THIN_EVENTS", "true"),
            ("RECOVER_CONTEXTS", contexts),
        ];
        async move { Scheduled::start("stripe-recover", &env).await.run().await }
    };

    let own_only = recover("").await.expect("the run");
    assert_eq!(
        (&own_only["listed"], &own_only["applied"]),
        (&json!(0), &json!(0)),
        "{own_only}"
    );
    assert_eq!(credit_of(&db, "cus_ConnRec").await, 0);

    let connected = recover("acct_1Connected").await.expect("the run");
    assert_eq!(
        (
            &connected["listed"],
            &connected["applied"],
            &connected["finished"]
        ),
        (&json!(2), &json!(2), &json!(true)),
        "{connected}"
    );
    assert_eq!(credit_of(&db, "cus_ConnRec").await, 50 + 700);
    assert!(
        api.fetched()
            .contains(&"/v1/invoices/in_connrec".to_owned()),
        "{:?}",
        api.fetched()
    );
    let again = recover("acct_1Connected").await.expect("the run");
    assert_eq!(
        (&again["applied"], &again["duplicates"]),
        (&json!(0), &json!(2)),
        "{again}"
    );
    assert_eq!(credit_of(&db, "cus_ConnRec").await, 50 + 700);
}

/// A snapshot event and its thin twin (`snapshot_event`) are one claim, whichever comes
/// first and by whichever path: the snapshot by webhook, then its twin (a duplicate, after one
/// `GET /v1/events/{id}`); then a thin event whose snapshot is the EventBridge sample, applied
/// under the snapshot's id, then that snapshot through EventBridge (a duplicate). Each credit
/// once.
#[tokio::test]
async fn a_snapshot_event_and_its_thin_twin_are_applied_once() {
    let db = TestDb::new().await;
    let api = StripeApi::start(KEY, 10, None).await;
    let f = start(&db, &api, "3000").await;

    let webhook = sample_event("stripe/invoice.paid.json");
    let snapshot: Value =
        serde_json::from_str(webhook["body"].as_str().expect("a body")).expect("JSON");
    api.add(snapshot.to_string().as_bytes(), true);
    assert_eq!(
        payload_outcome(&f.invoke(&stripe_webhook_of(&snapshot)).await),
        (200, "processed".into())
    );
    let id = snapshot["id"].as_str().expect("an id");
    let twin = thin("evt_test_twin1", "v1.invoice.paid", None, Some(id));
    assert_eq!(
        payload_outcome(&f.invoke(&stripe_webhook_of(&twin)).await),
        (200, "duplicate".into())
    );

    let bridged = sample_event("stripe/eventbridge/invoice.paid.json");
    let detail = &bridged["detail"];
    api.add(detail.to_string().as_bytes(), true);
    let id = detail["id"].as_str().expect("an id");
    let twin = thin("evt_test_twin2", "v1.invoice.paid", None, Some(id));
    assert_eq!(
        payload_outcome(&f.invoke(&stripe_webhook_of(&twin)).await),
        (200, "processed".into())
    );
    assert!(f.take(&[("m-1", &bridged)]).await.is_empty());
    assert_eq!(f.bridged(), ["duplicate"]);
    assert_eq!(
        api.fetched(),
        [
            format!("/v1/events/{}", snapshot["id"].as_str().unwrap_or_default()),
            format!("/v1/events/{id}"),
        ]
    );
    assert_eq!(
        db.count("SELECT count(*) FROM processed_events WHERE event_id LIKE 'evt_test_twin%'")
            .await,
        0,
        "a twin is claimed under its snapshot's id"
    );
    assert_eq!(credit(&db).await, 2000 + 700);
}

/// A thin event whose GET fails is a 500 that writes nothing, and its retry applies it: the
/// API answering 500 (the stand-in saw the GET), then the API holding its answer past
/// `SENDER_API_TIMEOUT_MS` (the 500 comes back while the stand-in still holds it, within
/// the bound and before the function's own deadline); both times the retry is processed once.
#[tokio::test]
async fn a_thin_event_whose_fetch_fails_or_is_slow_is_a_500_and_its_retry_applies_it() {
    let db = TestDb::new().await;
    let api = StripeApi::start(KEY, 10, None).await;
    api.put_object(
        "/v1/invoices/in_thin1",
        invoice("in_thin1", "cus_Thin1", 1200),
    );
    let f = start(&db, &api, "500").await;
    let event = thin(
        "evt_test_thin1",
        "v1.invoice.paid",
        Some("/v1/invoices/in_thin1"),
        None,
    );

    api.fail_next(500);
    assert_eq!(
        payload_outcome(&f.invoke(&stripe_webhook_of(&event)).await).0,
        500
    );
    assert_eq!(api.fetched().len(), 1, "the API was asked");
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 0);
    let line = f.lines("delivery").pop().expect("a delivery line");
    assert!(
        line["error"]
            .as_str()
            .is_some_and(|e| e.contains("HTTP 500")),
        "{line}"
    );

    let held = api.hold_retrievals();
    let asked = Instant::now();
    assert_eq!(
        payload_outcome(&f.invoke(&stripe_webhook_of(&event)).await).0,
        500
    );
    let took = asked.elapsed();
    assert_eq!(api.fetched().len(), 2, "the API was asked again");
    assert_eq!(held.available_permits(), 0, "still held when answered");
    assert!(took < Duration::from_secs(5), "within the bound: {took:?}");
    let line = f.lines("delivery").pop().expect("a delivery line");
    assert!(
        line["error"]
            .as_str()
            .is_some_and(|e| e.contains("no answer within 500 ms")),
        "{line}"
    );
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 0);

    held.add_permits(2);
    assert_eq!(
        payload_outcome(&f.invoke(&stripe_webhook_of(&event)).await),
        (200, "processed".into())
    );
    assert_eq!(credit(&db).await, 1200);
}

/// The subscription read from the API may already be newer than the thin event: it is kept
/// stamped with the time it was read, so a snapshot event created before that read (Stripe's
/// retry of an older update, arriving late) does not move it back.
#[tokio::test]
async fn an_object_newer_than_its_thin_event_stays_newest_wins() {
    let db = TestDb::new().await;
    let api = StripeApi::start(KEY, 10, None).await;
    api.put_object(
        "/v1/subscriptions/sub_thin1",
        json!({"id": "sub_thin1", "object": "subscription", "customer": "cus_Thin1",
               "status": "canceled"}),
    );
    let f = start(&db, &api, "3000").await;
    let mut event = thin(
        "evt_test_sub1",
        "v1.customer.subscription.updated",
        Some("/v1/subscriptions/sub_thin1"),
        None,
    );
    event["related_object"]["type"] = json!("subscription");
    assert_eq!(
        payload_outcome(&f.invoke(&stripe_webhook_of(&event)).await),
        (200, "processed".into())
    );
    let mut older = sample_event("stripe/customer.subscription.updated.json");
    let mut body: Value =
        serde_json::from_str(older["body"].as_str().expect("a body")).expect("JSON");
    body["id"] = json!("evt_1QLateSubscriptionUpdate1");
    body["created"] = json!(claimonce_tests::sign::now() - 60);
    body["data"]["object"]["id"] = json!("sub_thin1");
    body["data"]["object"]["status"] = json!("active");
    older = stripe_webhook_of(&body);
    assert_eq!(
        payload_outcome(&f.invoke(&older).await),
        (200, "processed".into())
    );
    assert_eq!(
        db.count(
            "SELECT count(*) FROM subscriptions \
             WHERE stripe_subscription_id = 'sub_thin1' AND status = 'canceled'"
        )
        .await,
        1
    );
}

/// A function given no `STRIPE_API_KEY` cannot complete a thin event: a 500 whose line names
/// the variable, nothing written; a snapshot event is applied as ever.
#[tokio::test]
async fn without_an_api_key_a_thin_event_is_a_500_naming_the_variable() {
    let db = TestDb::new().await;
    let f = Bridging::start("stripe", &db.function_url_as("stripe"), None).await;
    let event = thin(
        "evt_test_thin1",
        "v1.invoice.paid",
        Some("/v1/invoices/in_thin1"),
        None,
    );
    assert_eq!(
        payload_outcome(&f.invoke(&stripe_webhook_of(&event)).await).0,
        500
    );
    let line = f.lines("delivery").pop().expect("a delivery line");
    assert!(
        line["error"]
            .as_str()
            .is_some_and(|e| e.contains("STRIPE_API_KEY")),
        "{line}"
    );
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 0);
    assert_eq!(
        payload_outcome(
            &f.invoke(&stripe_webhook_of(
                &serde_json::from_str::<Value>(
                    sample_event("stripe/invoice.paid.json")["body"]
                        .as_str()
                        .expect("a body")
                )
                .expect("JSON")
            ))
            .await
        ),
        (200, "processed".into())
    );
}
