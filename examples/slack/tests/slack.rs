//! Slack end to end, on claimonce's test kit (`claimonce_local::kit`): the endpoint check
//! answered through the provider with nothing claimed, an event applied once whatever Slack's
//! retries, bad signatures refused, and the crate's binaries under the Runtime API emulator.

// Tests assert by panicking, helpers included.
#![allow(clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use claimonce::Receiver;
use claimonce::prelude::ProviderName;
use claimonce_local::kit::{self, Binary};
use claimonce_local::scratch::{Scratch, ScratchDb};
use serde_json::{Value, json};
use slack_webhook::{MIGRATIONS, Slack, SlackSignature};
use tokio::sync::OnceCell;
use tokio_postgres::Client;

/// The local secret of this crate's registry entry (Cargo.toml).
const SECRET: &str = "claimonce-local-slack-signing-secret";

static SCRATCH: OnceCell<Scratch> = OnceCell::const_new();

/// The test process's databases: claimonce's shared migrations and this crate's.
async fn scratch() -> &'static Scratch {
    SCRATCH
        .get_or_init(|| async {
            kit::databases("slack-test", MIGRATIONS)
                .await
                .expect("a private PostgreSQL")
        })
        .await
}

async fn migrated() -> (ScratchDb<'static>, Client, String) {
    let db = scratch().await.migrated().await.expect("a database");
    let admin = db.admin().await.expect("admin");
    let login = db.login(Slack::NAME).await.expect("the login");
    (db, admin, login)
}

fn receiver(url: &str) -> Receiver<Slack> {
    kit::receiver(url, Slack::new(&[SECRET], 300).expect("a secret")).expect("a receiver")
}

/// A sample of `events/slack/`, signed now with `secret`.
fn sample(name: &str, secret: &str) -> Value {
    let path = format!("{}/events/slack/{name}.json", env!("CARGO_MANIFEST_DIR"));
    let event: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("the sample")).expect("JSON");
    kit::sign(event, &SlackSignature::new(&[secret], 0).expect("a secret"))
}

/// The response payload's status and body, parsed.
async fn payload(receiver: &Receiver<Slack>, event: &Value) -> (u64, Value) {
    let payload =
        serde_json::to_value(claimonce::lambda::handle_event(receiver, &event.to_string()).await)
            .expect("a payload");
    (
        payload["statusCode"].as_u64().expect("a status"),
        serde_json::from_str(payload["body"].as_str().expect("a body")).expect("a JSON body"),
    )
}

async fn count(client: &Client, sql: &str) -> i64 {
    kit::count(client, sql).await.expect(sql)
}

#[tokio::test]
async fn the_endpoint_check_is_answered_with_its_challenge_and_nothing_is_claimed() {
    let (_db, admin, url) = migrated().await;
    let slack = receiver(&url);
    let (status, body) = payload(&slack, &sample("url_verification", SECRET)).await;
    assert_eq!(
        (status, body),
        (
            200,
            json!({"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"})
        )
    );
    // Rate-limit notices are acknowledged the same way: no event to claim.
    let mut limited = sample("url_verification", SECRET);
    limited["body"] = json!(
        r#"{"token":"XXYYZZ","type":"app_rate_limited","team_id":"T0LOCAL0001","minute_rate_limited":1796195700,"api_app_id":"A0LOCAL0001"}"#
    );
    let limited = kit::sign(
        limited,
        &SlackSignature::new(&[SECRET], 0).expect("a secret"),
    );
    assert_eq!(payload(&slack, &limited).await, (200, json!({"ok": true})));
    // The check is verified like any delivery: signed with another secret, it is refused.
    let (status, body) = payload(&slack, &sample("url_verification", "another")).await;
    assert_eq!(
        (status, body["type"].as_str().unwrap_or_default()),
        (400, "https://claimonce.dev/problems/signature-mismatch")
    );
    assert_eq!(
        count(&admin, "SELECT count(*) FROM processed_events").await,
        0
    );
}

#[tokio::test]
async fn an_event_is_recorded_once_whatever_slack_s_retries() {
    let (_db, admin, url) = migrated().await;
    let slack = receiver(&url);
    let event = sample("event_callback.app_mention", SECRET);
    assert_eq!(
        kit::deliver(&slack, &event).await,
        (200, "processed".into())
    );
    // Slack's retry: the same event, signed again, with its attempt's headers.
    let mut retry = event.clone();
    retry["headers"]["x-slack-retry-num"] = json!("1");
    retry["headers"]["x-slack-retry-reason"] = json!("http_timeout");
    let retry = kit::sign(retry, &SlackSignature::new(&[SECRET], 0).expect("a secret"));
    assert_eq!(
        kit::deliver(&slack, &retry).await,
        (200, "duplicate".into())
    );
    assert_eq!(
        count(
            &admin,
            "SELECT count(*) FROM slack_events WHERE event_id = 'Ev0LOCAL0001' \
             AND team_id = 'T0LOCAL0001' AND event_type = 'app_mention' AND channel = 'C0LOCAL0001'"
        )
        .await,
        1
    );
    assert_eq!(
        count(
            &admin,
            "SELECT count(*) FROM processed_events WHERE provider = 'slack' \
             AND event_id = 'Ev0LOCAL0001' AND event_type = 'app_mention'"
        )
        .await,
        1
    );
}

#[tokio::test]
async fn a_bad_signature_or_an_unknown_payload_is_refused_and_writes_nothing() {
    let (_db, admin, url) = migrated().await;
    let slack = receiver(&url);
    let mut stale = sample("event_callback.app_mention", SECRET);
    stale["headers"]["x-slack-request-timestamp"] = json!("1531420618");
    assert_eq!(
        kit::deliver(&slack, &stale).await.0,
        400,
        "a signature for another time"
    );
    let mut other = sample("event_callback.app_mention", SECRET);
    other["body"] = json!(r#"{"type":"block_actions","team_id":"T0LOCAL0001"}"#);
    let other = kit::sign(other, &SlackSignature::new(&[SECRET], 0).expect("a secret"));
    assert_eq!(
        kit::deliver(&slack, &other).await,
        (400, "https://claimonce.dev/problems/invalid-payload".into())
    );
    assert_eq!(
        count(&admin, "SELECT count(*) FROM processed_events").await,
        0
    );
}

#[tokio::test]
async fn the_binaries_migrate_answer_the_check_and_apply_an_event_under_the_emulator() {
    let db = scratch().await.empty().await.expect("a database");
    let migrate = Binary::start(
        "slack-migrate",
        env!("CARGO_BIN_EXE_slack-migrate"),
        &[("DATABASE_URL", &db.admin_url())],
    )
    .await
    .expect("the migrate binary");
    let applied = migrate.invoke(&json!({})).await.expect("migrated");
    assert_eq!(
        applied["applied"].as_array().and_then(|a| a.last()),
        Some(&json!(10000))
    );
    let url = db.login(Slack::NAME).await.expect("the login");
    let webhook = Binary::start(
        "slack-webhook",
        env!("CARGO_BIN_EXE_slack-webhook"),
        &[("DATABASE_URL", &url), ("SLACK_WEBHOOK_SECRET", SECRET)],
    )
    .await
    .expect("the receiver binary");
    let answered = webhook
        .invoke(&sample("url_verification", SECRET))
        .await
        .expect("answered");
    assert_eq!(answered["statusCode"], 200);
    assert!(
        answered["body"]
            .as_str()
            .is_some_and(|b| b.contains("3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"))
    );
    let event = sample("event_callback.app_mention", SECRET);
    for expected in ["processed", "duplicate"] {
        let answered = webhook.invoke(&event).await.expect("answered");
        assert_eq!(kit::answer(&answered), (200, expected.to_owned()));
    }
}
