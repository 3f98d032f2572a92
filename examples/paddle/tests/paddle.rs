//! Paddle end to end, against a real PostgreSQL this test process starts (claimonce-local's
//! scratch databases): its migrate binary, its receiver binary and its signer binary under the
//! Lambda Runtime API emulator, as claimonce's own are tested, and the claim's guarantees for
//! its Rust effect. Every delivery is signed through the crate's own scheme.

// Tests assert by panicking, helpers included.
#![allow(clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::sync::Arc;

use claimonce::Receiver;
use claimonce::prelude::ProviderName;
use claimonce::prelude::Sign;
use claimonce::timestamp::unix_now;
use claimonce_local::kit::{self, Binary, answer};
use claimonce_local::scratch::{Scratch, ScratchDb};
use paddle_webhook::{MIGRATIONS, Paddle, PaddleSignature};
use serde_json::{Value, json};
use tokio::sync::{Barrier, OnceCell};
use tokio_postgres::Client;

/// The local secret of this crate's registry entry (Cargo.toml).
const SECRET: &str = "pdl_ntfset_local_claimonce_paddle_secret";
/// The receivers' tolerance here: WEBHOOK_TOLERANCE_SECONDS' default.
const TOLERANCE: u64 = 300;

static SCRATCH: OnceCell<Scratch> = OnceCell::const_new();

/// The test process's databases: claimonce's shared migrations and this crate's.
async fn scratch() -> &'static Scratch {
    SCRATCH
        .get_or_init(|| async {
            kit::databases("paddle-test", MIGRATIONS)
                .await
                .expect("a private PostgreSQL")
        })
        .await
}

/// A migrated database of its own, and Paddle's login on it.
async fn migrated() -> (ScratchDb<'static>, Client, String) {
    let db = scratch().await.migrated().await.expect("a database");
    let admin = db.admin().await.expect("admin");
    let login = db.login(Paddle::NAME).await.expect("the login");
    (db, admin, login)
}

fn receiver(url: &str) -> Receiver<Paddle> {
    kit::receiver(url, Paddle::new(&[SECRET], TOLERANCE).expect("a secret")).expect("a receiver")
}

/// The sample delivery (`events/paddle/transaction.completed.json`), with `body` if given,
/// signed now through the crate's own scheme with `secret`.
fn sample(body: Option<&str>, secret: &str) -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/events/paddle/transaction.completed.json"
    );
    let mut event: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("the sample")).expect("JSON");
    if let Some(body) = body {
        event["body"] = json!(body);
    }
    kit::sign(
        event,
        &PaddleSignature::new(&[secret], 0).expect("a secret"),
    )
}

/// A body of the sample's shape: event `id`, type `kind`, `grand_total` in EUR.
fn body(id: &str, kind: &str, grand_total: &str) -> String {
    json!({
        "event_id": id,
        "event_type": kind,
        "occurred_at": "2026-12-01T10:00:00.000000Z",
        "notification_id": "ntf_01jdx4qh3a8b2c4d6e8f0g2h4j",
        "data": {
            "id": "txn_01jdx4pz9k2m4n6p8q0r2s4t6v",
            "status": "completed",
            "customer_id": "ctm_01jdx4nv7c9d1e3f5g7h9j1k3m",
            "currency_code": "EUR",
            "details": {"totals": {"grand_total": grand_total}}
        }
    })
    .to_string()
}

async fn deliver(receiver: &Receiver<Paddle>, event: &Value) -> (u16, String) {
    kit::deliver(receiver, event).await
}

async fn count(client: &Client, sql: &str) -> i64 {
    kit::count(client, sql).await.expect(sql)
}

/// One of this crate's binaries under the Runtime API emulator.
async fn under_the_emulator(binary: &str, path: &str, env: &[(&str, &str)]) -> Binary {
    Binary::start(binary, path, env)
        .await
        .expect("the binary under the emulator")
}

async fn invoke(binary: &Binary, event: &Value) -> Value {
    binary.invoke(event).await.expect("answered")
}

#[tokio::test]
async fn the_binaries_migrate_and_apply_the_sample_once_under_the_local_emulator() {
    let db = scratch().await.empty().await.expect("a database");
    // This deployment's migrate function: the shared migrations, then Paddle's 10000.
    let migrate = under_the_emulator(
        "paddle-migrate",
        env!("CARGO_BIN_EXE_paddle-migrate"),
        &[("DATABASE_URL", &db.admin_url())],
    )
    .await;
    let mut expected: Vec<i32> = claimonce_migrations::SHARED
        .iter()
        .map(|m| m.version)
        .collect();
    expected.push(10000);
    let outcome = invoke(&migrate, &json!({})).await;
    assert_eq!(outcome["applied"], json!(expected), "{outcome}");

    let url = db.login(Paddle::NAME).await.expect("the login");
    let webhook = under_the_emulator(
        "paddle-webhook",
        env!("CARGO_BIN_EXE_paddle-webhook"),
        &[("DATABASE_URL", &url), ("PADDLE_WEBHOOK_SECRET", SECRET)],
    )
    .await;
    let event = sample(None, SECRET);
    assert_eq!(
        answer(&invoke(&webhook, &event).await),
        (200, "processed".into())
    );
    assert_eq!(
        answer(&invoke(&webhook, &event).await),
        (200, "duplicate".into())
    );
    let admin = db.admin().await.expect("admin");
    assert_eq!(
        count(
            &admin,
            "SELECT balance FROM paddle_balances \
             WHERE customer_id = 'ctm_01jdx4nv7c9d1e3f5g7h9j1k3m' AND currency = 'EUR'"
        )
        .await,
        5000
    );
    assert_eq!(
        count(
            &admin,
            "SELECT count(*) FROM processed_events \
             WHERE provider = 'paddle' AND event_id = 'evt_01jdx4qh1w6y2c5e9k3m7p8r0s'"
        )
        .await,
        1
    );
}

/// The signer binary the local run signs samples with prints what the scheme signs, and a
/// delivery it signed is accepted by the receiver binary.
#[tokio::test]
async fn the_signer_binary_signs_what_the_receiver_accepts() {
    use tokio::io::AsyncWriteExt as _;
    let (_db, _admin, url) = migrated().await;
    let mut event = sample(None, "not-the-secret");
    let body = event["body"].as_str().expect("a body").to_owned();
    let now = unix_now();
    let mut signer = tokio::process::Command::new(env!("CARGO_BIN_EXE_paddle-sign"))
        .args([now.to_string(), "unused".to_owned()])
        .env(claimonce::verify::signer_command::SECRET_VAR, SECRET)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the signer");
    let mut stdin = signer.stdin.take().expect("stdin");
    stdin.write_all(body.as_bytes()).await.expect("the body");
    drop(stdin);
    let output = signer.wait_with_output().await.expect("signed");
    assert!(output.status.success());
    let headers =
        claimonce::verify::signer_command::read_headers(&String::from_utf8_lossy(&output.stdout))
            .expect("headers");
    let by_the_type =
        PaddleSignature::new(&[SECRET], 0)
            .expect("a secret")
            .sign(body.as_bytes(), now, "");
    assert_eq!(headers, by_the_type);
    for (name, value) in headers {
        event["headers"][name] = json!(value);
    }
    let webhook = under_the_emulator(
        "paddle-webhook",
        env!("CARGO_BIN_EXE_paddle-webhook"),
        &[("DATABASE_URL", &url), ("PADDLE_WEBHOOK_SECRET", SECRET)],
    )
    .await;
    assert_eq!(
        answer(&invoke(&webhook, &event).await),
        (200, "processed".into())
    );
}

#[tokio::test]
async fn a_bad_signature_or_a_bad_transaction_is_refused_and_writes_nothing() {
    let (_db, admin, url) = migrated().await;
    let paddle = receiver(&url);
    let (status, problem) = deliver(&paddle, &sample(None, "another-secret")).await;
    assert_eq!(status, 400);
    assert!(problem.contains("signature-mismatch"), "{problem}");
    let negative = body(
        "evt_01jdx4qh1w6y2c5e9k3m7p8r0t",
        "transaction.completed",
        "-5",
    );
    let (status, problem) = deliver(&paddle, &sample(Some(&negative), SECRET)).await;
    assert_eq!(
        (status, problem.contains("invalid-payload")),
        (400, true),
        "{problem}"
    );
    let no_customer = body(
        "evt_01jdx4qh1w6y2c5e9k3m7p8r0v",
        "transaction.completed",
        "100",
    )
    .replace("\"ctm_01jdx4nv7c9d1e3f5g7h9j1k3m\"", "null");
    let (status, problem) = deliver(&paddle, &sample(Some(&no_customer), SECRET)).await;
    assert_eq!(
        (status, problem.contains("invalid-payload")),
        (400, true),
        "{problem}"
    );
    assert_eq!(
        count(&admin, "SELECT count(*) FROM processed_events").await,
        0
    );
    assert_eq!(
        count(&admin, "SELECT count(*) FROM paddle_credits").await,
        0
    );

    // Another type is claimed and ignored.
    let other = body("evt_01jdx4qh1w6y2c5e9k3m7p8r0w", "customer.updated", "0");
    assert_eq!(
        deliver(&paddle, &sample(Some(&other), SECRET)).await,
        (200, "ignored".into())
    );
    assert_eq!(
        count(&admin, "SELECT count(*) FROM paddle_credits").await,
        0
    );
}

#[tokio::test]
async fn the_database_refuses_paddles_tables_to_its_login_outside_a_won_claim() {
    let (_db, _admin, url) = migrated().await;
    let (login, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("the login connects");
    tokio::spawn(connection);
    let refused = login
        .batch_execute(
            "INSERT INTO paddle_balances (customer_id, currency, balance) VALUES ('x', 'EUR', 1)",
        )
        .await
        .expect_err("no claim");
    assert_eq!(refused.code().map(|c| c.code()), Some("42501"), "{refused}");
    let refused = login
        .batch_execute("SELECT * FROM paddle_credits")
        .await
        .expect_err("no claim");
    assert_eq!(refused.code().map(|c| c.code()), Some("42501"), "{refused}");
}

#[tokio::test]
async fn copies_delivered_at_once_credit_the_customer_once() {
    let (_db, admin, url) = migrated().await;
    const COPIES: usize = 8;
    let barrier = Arc::new(Barrier::new(COPIES));
    let event = sample(None, SECRET);
    let mut tasks = Vec::new();
    for _ in 0..COPIES {
        let (barrier, event) = (Arc::clone(&barrier), event.clone());
        let paddle = receiver(&url);
        tasks.push(tokio::spawn(async move {
            // Connected first, so the race is between the transactions.
            paddle.warm_up().await;
            barrier.wait().await;
            deliver(&paddle, &event).await
        }));
    }
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.expect("a delivery"));
    }
    let processed = answers.iter().filter(|a| a.1 == "processed").count();
    let duplicate = answers.iter().filter(|a| a.1 == "duplicate").count();
    assert_eq!((processed, duplicate), (1, COPIES - 1), "{answers:?}");
    assert_eq!(
        count(&admin, "SELECT balance FROM paddle_balances").await,
        5000
    );
}

#[tokio::test]
async fn a_failed_effect_takes_the_claim_with_it_and_the_retry_applies_once() {
    let (_db, admin, url) = migrated().await;
    // The first credit's balance update fails (a sequence is not rolled back, so it fails
    // exactly once; SECURITY DEFINER, as the login may not use the sequence); the credit row
    // inserted before it must go with the claim.
    admin
        .batch_execute(
            "CREATE SEQUENCE paddle_fail_once; \
             CREATE FUNCTION paddle_fail_first() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$ \
             BEGIN IF nextval('paddle_fail_once') = 1 THEN \
                 RAISE EXCEPTION 'planned failure' USING ERRCODE = 'P0001'; END IF; \
                 RETURN NEW; END $$; \
             CREATE TRIGGER fail_first BEFORE INSERT ON paddle_balances \
                 FOR EACH ROW EXECUTE FUNCTION paddle_fail_first()",
        )
        .await
        .expect("the planned failure");
    let paddle = receiver(&url);
    let event = sample(None, SECRET);
    let (status, _) = deliver(&paddle, &event).await;
    assert_eq!(status, 500);
    assert_eq!(
        count(&admin, "SELECT last_value FROM paddle_fail_once").await,
        1,
        "the planned failure ran"
    );
    assert_eq!(
        count(&admin, "SELECT count(*) FROM processed_events").await,
        0
    );
    assert_eq!(
        count(&admin, "SELECT count(*) FROM paddle_credits").await,
        0
    );
    assert_eq!(
        deliver(&paddle, &event).await,
        (200, "processed".into()),
        "the sender's retry heals"
    );
    assert_eq!(
        count(&admin, "SELECT balance FROM paddle_balances").await,
        5000
    );
}
