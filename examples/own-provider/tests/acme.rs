//! Acme end to end, against a real PostgreSQL this test process starts (claimonce-local's
//! private server): its migrate binary and its receiver binary under the Lambda Runtime API
//! emulator, as claimonce's own are tested, and the claim's guarantees for its Rust effect.

// Tests assert by panicking, helpers included.
#![allow(clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use acme_webhook::{Acme, MIGRATIONS, PROVIDER, SIGNATURE_HEADER};
use claimonce::db::{Database, Settings, Timeouts};
use claimonce::log::Log;
use claimonce::verify::Sign;
use claimonce::verify::body_hmac::{BodyHmac, Encoding};
use claimonce::{Limits, Receiver};
use claimonce_local::postgres::{Options, Postgres, provider_login_sql};
use claimonce_local::runtime_api::{Outcome, RuntimeApi};
use serde_json::{Value, json};
use tokio::sync::{Barrier, OnceCell};
use tokio_postgres::{Client, NoTls};

/// The local secret of this crate's registry entry (Cargo.toml): the sample is signed with it.
const SECRET: &str = "claimonce-local-acme-secret";

static SERVER: OnceCell<Postgres> = OnceCell::const_new();
static NEXT: AtomicU32 = AtomicU32::new(0);

async fn server() -> &'static Postgres {
    SERVER
        .get_or_init(|| async {
            let dir = std::env::temp_dir().join(format!("acme-test-{}", std::process::id()));
            let options = Options {
                settings: vec![("fsync".into(), "off".into())],
                ..Options::default()
            };
            tokio::task::spawn_blocking(move || Postgres::start(&dir, &options))
                .await
                .expect("start task")
                .expect("start a private PostgreSQL")
        })
        .await
}

async fn connect(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.expect("connect");
    tokio::spawn(connection);
    client
}

fn next_name() -> String {
    format!(
        "acme_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

static TEMPLATE: OnceCell<String> = OnceCell::const_new();

/// A database with claimonce's shared migrations and Acme's applied, as the migrate binary
/// applies them; each test copies it. Migrated once per process: roles are the server's, not
/// a database's, so migrations running side by side in two databases would race to create
/// them.
async fn template() -> &'static str {
    TEMPLATE
        .get_or_init(|| async {
            let name = next_name();
            let pg = server().await;
            connect(&pg.url("postgres"))
                .await
                .batch_execute(&format!("CREATE DATABASE {name}"))
                .await
                .expect("create the template");
            let mut admin = connect(&pg.url(&name)).await;
            let all = claimonce_migrate::included(
                claimonce_migrations::SHARED,
                &[(PROVIDER, MIGRATIONS)],
                None,
            )
            .expect("one sequence");
            claimonce::migrate::apply(&mut admin, &all)
                .await
                .expect("the migrations apply");
            name
        })
        .await
}

/// A database of its own for one test, copied from `from` (the server's empty `template0`,
/// or [`template`]); returns its name.
async fn database_from(from: &str) -> String {
    let name = next_name();
    let admin = connect(&server().await.url("postgres")).await;
    // A template is briefly busy while another test copies it.
    for attempt in 0.. {
        match admin
            .batch_execute(&format!("CREATE DATABASE {name} TEMPLATE {from}"))
            .await
        {
            Ok(()) => break,
            Err(e) if attempt < 50 && e.code().map(|c| c.code()) == Some("55006") => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("create the database: {e}"),
        }
    }
    name
}

/// A migrated database of its own and Acme's login on it; returns (superuser client, the
/// login's URL).
async fn migrated() -> (Client, String) {
    let name = database_from(template().await).await;
    let pg = server().await;
    (connect(&pg.url(&name)).await, login_on(pg, &name).await)
}

/// Acme's own login on database `name` (granted only `claimonce_acme`), as a deployment's.
async fn login_on(pg: &Postgres, name: &str) -> String {
    let login = format!("{name}_acme");
    connect(&pg.url(name))
        .await
        .batch_execute(&provider_login_sql(&login, PROVIDER))
        .await
        .expect("the login");
    pg.url_as(&login, name)
}

fn receiver(url: &str) -> Receiver<Acme> {
    let timeouts = Timeouts::new(Duration::from_secs(2), Duration::from_secs(5));
    let settings = Settings::from_url(url, None, timeouts).expect("settings");
    let provider = Acme::new(&[SECRET]).expect("a secret");
    Receiver::new(
        provider,
        Database::new(settings),
        Limits::default(),
        Log::capture().0,
    )
}

/// The sample delivery (`events/acme/credit.granted.json`), with `body` if given, signed
/// with `secret`.
fn sample(body: Option<&str>, secret: &str) -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/events/acme/credit.granted.json"
    );
    let mut event: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("the sample")).expect("JSON");
    if let Some(body) = body {
        event["body"] = json!(body);
    }
    let signer = BodyHmac::new(SIGNATURE_HEADER, "sha256=", Encoding::LowerHex, &[secret])
        .expect("a secret");
    let body = event["body"].as_str().expect("a text body").to_owned();
    for (name, value) in signer.sign(body.as_bytes(), 0, "") {
        event["headers"][name] = json!(value);
    }
    event
}

/// (status, disposition or problem type) of a response payload.
fn answer(payload: &Value) -> (u64, String) {
    let body: Value =
        serde_json::from_str(payload["body"].as_str().expect("a body")).expect("a JSON body");
    let said = body["disposition"].as_str().or(body["type"].as_str());
    (
        payload["statusCode"].as_u64().expect("a status"),
        said.expect("a disposition or a problem").to_owned(),
    )
}

async fn deliver(receiver: &Receiver<Acme>, event: &Value) -> (u64, String) {
    let payload = receiver.handle_event(&event.to_string()).await;
    answer(&serde_json::to_value(&payload).expect("a payload"))
}

async fn count(client: &Client, sql: &str) -> i64 {
    client.query_one(sql, &[]).await.expect(sql).get(0)
}

/// One running copy of a binary of this crate under the Runtime API emulator; the copy is
/// stopped when the returned child is dropped.
async fn under_the_emulator(
    binary: &str,
    path: &str,
    env: &[(&str, &str)],
) -> (RuntimeApi, tokio::process::Child) {
    let api = RuntimeApi::start(binary).await.expect("the Runtime API");
    let mut command = api.command(std::path::Path::new(path), env);
    command.stdout(std::process::Stdio::null());
    let child = command.spawn().expect("spawn the binary");
    (api, child)
}

async fn invoke(api: &RuntimeApi, event: &Value) -> Value {
    match api
        .invoke(event.to_string(), Duration::from_secs(30))
        .await
        .expect("answered")
    {
        Outcome::Response(payload) => serde_json::from_slice(&payload).expect("JSON"),
        Outcome::Error(e) => panic!("the function failed: {}", String::from_utf8_lossy(&e)),
    }
}

#[tokio::test]
async fn the_binaries_migrate_and_apply_the_sample_once_under_the_local_emulator() {
    // The roles exist once the template is migrated, so this run creates none beside it.
    template().await;
    let name = database_from("template0").await;
    let pg = server().await;
    // This deployment's migrate function: the shared migrations, then Acme's 10000.
    let (migrate, _migrate) = under_the_emulator(
        "acme-migrate",
        env!("CARGO_BIN_EXE_acme-migrate"),
        &[("DATABASE_URL", &pg.url(&name))],
    )
    .await;
    let mut expected: Vec<i32> = claimonce_migrations::SHARED
        .iter()
        .map(|m| m.version)
        .collect();
    expected.push(10000);
    let outcome = invoke(&migrate, &json!({})).await;
    assert_eq!(outcome["applied"], json!(expected), "{outcome}");

    let url = login_on(pg, &name).await;
    let (webhook, _webhook) = under_the_emulator(
        "acme-webhook",
        env!("CARGO_BIN_EXE_acme-webhook"),
        &[("DATABASE_URL", &url), ("ACME_WEBHOOK_SECRET", SECRET)],
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
    let admin = connect(&pg.url(&name)).await;
    assert_eq!(
        count(
            &admin,
            "SELECT balance_cents FROM acme_balances WHERE account = 'acct_42'"
        )
        .await,
        500
    );
    assert_eq!(count(&admin, "SELECT count(*) FROM acme_credits").await, 1);
    assert_eq!(
        count(
            &admin,
            "SELECT count(*) FROM processed_events WHERE provider = 'acme'"
        )
        .await,
        1
    );
}

#[tokio::test]
async fn a_bad_signature_or_a_bad_credit_is_refused_and_writes_nothing() {
    let (admin, url) = migrated().await;
    let acme = receiver(&url);
    let (status, problem) = deliver(&acme, &sample(None, "another-secret")).await;
    assert_eq!(status, 400);
    assert!(problem.contains("signature"), "{problem}");
    let negative = r#"{"id":"evt_neg","type":"credit.granted","data":{"account":"acct_42","amount_cents":-5,"currency":"EUR"}}"#;
    let (status, problem) = deliver(&acme, &sample(Some(negative), SECRET)).await;
    assert_eq!(status, 400);
    assert!(problem.contains("invalid-payload"), "{problem}");
    assert_eq!(
        count(&admin, "SELECT count(*) FROM processed_events").await,
        0
    );
    assert_eq!(count(&admin, "SELECT count(*) FROM acme_credits").await, 0);

    // Another type is claimed and ignored.
    let other = r#"{"id":"evt_other","type":"account.renamed","data":{}}"#;
    assert_eq!(
        deliver(&acme, &sample(Some(other), SECRET)).await,
        (200, "ignored".into())
    );
}

#[tokio::test]
async fn the_database_refuses_acmes_tables_to_its_login_outside_a_won_claim() {
    let (_admin, url) = migrated().await;
    let login = connect(&url).await;
    let refused = login
        .batch_execute(
            "INSERT INTO acme_balances (account, currency, balance_cents) VALUES ('x', 'EUR', 1)",
        )
        .await
        .expect_err("no claim");
    assert_eq!(refused.code().map(|c| c.code()), Some("42501"), "{refused}");
    let refused = login
        .batch_execute("SELECT * FROM acme_credits")
        .await
        .expect_err("no claim");
    assert_eq!(refused.code().map(|c| c.code()), Some("42501"), "{refused}");
}

#[tokio::test]
async fn copies_delivered_at_once_credit_the_account_once() {
    let (admin, url) = migrated().await;
    const COPIES: usize = 8;
    let barrier = Arc::new(Barrier::new(COPIES));
    let event = sample(None, SECRET);
    let mut tasks = Vec::new();
    for _ in 0..COPIES {
        let (barrier, event) = (Arc::clone(&barrier), event.clone());
        let acme = receiver(&url);
        tasks.push(tokio::spawn(async move {
            // Connected first, so the race is between the transactions.
            acme.warm_up().await;
            barrier.wait().await;
            deliver(&acme, &event).await
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
        count(&admin, "SELECT balance_cents FROM acme_balances").await,
        500
    );
}

#[tokio::test]
async fn a_failed_effect_takes_the_claim_with_it_and_the_retry_applies_once() {
    let (admin, url) = migrated().await;
    // The first credit's balance update fails (a sequence is not rolled back, so it fails
    // exactly once; SECURITY DEFINER, as the login may not use the sequence); the credit row
    // inserted before it must go with the claim.
    admin
        .batch_execute(
            "CREATE SEQUENCE acme_fail_once; \
             CREATE FUNCTION acme_fail_first() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$ \
             BEGIN IF nextval('acme_fail_once') = 1 THEN \
                 RAISE EXCEPTION 'planned failure' USING ERRCODE = 'P0001'; END IF; \
                 RETURN NEW; END $$; \
             CREATE TRIGGER fail_first BEFORE INSERT ON acme_balances \
                 FOR EACH ROW EXECUTE FUNCTION acme_fail_first()",
        )
        .await
        .expect("the planned failure");
    let acme = receiver(&url);
    let event = sample(None, SECRET);
    let (status, _) = deliver(&acme, &event).await;
    assert_eq!(status, 500);
    assert_eq!(
        count(&admin, "SELECT count(*) FROM processed_events").await,
        0
    );
    assert_eq!(count(&admin, "SELECT count(*) FROM acme_credits").await, 0);
    assert_eq!(
        deliver(&acme, &event).await,
        (200, "processed".into()),
        "the sender's retry heals"
    );
    assert_eq!(
        count(&admin, "SELECT balance_cents FROM acme_balances").await,
        500
    );
}
