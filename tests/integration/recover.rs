//! Recovery from the senders' own records, with the real binaries: `github-recover` and
//! `stripe-recover` under the Runtime API emulator, against stand-ins that follow GitHub's
//! and Stripe's published contracts for the calls they make (`claimonce_tests::senders`), and
//! against localstripe (the emulator from PyPI) for the Stripe events it serves. What GitHub
//! redelivers is sent through the real GitHub receiver binary, as GitHub's delivery would be.

use std::time::{Duration, Instant};

use claimonce_tests::TestDb;
use claimonce_tests::apigw::{outcome, payload_outcome, post_stripe};
use claimonce_tests::lambda::{Deployed, Ran, Scheduled, function, sample_event};
use claimonce_tests::senders::{Attempt, GitHubApi, ResendApi, ResendEvent, StripeApi, test_app};
use claimonce_tests::sign::{self, now};
use claimonce_tests::until;
use serde_json::{Value, json};

const STRIPE_KEY: &str = "rk_test_claimonce_events_read";
/// A secret key, which Stripe's `/v2` API requires (thin events).
const SECRET_KEY: &str = "sk_test_claimonce_thin_recovery";
const RESEND_KEY: &str = "re_test_claimonce_full_access";
const RESEND_WEBHOOK: &str = "4dd369bc-aa82-4ff3-97de-514ae3000ee0";

fn ok(ran: Ran) -> Value {
    ran.unwrap_or_else(|e| panic!("the run failed: {e}"))
}

async fn github_recover(api: &GitHubApi) -> Scheduled {
    github_recover_with(api, &[]).await
}

/// github-recover reading `api`, with `extra` variables.
async fn github_recover_with(api: &GitHubApi, extra: &[(&str, &str)]) -> Scheduled {
    let (id, pem, _) = test_app();
    let mut env = vec![
        ("GITHUB_API_URL", api.url.as_str()),
        ("GITHUB_APP_ID", id),
        ("GITHUB_APP_PRIVATE_KEY", pem.as_str()),
    ];
    env.extend_from_slice(extra);
    Scheduled::start("github-recover", &env).await
}

/// GitHub's delivery of a sample (an API Gateway event of `events/github/`): its guid and
/// the request.
fn github_sample(name: &str) -> (String, Value) {
    let request = sample_event(&format!("github/{name}"));
    let guid = request["headers"]["x-github-delivery"]
        .as_str()
        .expect("a delivery id")
        .to_owned();
    (guid, request)
}

fn attempt(id: u64, guid: &str, age: u64, status_code: u16, request: &Value) -> Attempt {
    Attempt {
        id,
        guid: guid.to_owned(),
        delivered_at: now() - age,
        status_code,
        redelivery: false,
        request: request.clone(),
    }
}

/// What GitHub does with the redeliveries it was asked for: sends each one's request to the
/// receiver again and records the attempt with the receiver's answer.
async fn github_redelivers(api: &GitHubApi, receiver: &Deployed, asked: &[u64], next_id: &mut u64) {
    for id in asked {
        let original = api.attempt(*id);
        let (status, _) = payload_outcome(&receiver.invoke(&original.request).await);
        *next_id += 1;
        api.add(Attempt {
            id: *next_id,
            delivered_at: now(),
            status_code: status,
            redelivery: true,
            ..original
        });
    }
}

#[tokio::test]
async fn github_recover_redelivers_only_what_failed_and_the_redelivery_is_applied_once() {
    let db = TestDb::new().await;
    let receiver = Deployed::start(function("github"), db.function_url(), 1).await;
    let (app_id, _, public) = test_app();
    let api = GitHubApi::start(app_id, public, 100).await;
    // A: failed two hours ago (the receiver was not reached): the one to recover.
    let (a, a_request) = github_sample("issues.opened.json");
    api.add(attempt(1, &a, 7200, 502, &a_request));
    // B: delivered and applied an hour ago.
    let (b, b_request) = github_sample("installation.created.json");
    assert_eq!(payload_outcome(&receiver.invoke(&b_request).await).0, 200);
    api.add(attempt(2, &b, 3600, 200, &b_request));
    // C: failed three hours ago, then redelivered successfully.
    let (c, c_request) = github_sample("ping.json");
    api.add(attempt(3, &c, 10_800, 500, &c_request));
    assert_eq!(payload_outcome(&receiver.invoke(&c_request).await).0, 200);
    api.add(Attempt {
        redelivery: true,
        ..attempt(4, &c, 9000, 200, &c_request)
    });
    // D: failed a minute ago: within the grace period, perhaps still being answered.
    let (d, d_request) = github_sample("installation_repositories.added.json");
    api.add(attempt(5, &d, 60, 500, &d_request));

    let recover = github_recover(&api).await;
    let first = ok(recover.run().await);
    assert_eq!(first["failed"], 2, "{first}");
    assert_eq!(first["redelivered"], 1, "{first}");
    assert_eq!(first["in_grace"], 1, "{first}");
    assert_eq!(first["finished"], true, "{first}");
    assert!(
        first["oldest_failure_age_seconds"]
            .as_u64()
            .is_some_and(|age| (7200..7300).contains(&age)),
        "{first}"
    );
    assert_eq!(api.redeliveries(), [1], "only A, by its latest attempt");
    assert!(api.refused_jwts().is_empty(), "{:?}", api.refused_jwts());
    let line = &recover.lines("github recovery")[0];
    assert_eq!(line["Recovered"], 1.0, "{line}");
    assert_eq!(
        line["RecoveryOldestFailureAgeSeconds"],
        first["oldest_failure_age_seconds"].as_f64().expect("age")
    );
    assert_eq!(
        line["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
        json!([["Provider"]])
    );

    // GitHub's ledger key is the body's hash; B and C are in it, A not yet.
    let github_rows = "SELECT count(*) FROM processed_events WHERE provider = 'github'";
    assert_eq!(db.count(github_rows).await, 2);
    let mut next_id = 5;
    github_redelivers(&api, &receiver, &api.redeliveries(), &mut next_id).await;
    assert_eq!(
        db.count(github_rows).await,
        3,
        "the redelivery went through the signed receiver and was applied"
    );
    assert_eq!(api.attempt(6).status_code, 200);

    // The next run finds A delivered and D still in its grace: nothing to do.
    let second = ok(recover.run().await);
    assert_eq!(second["failed"], 1, "{second}");
    assert_eq!(second["redelivered"], 0, "{second}");
    assert_eq!(api.redeliveries(), [1]);
    assert_eq!(db.count(github_rows).await, 3, "A, B and C once each");
}

#[tokio::test]
async fn github_recover_pages_stops_at_a_rate_limit_and_the_next_run_carries_on() {
    let db = TestDb::new().await;
    let receiver = Deployed::start(function("github"), db.function_url(), 1).await;
    let (app_id, _, public) = test_app();
    // Two deliveries a page: six attempts are three pages.
    let api = GitHubApi::start(app_id, public, 2).await;
    let samples = [
        "issues.opened.json",
        "installation.created.json",
        "ping.json",
        "installation_repositories.added.json",
    ];
    for (i, name) in samples.iter().enumerate() {
        let (guid, request) = github_sample(name);
        api.add(attempt(
            i as u64 + 1,
            &guid,
            3600 * (5 - i as u64),
            500,
            &request,
        ));
    }
    // Two more failed guids (the samples' bodies under other delivery ids are not needed:
    // GitHub is asked, the receiver not yet).
    let (_, extra) = github_sample("ping.json");
    api.add(attempt(5, "guid-extra-1", 1800, 0, &extra));
    api.add(attempt(6, "guid-extra-2", 1200, 0, &extra));
    let recover = github_recover(&api).await;

    // Three pages, then the first redelivery, then a rate limit on the second (reset now).
    api.rate_limit_request(5, 0);
    let first = ok(recover.run().await);
    assert_eq!(first["pages"], 3, "{first}");
    assert_eq!(first["deliveries"], 6, "{first}");
    assert_eq!(first["redelivered"], 1, "{first}");
    assert_eq!(first["not_redelivered"], 5, "{first}");
    assert_eq!(first["finished"], false, "{first}");
    assert!(first["rate_limited_seconds"].is_u64(), "{first}");
    assert_eq!(api.redeliveries(), [1], "the oldest first");
    let mut next_id = 6;
    github_redelivers(&api, &receiver, &api.redeliveries(), &mut next_id).await;

    let second = ok(recover.run().await);
    assert_eq!(second["redelivered"], 5, "{second}");
    assert_eq!(second["finished"], true, "{second}");
    assert_eq!(
        api.redeliveries(),
        [1, 2, 3, 4, 5, 6],
        "oldest first, each once"
    );

    // A limit that resets in an hour: the run stops at its first request, and the next run in
    // this environment makes none at all.
    api.rate_limit_request(1, 3600);
    let third = ok(recover.run().await);
    assert!(
        third["rate_limited_seconds"]
            .as_u64()
            .is_some_and(|s| s > 3000),
        "{third}"
    );
    let asked = api.requests().len();
    let fourth = ok(recover.run().await);
    assert!(
        fourth["rate_limited_seconds"]
            .as_u64()
            .is_some_and(|s| s > 3000),
        "{fourth}"
    );
    assert_eq!(api.requests().len(), asked, "no request before the reset");
}

/// A busy App: the full listing's page cap ends before the window's start, with successes
/// only. The failures' own listing (`status=failure`) reaches the two failed guids; the one
/// with a 5xx is redelivered first although the one that only ever got a 413 is older, and
/// the oldest failure reported is the 413's. When neither listing reaches the window's start,
/// what was listed is still redelivered and the oldest failure reported is the window's age.
#[tokio::test]
async fn github_recover_reaches_failures_past_its_page_cap_and_puts_4xx_only_failures_last() {
    let (app_id, _, public) = test_app();
    let api = GitHubApi::start(app_id, public.clone(), 2).await;
    let (_, request) = github_sample("ping.json");
    api.add(attempt(1, "guid-server-error", 10 * 3600, 500, &request));
    api.add(attempt(2, "guid-too-large", 20 * 3600, 413, &request));
    for i in 3..=6 {
        api.add(attempt(
            i,
            &format!("guid-ok-{i}"),
            3600 * (i - 2),
            200,
            &request,
        ));
    }
    let limits = [
        ("RECOVER_MAX_PAGES", "1"),
        ("RECOVER_MAX_REDELIVERIES", "1"),
    ];
    let recover = github_recover_with(&api, &limits).await;
    let first = ok(recover.run().await);
    assert_eq!(first["listed_failures"], true, "{first}");
    assert_eq!(first["failed"], 2, "{first}");
    assert_eq!(first["redelivered"], 1, "{first}");
    assert_eq!(api.redeliveries(), [1], "the 5xx before the older 413");
    let age = first["oldest_failure_age_seconds"]
        .as_u64()
        .expect("an age");
    assert!((20 * 3600..20 * 3600 + 120).contains(&age), "{first}");

    // One delivery a page and one page a listing: neither reaches the window's start.
    let api = GitHubApi::start(app_id, public, 1).await;
    api.add(attempt(1, "guid-a", 5 * 3600, 502, &request));
    api.add(attempt(2, "guid-b", 6 * 3600, 502, &request));
    let recover = github_recover_with(&api, &limits).await;
    let second = ok(recover.run().await);
    assert_eq!(second["redelivered"], 1, "what was listed: {second}");
    assert_eq!(api.redeliveries(), [1]);
    assert_eq!(second["finished"], false, "{second}");
    let window = 72 * 3600 - 3600;
    let age = second["oldest_failure_age_seconds"]
        .as_u64()
        .expect("an age");
    assert!((window..window + 120).contains(&age), "{second}");
}

#[tokio::test]
async fn github_recover_stops_between_redeliveries_when_its_budget_ends() {
    let (app_id, _, public) = test_app();
    let api = GitHubApi::start(app_id, public, 100).await;
    let (_, request) = github_sample("ping.json");
    for i in 1..=3 {
        api.add(attempt(i, &format!("guid-{i}"), 3600 * i, 500, &request));
    }
    let recover = github_recover(&api).await;
    let held = api.hold_redeliveries();
    // The function keeps 22 s (a request's 20 s and its line) before the deadline: a deadline
    // 25 s away leaves a budget of 3 s.
    let started = Instant::now();
    let budget = Duration::from_secs(3);
    let scheduled = json!({});
    let run = recover.run_within(&scheduled, Duration::from_secs(25));
    let release = async {
        until("the first redelivery request reaches GitHub", || {
            api.waiting() == 1
        })
        .await;
        // Held until the budget has ended, then answered: the function must not start another.
        tokio::time::sleep(
            (started + budget + Duration::from_millis(200))
                .saturating_duration_since(Instant::now()),
        )
        .await;
        held.add_permits(10);
    };
    let (ran, ()) = tokio::join!(run, release);
    let report = ok(ran);
    assert_eq!(report["redelivered"], 1, "{report}");
    assert_eq!(report["not_redelivered"], 2, "{report}");
    assert_eq!(report["finished"], false, "{report}");
    assert_eq!(api.redeliveries().len(), 1);
}

#[tokio::test]
async fn github_recover_s_jwt_is_refused_by_another_app_and_the_run_fails() {
    let (_, _, public) = test_app();
    let api = GitHubApi::start("999999", public, 100).await;
    let recover = github_recover(&api).await;
    let failed = recover
        .run()
        .await
        .expect_err("a refused JWT fails the run");
    assert!(failed.contains("401"), "{failed}");
    assert_eq!(
        api.refused_jwts(),
        ["'Issuer' claim ('iss') must be the App"]
    );
    let line = &recover.lines("github recovery")[0];
    assert_eq!(line["level"], "ERROR", "{line}");
    assert!(
        !line.to_string().contains("BEGIN RSA"),
        "no key in the line"
    );
}

/// An `invoice.paid` event created `age` seconds ago.
fn invoice(id: &str, customer: &str, amount: i64, age: u64) -> Vec<u8> {
    let mut event: Value =
        serde_json::from_slice(&sign::invoice_paid(id, customer, amount)).expect("JSON");
    event["created"] = json!(now() - age);
    serde_json::to_vec(&event).expect("JSON")
}

/// stripe-recover on the database at `database_url`, reading `api` with the suite's key.
async fn stripe_recover(database_url: &str, api: &StripeApi, extra: &[(&str, &str)]) -> Scheduled {
    let mut env = vec![
        ("DATABASE_URL", database_url),
        ("STRIPE_API_BASE", api.url.as_str()),
        ("STRIPE_API_KEY", STRIPE_KEY),
    ];
    env.extend_from_slice(extra);
    Scheduled::start("stripe-recover", &env).await
}

async fn credit(db: &TestDb, customer: &str) -> i64 {
    db.count(&format!(
        "SELECT coalesce(sum(credit_balance_cents), 0)::bigint FROM customers WHERE stripe_customer_id = '{customer}'"
    ))
    .await
}

#[tokio::test]
async fn stripe_recover_applies_only_the_undelivered_event_once_and_a_second_run_changes_nothing() {
    let db = TestDb::new().await;
    let (webhooks, captured) = db.receiver(sign::stripe());
    let api = StripeApi::start(STRIPE_KEY, 100, None).await;
    // Delivered: applied by its webhook.
    let delivered = invoice("evt_rec_delivered", "cus_rec", 1500, 3600);
    assert_eq!(outcome(&post_stripe(&webhooks, &delivered).await).0, 200);
    api.add(&delivered, true);
    // Not delivered, never arrived: the one to apply.
    let lost = invoice("evt_rec_lost", "cus_rec", 700, 3000);
    api.add(&lost, false);
    // Not delivered as far as Stripe knows, but its webhook did commit (the 200 was lost).
    let arrived = invoice("evt_rec_arrived", "cus_rec", 50, 2400);
    assert_eq!(outcome(&post_stripe(&webhooks, &arrived).await).0, 200);
    api.add(&arrived, false);
    // Five days old: outside the default window of 96 hours.
    api.add(&invoice("evt_rec_old", "cus_rec", 9, 5 * 86_400), false);
    // A minute old: within the grace period, left to its webhook.
    api.add(&invoice("evt_rec_young", "cus_rec", 3, 60), false);

    let recover = stripe_recover(db.function_url(), &api, &[]).await;
    let first = ok(recover.run().await);
    assert_eq!(
        (
            &first["listed"],
            &first["applied"],
            &first["duplicates"],
            &first["failed"]
        ),
        (&json!(2), &json!(1), &json!(1), &json!(0)),
        "{first}"
    );
    assert_eq!(first["finished"], true, "{first}");
    assert_eq!(credit(&db, "cus_rec").await, 1500 + 700 + 50);
    assert_eq!(
        db.count("SELECT count(*) FROM processed_events WHERE event_id = 'evt_rec_lost' AND payload_sha256 IS NULL").await,
        1,
        "the API's JSON is not the webhook's bytes: no fingerprint"
    );
    let line = &recover.lines("stripe recovery")[0];
    assert_eq!(
        (
            line["Recovered"].as_f64(),
            line["RecoveredDuplicates"].as_f64()
        ),
        (Some(1.0), Some(1.0)),
        "{line}"
    );

    let second = ok(recover.run().await);
    assert_eq!(
        (&second["applied"], &second["duplicates"]),
        (&json!(0), &json!(2)),
        "{second}"
    );
    assert_eq!(credit(&db, "cus_rec").await, 2250, "nothing twice");

    // On demand, a week back: the old event too, once.
    let week = ok(recover
        .run_within(&json!({"lookback_hours": 168}), Duration::from_secs(60))
        .await);
    assert_eq!(
        (&week["applied"], &week["duplicates"]),
        (&json!(1), &json!(2)),
        "{week}"
    );
    assert_eq!(credit(&db, "cus_rec").await, 2259);
    let refused = recover
        .run_within(&json!({"lookback_hours": 721}), Duration::from_secs(60))
        .await
        .expect_err("past Stripe's 30 days");
    assert!(refused.contains("30 days"), "{refused}");

    // The webhook's own retry of the recovered event, later: a duplicate, and no warning of a
    // different payload (there is no fingerprint to compare).
    assert_eq!(
        outcome(&post_stripe(&webhooks, &lost).await),
        (200, "duplicate".into())
    );
    let logged = captured.lock().expect("log").join("\n");
    assert!(!logged.contains("different payload"), "{logged}");
}

#[tokio::test]
async fn stripe_recover_pages_to_the_boundary_and_a_rate_limit_ends_the_run_cleanly() {
    let db = TestDb::new().await;
    // Two events a page: six undelivered events are three pages, the last one full.
    let api = StripeApi::start(STRIPE_KEY, 2, None).await;
    for i in 0..6 {
        api.add(
            &invoice(&format!("evt_page_{i}"), "cus_page", 100, 7200 - i * 60),
            false,
        );
    }
    let recover = stripe_recover(db.function_url(), &api, &[]).await;
    api.rate_limit_request(2);
    let first = ok(recover.run().await);
    assert_eq!(first["pages"], 1, "{first}");
    assert_eq!(first["applied"], 2, "the page it had: {first}");
    assert_eq!(first["rate_limited_seconds"], 60, "{first}");
    assert_eq!(first["finished"], false, "{first}");
    assert_eq!(credit(&db, "cus_page").await, 200);

    let asked = api.requests();
    let second = ok(recover.run().await);
    assert_eq!(second["pages"], 3, "{second}");
    assert_eq!(
        api.requests() - asked,
        3,
        "has_more false on the third page: no fourth request"
    );
    assert_eq!(
        (&second["applied"], &second["duplicates"]),
        (&json!(4), &json!(2)),
        "{second}"
    );
    assert_eq!(second["finished"], true, "{second}");
    assert_eq!(credit(&db, "cus_page").await, 600);
}

/// More undelivered events than a run's cap, most of them failed only at some other endpoint
/// of the account: successive runs work through the window from its old end, each applying
/// the oldest still to apply (what an earlier run applied is found in the ledger and not
/// counted), and each reports the age of the oldest it has not applied, until none is left.
#[tokio::test]
async fn stripe_recover_reaches_every_event_in_its_window_whatever_its_cap() {
    let db = TestDb::new().await;
    let api = StripeApi::start(STRIPE_KEY, 100, None).await;
    // 250 undelivered invoices, a minute apart, the oldest about 8 hours old.
    for i in 0..250_u64 {
        api.add(
            &invoice(&format!("evt_cap_{i:03}"), "cus_cap", 1, 30_000 - i * 60),
            false,
        );
    }
    let recover = stripe_recover(db.function_url(), &api, &[("RECOVER_MAX_EVENTS", "100")]).await;
    for (run, applied, credited) in [(1, 100, 100), (2, 100, 200), (3, 50, 250)] {
        let report = ok(recover.run().await);
        assert_eq!(report["listed"], 250, "run {run}: {report}");
        assert_eq!(report["applied"], applied, "run {run}: {report}");
        assert_eq!(
            report["duplicates"],
            credited - applied,
            "run {run}: {report}"
        );
        assert_eq!(credit(&db, "cus_cap").await, credited, "run {run}");
        // The oldest left: event 100 after the first run (30,000 - 100 * 60 seconds old).
        let age = report["oldest_failure_age_seconds"]
            .as_u64()
            .expect("an age");
        let left = 250 - credited;
        if left > 0 {
            let oldest_left = 30_000 - u64::try_from(credited).expect("n") * 60;
            assert!(
                (oldest_left..oldest_left + 120).contains(&age),
                "run {run}: {report}"
            );
            assert_eq!(report["finished"], false, "run {run}: {report}");
        } else {
            assert_eq!(age, 0, "run {run}: {report}");
            assert_eq!(report["finished"], true, "run {run}: {report}");
        }
    }
    let fourth = ok(recover.run().await);
    assert_eq!(
        (&fourth["applied"], &fourth["duplicates"]),
        (&json!(0), &json!(250))
    );
    assert_eq!(credit(&db, "cus_cap").await, 250);
}

/// A thin `v1.invoice.paid` created `age` seconds ago, its invoice at `/v1/invoices/{invoice}`,
/// with the snapshot event it is the twin of, if any.
fn thin_invoice(id: &str, invoice: &str, age: u64, snapshot_event: Option<&str>) -> Vec<u8> {
    let created = i64::try_from(now() - age)
        .ok()
        .and_then(claimonce::timestamp::rfc3339_from_unix)
        .expect("a date");
    let mut event = json!({
        "id": id, "object": "v2.core.event", "type": "v1.invoice.paid", "livemode": false,
        "created": created, "context": null,
        "related_object": {"id": invoice, "type": "invoice", "url": format!("/v1/invoices/{invoice}")},
    });
    if let Some(snapshot) = snapshot_event {
        event["snapshot_event"] = json!(snapshot);
    }
    serde_json::to_vec(&event).expect("JSON")
}

/// Thin events whose delivery did not succeed are listed from `GET /v2/core/events` (paged by
/// `next_page_url`) beside the snapshot events, each completed from the API before its claim:
/// a lost one applied from its invoice as Stripe holds it, one whose invoice is gone claimed
/// and ignored, the twin of a snapshot event that did arrive a duplicate; a second run changes
/// nothing. Without `RECOVER_THIN_EVENTS` no thin event is listed.
#[tokio::test]
async fn stripe_recover_applies_thin_events_whose_delivery_failed_once() {
    let db = TestDb::new().await;
    let (webhooks, _) = db.receiver(sign::stripe());
    // Two events a page: the three undelivered thin events are two pages. Stripe's v2 API
    // takes a secret key only.
    let api = StripeApi::start(SECRET_KEY, 2, None).await;
    api.put_object(
        "/v1/invoices/in_rt_lost",
        json!({"id": "in_rt_lost", "object": "invoice", "customer": "cus_thinrec",
               "amount_paid": 700, "amount_due": 700, "status": "paid"}),
    );
    // A snapshot event whose webhook arrived, and its thin twin, undelivered as Stripe knows.
    let snapshot = invoice("evt_rt_snapshot", "cus_thinrec", 50, 2400);
    assert_eq!(outcome(&post_stripe(&webhooks, &snapshot).await).0, 200);
    api.add(&snapshot, true);
    api.add(
        &thin_invoice(
            "evt_rt_twin",
            "in_rt_snapshot",
            2400,
            Some("evt_rt_snapshot"),
        ),
        false,
    );
    api.add(
        &thin_invoice("evt_rt_lost", "in_rt_lost", 3000, None),
        false,
    );
    api.add(
        &thin_invoice("evt_rt_gone", "in_rt_gone", 2000, None),
        false,
    );
    // Delivered: not listed.
    api.add(
        &thin_invoice("evt_rt_delivered", "in_rt_lost", 1000, None),
        true,
    );
    // A snapshot event that never arrived, beside them.
    api.add(&invoice("evt_rt_v1_lost", "cus_thinrec", 9, 1800), false);

    let snapshots_only =
        stripe_recover(db.function_url(), &api, &[("STRIPE_API_KEY", SECRET_KEY)]).await;
    let before = ok(snapshots_only.run().await);
    assert_eq!(
        (
            &before["listed"],
            &before["thin_listed"],
            &before["applied"]
        ),
        (&json!(1), &json!(0), &json!(1)),
        "{before}"
    );
    assert_eq!(credit(&db, "cus_thinrec").await, 50 + 9);

    let recover = stripe_recover(
        db.function_url(),
        &api,
        &[
            ("RECOVER_THIN_EVENTS", "true"),
            ("STRIPE_API_KEY", SECRET_KEY),
        ],
    )
    .await;
    let first = ok(recover.run().await);
    assert_eq!(
        (
            &first["pages"],
            &first["listed"],
            &first["thin_listed"],
            &first["applied"],
            &first["duplicates"],
            &first["failed"],
        ),
        (
            &json!(3),
            &json!(4),
            &json!(3),
            &json!(2),
            &json!(2),
            &json!(0)
        ),
        "{first}"
    );
    assert_eq!(first["finished"], true, "{first}");
    assert_eq!(credit(&db, "cus_thinrec").await, 50 + 9 + 700);
    assert_eq!(
        db.count(
            "SELECT count(*) FROM processed_events WHERE event_id IN ('evt_rt_lost', 'evt_rt_gone')"
        )
        .await,
        2,
        "each claimed under its own id"
    );
    assert_eq!(
        db.count("SELECT count(*) FROM processed_events WHERE event_id = 'evt_rt_twin'")
            .await,
        0,
        "the twin is its snapshot's claim"
    );
    let fetched = api.fetched();
    for path in [
        "/v1/invoices/in_rt_lost",
        "/v1/invoices/in_rt_gone",
        "/v1/events/evt_rt_snapshot",
    ] {
        assert!(fetched.iter().any(|f| f == path), "{path}: {fetched:?}");
    }

    let second = ok(recover.run().await);
    assert_eq!(
        (&second["applied"], &second["duplicates"]),
        (&json!(0), &json!(4)),
        "{second}"
    );
    assert_eq!(credit(&db, "cus_thinrec").await, 759, "nothing twice");

    // With a restricted key, which `/v1/events` takes, the thin listing is refused: the run
    // fails naming it, and nothing of the thin list is applied.
    let restricted = StripeApi::start(STRIPE_KEY, 2, None).await;
    restricted.add(
        &thin_invoice("evt_rt_restricted", "in_rt_lost", 3000, None),
        false,
    );
    let refused = stripe_recover(
        db.function_url(),
        &restricted,
        &[("RECOVER_THIN_EVENTS", "true")],
    )
    .await
    .run()
    .await
    .expect_err("v2 takes no restricted key");
    assert!(refused.contains("HTTP 401"), "{refused}");
    assert_eq!(
        db.count("SELECT count(*) FROM processed_events WHERE event_id = 'evt_rt_restricted'")
            .await,
        0
    );
}

/// A page that holds no event but says there are more (a listing Stripe should never send)
/// ends the run with an error instead of asking for the same page until the budget ends; what
/// was listed before it is applied.
#[tokio::test]
async fn stripe_recover_ends_its_run_on_an_empty_page_that_says_there_are_more() {
    let db = TestDb::new().await;
    let api = StripeApi::start(STRIPE_KEY, 2, None).await;
    for i in 0..4 {
        api.add(
            &invoice(&format!("evt_hollow_{i}"), "cus_hollow", 100, 7200 - i * 60),
            false,
        );
    }
    let recover = stripe_recover(db.function_url(), &api, &[]).await;
    api.hollow_page_request(2);
    let failed = recover.run().await.expect_err("the run fails");
    assert!(failed.contains("no events"), "{failed}");
    assert_eq!(api.requests(), 2, "no request after the empty page");
    assert_eq!(
        credit(&db, "cus_hollow").await,
        200,
        "the first page applied"
    );
}

#[tokio::test]
async fn stripe_recover_with_a_key_stripe_refuses_fails_the_run_without_showing_it() {
    let db = TestDb::new().await;
    db.direct_because("the run fails before it connects");
    let api = StripeApi::start("rk_test_another", 100, None).await;
    let recover = stripe_recover(db.function_url(), &api, &[]).await;
    let failed = recover
        .run()
        .await
        .expect_err("a refused key fails the run");
    assert!(failed.contains("HTTP 401"), "{failed}");
    let line = &recover.lines("stripe recovery")[0];
    assert!(!line.to_string().contains(STRIPE_KEY), "{line}");
}

#[tokio::test]
async fn stripe_recover_applies_localstripe_s_events_through_the_claim() {
    let db = TestDb::new().await;
    let localstripe = claimonce_tests::senders::localstripe().await;
    let key = "sk_test_claimonce";
    // Two customers: localstripe records a customer.created event for each.
    let tag = format!("{}", now());
    let mut ids = Vec::new();
    for who in ["delivered", "lost"] {
        let email = format!("{who}-{tag}@example.com");
        ids.push(claimonce_tests::senders::localstripe_customer(localstripe, key, &email).await);
    }
    let events = claimonce_tests::senders::localstripe_events(localstripe, key).await;
    let event_of = |customer: &str| {
        events
            .iter()
            .find(|e| e["type"] == "customer.created" && e["data"]["object"]["id"] == customer)
            .cloned()
            .expect("localstripe's customer.created")
    };
    let (delivered, lost) = (event_of(&ids[0]), event_of(&ids[1]));
    let api = StripeApi::start(
        STRIPE_KEY,
        100,
        Some((localstripe.to_owned(), key.to_owned())),
    )
    .await;
    // The first one's webhook arrived (its bytes as localstripe renders the event).
    let (webhooks, _) = db.receiver(sign::stripe());
    let body = serde_json::to_vec(&delivered).expect("JSON");
    assert_eq!(
        outcome(&post_stripe(&webhooks, &body).await),
        (200, "ignored".into())
    );
    // Every other event localstripe holds (another test's) counts as delivered here.
    for e in &events {
        if e["id"] != lost["id"] {
            api.delivered(e["id"].as_str().expect("id"));
        }
    }
    let recover = stripe_recover(db.function_url(), &api, &[("RECOVER_GRACE_SECONDS", "0")]).await;
    let report = ok(recover.run().await);
    assert_eq!(
        (&report["listed"], &report["applied"]),
        (&json!(1), &json!(1)),
        "{report}"
    );
    for event in [&delivered, &lost] {
        assert_eq!(
            db.count(&format!(
                "SELECT count(*) FROM processed_events WHERE provider = 'stripe' AND event_id = '{}' AND event_type = 'customer.created'",
                event["id"].as_str().expect("id")
            ))
            .await,
            1
        );
    }
    let again = ok(recover.run().await);
    assert_eq!(
        (&again["applied"], &again["duplicates"]),
        (&json!(0), &json!(1)),
        "{again}"
    );
}

#[tokio::test]
async fn stripe_recover_stops_between_events_when_its_budget_ends() {
    let db = TestDb::new().await;
    let (outage, through) = claimonce_tests::outage::Outage::in_front_of(db.function_url())
        .await
        .expect("a forwarder in front of the database");
    let api = StripeApi::start(STRIPE_KEY, 100, None).await;
    api.add(&invoice("evt_budget_0", "cus_budget", 1, 7200), false);
    let recover = stripe_recover(&through, &api, &[]).await;
    // Its connection first (a run that applies the oldest event), then hold what it sends.
    assert_eq!(ok(recover.run().await)["applied"], 1);
    for i in 1..=3 {
        api.add(
            &invoice(&format!("evt_budget_{i}"), "cus_budget", 10, 7200 - i * 60),
            false,
        );
    }
    outage.hold();
    // The function keeps 22 s before the deadline (a request's 20 s and its line): a deadline
    // 25 s away leaves a budget of 3 s.
    let started = Instant::now();
    let scheduled = json!({});
    let run = recover.run_within(&scheduled, Duration::from_secs(25));
    let release = async {
        until("the ledger look-up is at the database", || {
            outage.waiting() > 0
        })
        .await;
        // The look-up through; then the first event's statement is held until the budget has
        // ended (below the delivery's 5 s deadline), then let through: the function must not
        // start another event.
        outage.release_one();
        until("the first event's statement is at the database", || {
            outage.waiting() > 0
        })
        .await;
        let end = started + Duration::from_secs(3) + Duration::from_millis(200);
        tokio::time::sleep(end.saturating_duration_since(Instant::now())).await;
        outage.release();
    };
    let (ran, ()) = tokio::join!(run, release);
    let report = ok(ran);
    assert_eq!(report["listed"], 4, "{report}");
    assert_eq!(
        report["duplicates"], 1,
        "the oldest, applied by the first run: {report}"
    );
    assert_eq!(report["applied"], 1, "the held one: {report}");
    assert_eq!(report["not_tried"], 2, "{report}");
    assert_eq!(report["finished"], false, "{report}");
    assert_eq!(credit(&db, "cus_budget").await, 11);
    // The next run carries on.
    let next = ok(recover.run().await);
    assert_eq!(
        (&next["applied"], &next["duplicates"]),
        (&json!(2), &json!(2)),
        "{next}"
    );
    assert_eq!(credit(&db, "cus_budget").await, 31);
}

/// resend-recover reading `api` for the suite's webhook, with `extra` variables.
async fn resend_recover(api: &ResendApi, extra: &[(&str, &str)]) -> Scheduled {
    let mut env = vec![
        ("RESEND_API_BASE", api.url.as_str()),
        ("RESEND_API_KEY", RESEND_KEY),
        ("RESEND_WEBHOOK_ID", RESEND_WEBHOOK),
    ];
    env.extend_from_slice(extra);
    Scheduled::start("resend-recover", &env).await
}

/// A Resend event `id` of sample `name` (`events/resend/`), created `age` seconds ago, its
/// delivery signed with the local secret under that message id.
fn resend_event(name: &str, id: &str, age: u64, status: &str) -> ResendEvent {
    let mut request = sample_event(&format!("resend/{name}"));
    request["headers"]["svix-id"] = json!(id);
    claimonce_local::sign::resign(&mut request, now()).expect("sign");
    let body: Value =
        serde_json::from_str(request["body"].as_str().expect("a text body")).expect("JSON");
    ResendEvent {
        id: id.to_owned(),
        kind: body["type"].as_str().expect("a type").to_owned(),
        created_at: now() - age,
        status: status.to_owned(),
        request,
    }
}

/// What Resend does with the replays it was asked for: delivers each event again, freshly
/// signed under the same message id, and records the outcome as the event's status.
async fn resend_replays(api: &ResendApi, receiver: &Deployed, asked: &[String]) {
    for id in asked {
        let mut request = api.event(id).request;
        claimonce_local::sign::resign(&mut request, now()).expect("sign");
        let (status, _) = payload_outcome(&receiver.invoke(&request).await);
        api.set_status(id, if status == 200 { "success" } else { "failed" });
    }
}

/// Only the events whose status is `failed` are replayed, oldest first, once: not one Resend
/// is still attempting, not one delivered, not one older than the window. The replay comes
/// back signed through the real Resend receiver and is applied once; the next run has nothing
/// to do. Two events a page, so the listing pages with `after`.
#[tokio::test]
async fn resend_recover_replays_only_failed_events_oldest_first_and_the_replay_is_applied_once() {
    let db = TestDb::new().await;
    let receiver = Deployed::start(function("resend"), db.function_url(), 1).await;
    let api = ResendApi::start(RESEND_KEY, RESEND_WEBHOOK, 2).await;
    let delivered = resend_event("email.delivered.json", "msg_rec_delivered", 3600, "success");
    assert_eq!(
        payload_outcome(&receiver.invoke(&delivered.request).await),
        (200, "processed".into())
    );
    api.add(delivered);
    api.add(resend_event(
        "email.bounced.json",
        "msg_rec_failed_old",
        5 * 3600,
        "failed",
    ));
    api.add(resend_event(
        "email.delivered.json",
        "msg_rec_attempting",
        1800,
        "attempting",
    ));
    api.add(resend_event(
        "email.delivered.json",
        "msg_rec_failed_new",
        3 * 3600,
        "failed",
    ));
    // Outside the default 72 hours.
    api.add(resend_event(
        "email.delivered.json",
        "msg_rec_gone",
        80 * 3600,
        "failed",
    ));

    let recover = resend_recover(&api, &[]).await;
    let first = ok(recover.run().await);
    assert_eq!(first["listed"], 4, "{first}");
    assert_eq!(first["failed"], 2, "{first}");
    assert_eq!(first["in_flight"], 1, "{first}");
    assert_eq!(first["replayed"], 2, "{first}");
    assert_eq!(first["finished"], true, "{first}");
    assert!(first["pages"].as_u64().is_some_and(|p| p >= 3), "{first}");
    let age = first["oldest_failure_age_seconds"]
        .as_u64()
        .expect("an age");
    assert!((5 * 3600..5 * 3600 + 120).contains(&age), "{first}");
    assert_eq!(
        api.replays(),
        ["msg_rec_failed_old", "msg_rec_failed_new"],
        "oldest first"
    );
    let line = &recover.lines("resend recovery")[0];
    assert_eq!(line["Recovered"], 2.0, "{line}");
    assert_eq!(line["Provider"], "resend", "{line}");
    assert!(!line.to_string().contains(RESEND_KEY), "{line}");

    let resend_rows = "SELECT count(*) FROM processed_events WHERE provider = 'resend'";
    assert_eq!(db.count(resend_rows).await, 1);
    resend_replays(&api, &receiver, &api.replays()).await;
    assert_eq!(
        db.count(resend_rows).await,
        3,
        "both replays applied through the receiver"
    );

    let second = ok(recover.run().await);
    assert_eq!(
        (&second["failed"], &second["replayed"]),
        (&json!(0), &json!(0)),
        "{second}"
    );
    assert_eq!(api.replays().len(), 2, "each asked for once");
    assert_eq!(second["oldest_failure_age_seconds"], 0, "{second}");
}

/// The per-run cap and a rate limit end a run cleanly (not an error); the next run carries
/// on; a key Resend refuses fails the run without showing it.
#[tokio::test]
async fn resend_recover_keeps_to_its_cap_stops_at_a_rate_limit_and_fails_on_a_refused_key() {
    let api = ResendApi::start(RESEND_KEY, RESEND_WEBHOOK, 100).await;
    for i in 0..3_u64 {
        api.add(resend_event(
            "email.delivered.json",
            &format!("msg_cap_{i}"),
            3600 * (4 - i),
            "failed",
        ));
    }
    let recover = resend_recover(&api, &[("RECOVER_MAX_REPLAYS", "1")]).await;
    let first = ok(recover.run().await);
    assert_eq!(
        (&first["replayed"], &first["not_replayed"]),
        (&json!(1), &json!(2)),
        "{first}"
    );
    assert_eq!(first["finished"], false, "{first}");
    assert_eq!(api.replays(), ["msg_cap_0"]);
    // The listing, then a 429 on the first replay.
    api.rate_limit_request(2);
    let limited = ok(recover.run().await);
    assert_eq!(limited["rate_limited_seconds"], 1, "{limited}");
    assert_eq!(limited["replayed"], 0, "{limited}");
    // The next runs carry on, one a run, with what is still failed (a new environment: this
    // one waits out the rate limit it was told): each of the rest is replayed once, and then
    // nothing is left.
    let recover = resend_recover(&api, &[("RECOVER_MAX_REPLAYS", "1")]).await;
    for (n, id) in [(2, "msg_cap_1"), (3, "msg_cap_2")] {
        let run = ok(recover.run().await);
        assert_eq!(run["replayed"], 1, "run {n}: {run}");
        assert_eq!(
            api.replays().last().map(String::as_str),
            Some(id),
            "run {n}"
        );
    }
    let done = ok(recover.run().await);
    assert_eq!(
        (&done["replayed"], &done["finished"]),
        (&json!(0), &json!(true)),
        "{done}"
    );
    assert_eq!(
        api.replays(),
        ["msg_cap_0", "msg_cap_1", "msg_cap_2"],
        "each once"
    );

    let refused = ResendApi::start("re_another_key", RESEND_WEBHOOK, 100).await;
    let recover = resend_recover(&refused, &[]).await;
    let failed = recover
        .run()
        .await
        .expect_err("a refused key fails the run");
    assert!(failed.contains("HTTP 401"), "{failed}");
    let line = &recover.lines("resend recovery")[0];
    assert!(!line.to_string().contains(RESEND_KEY), "{line}");
}
