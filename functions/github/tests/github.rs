//! The GitHub receiver end to end, through the event reader the binary uses, into a real
//! PostgreSQL: the body-keyed ledger (redeliveries and replays under a fresh delivery id are
//! duplicates), installations kept newest-first whatever the delivery order, `ping`, events
//! forwarded to the outbox unchanged, and a failing effect rolled back with its claim.

// A test asserts by panicking; its helpers too.
#![allow(clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use claimonce::Receiver;
use claimonce::verify::body_hmac::sign;
use claimonce_tests::TestDb;
use claimonce_tests::apigw::outcome;
use claimonce_tests::db::all_at_once;
use github_webhook::GitHub;
use serde_json::{Value, json};

const SECRET: &str = "test-github-secret";

fn github() -> GitHub {
    GitHub::new(&[SECRET]).expect("secret")
}

/// An HTTP API (payload 2.0) event as API Gateway hands it to the function.
fn api_event(event: &str, delivery: &str, signature: &str, body: &[u8]) -> String {
    json!({
        "version": "2.0",
        "routeKey": "POST /webhooks/github",
        "rawPath": "/webhooks/github",
        "headers": {
            "content-type": "application/json",
            "x-github-event": event,
            "x-github-delivery": delivery,
            "x-hub-signature-256": signature,
        },
        "requestContext": {"http": {"method": "POST"}, "requestId": "test"},
        "body": String::from_utf8(body.to_vec()).expect("UTF-8 body"),
        "isBase64Encoded": false,
    })
    .to_string()
}

/// Delivers `body` as `event` under `delivery`, signed; answers (status, disposition or
/// problem slug).
async fn deliver(
    receiver: &Receiver<GitHub>,
    event: &str,
    delivery: &str,
    body: &[u8],
) -> (u16, String) {
    let signed = api_event(event, delivery, &sign(SECRET, body), body);
    answer(receiver, &signed).await
}

/// Hands `api_event` to `receiver` as the binary does: its [`outcome`].
async fn answer(receiver: &Receiver<GitHub>, api_event: &str) -> (u16, String) {
    outcome(
        claimonce::lambda::handle_event(receiver, api_event)
            .await
            .response(),
    )
}

fn installation(action: &str, id: i64, updated_at: &str, extra: Value) -> Vec<u8> {
    let mut body = json!({
        "action": action,
        "installation": {
            "id": id,
            "account": {"login": "acme-corp", "id": 5127001, "type": "Organization"},
            "repository_selection": "selected",
            "created_at": "2026-11-01T00:00:00Z",
            "updated_at": updated_at,
            "suspended_at": null,
        },
        "sender": {"login": "jenny-rosen", "id": 8810023},
    });
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    body.to_string().into_bytes()
}

async fn state(db: &TestDb, id: i64) -> String {
    db.client()
        .await
        .query_one(
            "SELECT state FROM github_installations WHERE installation_id = $1",
            &[&id],
        )
        .await
        .expect("the installation's row")
        .get(0)
}

#[tokio::test]
async fn a_redelivery_and_a_replay_under_a_fresh_delivery_id_are_both_duplicates() {
    let db = TestDb::new().await;
    let (receiver, _) = db.receiver(github());
    let body = installation(
        "created",
        1,
        "2026-11-29T10:00:00Z",
        json!({"repositories": [{"id": 11, "full_name": "acme-corp/billing"}]}),
    );
    let first = "d5f6a1c0-0000-11f1-8a3e-000000000001";
    assert_eq!(
        deliver(&receiver, "installation", first, &body).await,
        (200, "processed".into())
    );
    // GitHub's redelivery: the same delivery id and body.
    assert_eq!(
        deliver(&receiver, "installation", first, &body).await,
        (200, "duplicate".into())
    );
    // A captured body re-sent under a new delivery id, even under another event name: a
    // duplicate, or refused when it is not that event's body; never applied again.
    for (event, delivery, answer) in [
        (
            "installation",
            "d5f6a1c0-0000-11f1-8a3e-0000000000ff",
            "duplicate",
        ),
        ("push", "d5f6a1c0-0000-11f1-8a3e-0000000000fe", "duplicate"),
        (
            "installation_repositories",
            "d5f6a1c0-0000-11f1-8a3e-0000000000fd",
            "invalid-payload",
        ),
    ] {
        let status = if answer == "duplicate" { 200 } else { 400 };
        assert_eq!(
            deliver(&receiver, event, delivery, &body).await,
            (status, answer.to_owned()),
            "{event}"
        );
    }
    assert_eq!(db.count("SELECT count(*) FROM outbox").await, 0);
    assert_eq!(
        db.count("SELECT count(*) FROM processed_events WHERE provider = 'github'")
            .await,
        1
    );
    assert_eq!(
        db.count("SELECT count(*) FROM github_installations").await,
        1
    );
    assert_eq!(
        db.count(
            "SELECT count(*) FROM github_installation_repositories \
             WHERE present AND full_name = 'acme-corp/billing'"
        )
        .await,
        1
    );
    assert_eq!(state(&db, 1).await, "active");
}

#[tokio::test]
async fn two_copies_at_once_apply_the_effect_once() {
    let db = TestDb::new().await;
    let body = installation("created", 2, "2026-11-29T10:00:00Z", json!({}));
    let environments = (0..4).map(|_| db.receiver(github()).0).collect();
    let body2 = body.clone();
    let answers = all_at_once(environments, move |r| {
        let body = body2.clone();
        async move { deliver(&r, "installation", "d-concurrent", &body).await }
    })
    .await;
    let processed = answers.iter().filter(|a| a.1 == "processed").count();
    let duplicates = answers.iter().filter(|a| a.1 == "duplicate").count();
    assert_eq!((processed, duplicates), (1, 3), "{answers:?}");
    assert_eq!(
        db.count("SELECT count(*) FROM github_installations").await,
        1
    );
}

#[tokio::test]
async fn installations_keep_the_newest_state_whatever_the_delivery_order() {
    let db = TestDb::new().await;
    let (receiver, _) = db.receiver(github());
    let send = |action: &str, id: i64, at: &str| installation(action, id, at, json!({}));

    // Suspended at 10:05, then the older unsuspend of 10:01 arrives late: still suspended.
    for (action, at) in [
        ("created", "2026-11-29T10:00:00Z"),
        ("suspend", "2026-11-29T10:05:00Z"),
        ("unsuspend", "2026-11-29T10:01:00Z"),
    ] {
        let answer = deliver(&receiver, "installation", action, &send(action, 3, at)).await;
        assert_eq!(answer, (200, "processed".into()), "{action}");
    }
    assert_eq!(state(&db, 3).await, "suspended");

    // Deleted first, then its older `created`: the tombstone stays.
    for action in ["deleted", "created"] {
        let body = send(action, 4, "2026-11-29T10:00:00Z");
        let answer = deliver(&receiver, "installation", action, &body).await;
        assert_eq!(answer, (200, "processed".into()), "{action}");
    }
    assert_eq!(state(&db, 4).await, "deleted");
    // Nothing after a deletion brings it back, however new.
    let later = send("unsuspend", 4, "2026-11-29T11:00:00Z");
    assert_eq!(
        deliver(&receiver, "installation", "late", &later).await,
        (200, "processed".into())
    );
    assert_eq!(state(&db, 4).await, "deleted");

    // A same-second tie goes to the later kind, in either order: created (0) loses to
    // suspend (1).
    for (id, order) in [(5, ["suspend", "created"]), (7, ["created", "suspend"])] {
        for action in order {
            let body = send(action, id, "2026-11-29T10:00:00Z");
            let answer = deliver(&receiver, "installation", action, &body).await;
            assert_eq!(answer, (200, "processed".into()), "{id} {action}");
        }
        assert_eq!(state(&db, id).await, "suspended", "{order:?}");
    }

    // Repositories, each newest-first: removed at 10:10, a late `added` from 10:05 loses.
    let created = installation(
        "created",
        6,
        "2026-11-29T10:00:00Z",
        json!({"repositories": [{"id": 61, "full_name": "acme-corp/web"}]}),
    );
    assert_eq!(
        deliver(&receiver, "installation", "c6", &created).await,
        (200, "processed".into())
    );
    let repos = |action: &str, at: &str, added: Value, removed: Value| {
        installation(
            action,
            6,
            at,
            json!({"repositories_added": added, "repositories_removed": removed}),
        )
    };
    let removed = repos(
        "removed",
        "2026-11-29T10:10:00Z",
        json!([]),
        json!([{"id": 61, "full_name": "acme-corp/web"}]),
    );
    let added_late = repos(
        "added",
        "2026-11-29T10:05:00Z",
        json!([{"id": 61, "full_name": "acme-corp/web"}]),
        json!([]),
    );
    for (delivery, body) in [("r6", &removed), ("a6", &added_late)] {
        assert_eq!(
            deliver(&receiver, "installation_repositories", delivery, body).await,
            (200, "processed".into())
        );
    }
    assert_eq!(
        db.count(
            "SELECT count(*) FROM github_installation_repositories \
             WHERE installation_id = 6 AND repository_id = 61 AND NOT present"
        )
        .await,
        1
    );
}

#[tokio::test]
async fn ping_is_answered_and_other_events_are_forwarded_once_unchanged() {
    let db = TestDb::new().await;
    let (receiver, _) = db.receiver(github());
    let ping = br#"{"zen":"Practicality beats purity.","hook_id":482113906}"#;
    assert_eq!(
        deliver(&receiver, "ping", "p1", ping).await,
        (200, "ignored".into())
    );
    let issue =
        br#"{"action":"opened","issue":{"number":17,"title":"x \u00e9"},"installation":{"id":1}}"#;
    for expected in ["processed", "duplicate"] {
        assert_eq!(
            deliver(&receiver, "issues", "i1", issue).await,
            (200, expected.to_owned())
        );
    }
    let client = db.client().await;
    let rows = client
        .query(
            "SELECT o.topic, o.payload = $1::text::jsonb, o.provider, o.event_id = e.event_id, \
             e.event_type FROM outbox o JOIN processed_events e USING (provider, event_id)",
            &[&std::str::from_utf8(issue).expect("UTF-8")],
        )
        .await
        .expect("outbox rows");
    assert_eq!(
        rows.len(),
        1,
        "one outbox row for the forwarded event, none for ping"
    );
    let row = &rows[0];
    assert_eq!(row.get::<_, String>(0), "github.issues");
    assert!(
        row.get::<_, bool>(1),
        "the payload is the signed body, unchanged"
    );
    assert_eq!(row.get::<_, String>(2), "github");
    assert!(
        row.get::<_, bool>(3),
        "tagged with the claim's own event id"
    );
    assert_eq!(row.get::<_, String>(4), "issues.opened");
    assert_eq!(
        db.count("SELECT count(*) FROM processed_events WHERE event_type = 'ping'")
            .await,
        1
    );
}

#[tokio::test]
async fn what_can_never_succeed_is_a_400_that_writes_nothing() {
    let db = TestDb::new().await;
    let (receiver, _) = db.receiver(github());
    let body = installation("created", 7, "2026-11-29T10:00:00Z", json!({}));
    let good = sign(SECRET, &body);
    let cases = [
        // Signed with another secret.
        (
            api_event("installation", "x1", &sign("another", &body), &body),
            "signature-mismatch",
        ),
        // No signature, or not a sha256= one.
        (
            api_event("installation", "x2", "", &body),
            "malformed-signature",
        ),
        (
            api_event(
                "installation",
                "x3",
                &good.replace("sha256=", "sha1="),
                &body,
            ),
            "malformed-signature",
        ),
        // Signed, but the event name is missing or not a name.
        (api_event("", "x4", &good, &body), "invalid-payload"),
        (
            api_event("Installation!", "x5", &good, &body),
            "invalid-payload",
        ),
        // Signed, but a timestamp PostgreSQL would refuse.
        {
            let bad = installation("created", 7, "2026-11-29T10:00:00+16:00", json!({}));
            (
                api_event("installation", "x6", &sign(SECRET, &bad), &bad),
                "invalid-payload",
            )
        },
        // Signed and forwarded, but jsonb cannot hold a NUL.
        {
            let bad = br#"{"action":"opened","issue":{"title":"\u0000"}}"#;
            (
                api_event("issues", "x7", &sign(SECRET, bad), bad),
                "invalid-payload",
            )
        },
    ];
    for (event, slug) in &cases {
        assert_eq!(
            answer(&receiver, event).await,
            (400, (*slug).to_owned()),
            "{event:.200}"
        );
    }
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 0);
    assert_eq!(db.count("SELECT count(*) FROM outbox").await, 0);
}

#[tokio::test]
async fn either_secret_is_accepted_during_a_rotation() {
    let db = TestDb::new().await;
    let (receiver, _) = db.receiver(GitHub::new(&["the-new-secret", SECRET]).expect("secrets"));
    for (zen, secret) in [("old", SECRET), ("new", "the-new-secret")] {
        let body = format!(r#"{{"zen":"{zen}","hook_id":1}}"#);
        let event = api_event("ping", zen, &sign(secret, body.as_bytes()), body.as_bytes());
        assert_eq!(
            answer(&receiver, &event).await,
            (200, "ignored".into()),
            "{zen}"
        );
    }
}

#[tokio::test]
async fn a_failing_effect_rolls_back_and_the_redelivery_heals() {
    let db = TestDb::new().await;
    let admin = db.client().await;
    // The installation row is written first; the repository row after it fails.
    admin
        .batch_execute(
            "ALTER TABLE github_installation_repositories \
             ADD CONSTRAINT no_x CHECK (full_name <> 'acme-corp/x')",
        )
        .await
        .expect("constraint");
    let (receiver, _) = db.receiver(github());
    let body = installation(
        "created",
        9,
        "2026-11-29T10:00:00Z",
        json!({"repositories": [{"id": 91, "full_name": "acme-corp/x"}]}),
    );
    assert_eq!(
        deliver(&receiver, "installation", "f1", &body).await,
        (500, "about:blank".into())
    );
    for table in ["github_installations", "processed_events"] {
        assert_eq!(
            db.count(&format!("SELECT count(*) FROM {table}")).await,
            0,
            "{table}: rolled back with the claim"
        );
    }
    admin
        .batch_execute("ALTER TABLE github_installation_repositories DROP CONSTRAINT no_x")
        .await
        .expect("drop");
    // GitHub does not retry by itself: the operator's redelivery heals it.
    assert_eq!(
        deliver(&receiver, "installation", "f1", &body).await,
        (200, "processed".into())
    );
    assert_eq!(state(&db, 9).await, "active");
    assert_eq!(
        db.count("SELECT count(*) FROM github_installation_repositories")
            .await,
        1
    );
}

#[tokio::test]
async fn the_replay_procedure_of_operations_md_and_the_functions_own_login() {
    let db = TestDb::new().await;
    // The function's own login, granted claimonce_github only (migration V9).
    let url = claimonce_tests::roles::login_with(&db, "claimonce_github").await;
    let (receiver, _) = claimonce_tests::db::receiver_at(&url, github());
    let body = installation("created", 9, "2026-11-29T10:00:00Z", json!({}));
    let issue = br#"{"action":"opened","issue":{"number":1},"installation":{"id":9}}"#;
    assert_eq!(
        deliver(&receiver, "installation", "r1", &body).await,
        (200, "processed".into())
    );
    assert_eq!(
        deliver(&receiver, "issues", "r2", issue).await,
        (200, "processed".into())
    );
    assert_eq!(
        deliver(&receiver, "installation", "r3", &body).await,
        (200, "duplicate".into())
    );
    // OPERATIONS.md's replay, as the page writes it, for the installation's ledger row (its
    // event id is the body's SHA-256): the next delivery of the body is applied again, and the
    // newest-first rule leaves the installation as it was.
    let event_id: String = db
        .client()
        .await
        .query_one(
            "SELECT event_id FROM processed_events WHERE event_type = 'installation.created'",
            &[],
        )
        .await
        .expect("the installation's claim")
        .get(0);
    assert_eq!(
        claimonce_tests::operations::replay(&db, "github", &event_id).await,
        1
    );
    assert_eq!(
        deliver(&receiver, "installation", "r4", &body).await,
        (200, "processed".into())
    );
    assert_eq!(
        db.count("SELECT count(*) FROM github_installations WHERE installation_id = 9 AND state = 'active'")
            .await,
        1
    );
    assert_eq!(db.count("SELECT count(*) FROM outbox").await, 1);
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 2);
}

/// The repositories an `installation_repositories` event of installation `id` at `at` adds
/// and removes.
fn repositories(action: &str, id: i64, at: &str, added: &[i64], removed: &[i64]) -> Vec<u8> {
    let list = |ids: &[i64]| -> Value {
        ids.iter()
            .map(|r| json!({"id": r, "full_name": format!("acme-corp/r{r}")}))
            .collect()
    };
    installation(
        action,
        id,
        at,
        json!({"repositories_added": list(added), "repositories_removed": list(removed)}),
    )
}

async fn present(db: &TestDb, id: i64) -> Vec<i64> {
    db.client()
        .await
        .query(
            "SELECT repository_id FROM github_installation_repositories \
             WHERE installation_id = $1 AND present ORDER BY 1",
            &[&id],
        )
        .await
        .expect("repositories")
        .iter()
        .map(|row| row.get(0))
        .collect()
}

#[tokio::test]
async fn repositories_follow_the_installation_removal_wins_a_tie_and_a_deleted_one_reaches_none() {
    let db = TestDb::new().await;
    let (receiver, _) = db.receiver(github());
    let at = "2026-11-29T10:00:00Z";
    // An add and a remove of the same second, in either order: removed.
    for (id, order) in [(20, ["added", "removed"]), (21, ["removed", "added"])] {
        for action in order {
            let (added, removed): (&[i64], &[i64]) = match action {
                "added" => (&[1], &[]),
                _ => (&[], &[1]),
            };
            let body = repositories(action, id, at, added, removed);
            let answer = deliver(&receiver, "installation_repositories", action, &body).await;
            assert_eq!(answer, (200, "processed".into()), "{id} {action}");
        }
        assert!(present(&db, id).await.is_empty(), "{order:?}");
    }

    // A deleted installation reaches none of its repositories, including those its own
    // deletion lists, and nothing later adds one back.
    let created = installation(
        "created",
        22,
        "2026-11-29T09:00:00Z",
        json!({"repositories": [{"id": 1, "full_name": "acme-corp/r1"}]}),
    );
    let deleted = installation(
        "deleted",
        22,
        at,
        json!({"repositories": [{"id": 1, "full_name": "acme-corp/r1"},
                                {"id": 2, "full_name": "acme-corp/r2"}]}),
    );
    let added_later = repositories("added", 22, "2026-11-29T11:00:00Z", &[3], &[]);
    for (delivery, body) in [("c", &created), ("d", &deleted), ("a", &added_later)] {
        let event = if delivery == "a" {
            "installation_repositories"
        } else {
            "installation"
        };
        assert_eq!(
            deliver(&receiver, event, delivery, body).await,
            (200, "processed".into()),
            "{delivery}"
        );
    }
    assert_eq!(state(&db, 22).await, "deleted");
    assert!(present(&db, 22).await.is_empty());

    // One event that lists a repository twice, or as added and removed, can never be applied
    // (the upsert would meet its own row, 21000, on every retry): a 400 that writes nothing.
    let before = db.count("SELECT count(*) FROM processed_events").await;
    for body in [
        repositories("added", 23, at, &[5, 5], &[]),
        repositories("removed", 23, at, &[], &[6, 6]),
        repositories("added", 23, at, &[7], &[7]),
    ] {
        assert_eq!(
            deliver(&receiver, "installation_repositories", "twice", &body).await,
            (400, "invalid-payload".into())
        );
    }
    assert_eq!(
        db.count("SELECT count(*) FROM processed_events").await,
        before
    );
    assert_eq!(state_rows(&db, 23).await, 0);
}

async fn state_rows(db: &TestDb, id: i64) -> i64 {
    db.client()
        .await
        .query_one(
            "SELECT count(*) FROM github_installations WHERE installation_id = $1",
            &[&id],
        )
        .await
        .expect("count")
        .get(0)
}

#[tokio::test]
async fn a_forwarded_number_jsonb_cannot_store_is_a_400_that_writes_nothing() {
    let db = TestDb::new().await;
    let (receiver, _) = db.receiver(github());
    // jsonb stores numbers as numeric, which has no 1e-200000 (22003): before, a 500 on every
    // retry.
    let body =
        br#"{"action":"opened","issue":{"number":1,"score":1e-200000},"installation":{"id":1}}"#;
    assert_eq!(
        deliver(&receiver, "issues", "n1", body).await,
        (400, "invalid-payload".into())
    );
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 0);
    assert_eq!(db.count("SELECT count(*) FROM outbox").await, 0);
}

/// One relay run over everything pending, to `sqs`.
async fn relay_to(db: &TestDb, sqs: &outbox_relay::sqs::Sqs) -> outbox_relay::Report {
    let settings = db.settings();
    let client = settings.connect().await.expect("connect");
    let budget = claimonce::jobs::Budget::until(
        std::time::Instant::now() + std::time::Duration::from_secs(60),
    );
    let options = outbox_relay::Options::default();
    outbox_relay::relay(&client, settings.timeouts(), &options, sqs, &budget).await
}

const QUEUE: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/claimonce-outbox.fifo";

#[tokio::test]
async fn a_forward_leaves_as_the_signed_bytes_and_a_replay_under_another_name_keeps_its_key() {
    let db = TestDb::new().await;
    let (receiver, _) = db.receiver(github());
    // Spacing, key order, a repeated key, a trailing zero and a final newline: all of which
    // jsonb would have changed, and with them the bytes the signature covers.
    let body = b"{\"action\":\"opened\",  \"zeta\":1,\"alpha\":{\"b\":2,\"a\":1},\"alpha\":3,\"n\":1.50}\n";
    assert_eq!(
        deliver(&receiver, "issues", "d1", body).await,
        (200, "processed".into())
    );
    // The ledger row gone, as after a window an operator shortened (what the sweep deletes),
    // the captured body replayed under another, unsigned, event name.
    db.client()
        .await
        .batch_execute("DELETE FROM processed_events")
        .await
        .expect("sweep the ledger");
    assert_eq!(
        deliver(&receiver, "pull_request", "d2", body).await,
        (200, "processed".into())
    );
    let event_id: String = db
        .client()
        .await
        .query_one("SELECT DISTINCT event_id FROM outbox", &[])
        .await
        .expect("both forwards carry one event id")
        .get(0);

    let recorder = claimonce_tests::recorder::Recorder::sqs(&[]).await;
    let report = relay_to(
        &db,
        &outbox_relay::sqs::Sqs::new(&recorder.aws_config().await, QUEUE),
    )
    .await;
    let errors: Vec<Option<String>> = db
        .client()
        .await
        .query("SELECT last_error FROM outbox", &[])
        .await
        .expect("errors")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        (report.dispatched, report.failed),
        (2, 0),
        "{report:?} {errors:?}"
    );
    let sent = recorder.requests();
    assert_eq!(sent.len(), 2);
    let key = format!("github:{event_id}");
    for (request, topic) in sent.iter().zip(["github.issues", "github.pull_request"]) {
        let message = request.json();
        let attribute = |name: &str| {
            message["MessageAttributes"][name]["StringValue"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        };
        assert_eq!(
            message["MessageBody"].as_str().map(str::as_bytes),
            Some(&body[..]),
            "the message is the signed bytes, exactly"
        );
        assert_eq!(attribute("signature-header"), "X-Hub-Signature-256");
        assert_eq!(
            attribute("signature"),
            sign(SECRET, body),
            "a consumer holding the secret verifies the message as the receiver did"
        );
        assert_eq!(attribute("topic"), topic);
        assert_eq!(attribute("provider"), "github");
        // The replay's key is the first forward's: a consumer that keeps its keys applies the
        // body once, whatever name it came under the second time.
        assert_eq!(attribute("idempotency-key"), key);
        assert_eq!(message["MessageDeduplicationId"], key.as_str());
    }
}

#[tokio::test]
async fn a_forward_no_queue_message_could_hold_is_413_and_writes_nothing() {
    use claimonce::jobs::FORWARD_BODY_LIMIT;
    let db = TestDb::new().await;
    let (receiver, _) = db.receiver(github());
    let sized = |len: usize| {
        let mut body = br#"{"action":"opened","pad":""#.to_vec();
        body.resize(len - 2, b'x');
        body.extend_from_slice(br#""}"#);
        body
    };
    // Within the receiver's 1 MiB, beyond what the relay could send with its attributes.
    let over = sized(FORWARD_BODY_LIMIT + 1);
    assert_eq!(
        deliver(&receiver, "issues", "big", &over).await,
        (413, "payload-too-large".into())
    );
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 0);
    assert_eq!(db.count("SELECT count(*) FROM outbox").await, 0);
    // At the limit: accepted and sent whole.
    let at = sized(FORWARD_BODY_LIMIT);
    assert_eq!(
        deliver(&receiver, "issues", "limit", &at).await,
        (200, "processed".into())
    );
    let recorder = claimonce_tests::recorder::Recorder::sqs(&[]).await;
    let report = relay_to(
        &db,
        &outbox_relay::sqs::Sqs::new(&recorder.aws_config().await, QUEUE),
    )
    .await;
    assert_eq!(report.dispatched, 1, "{report:?}");
    let sent = recorder.requests();
    assert_eq!(
        sent[0].json()["MessageBody"].as_str().map(str::len),
        Some(FORWARD_BODY_LIMIT)
    );
}
