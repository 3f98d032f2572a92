//! The migrations: applied by the runner once and only once, and by psql alone.

use std::process::Command;

use claimonce::jobs::CLAIM_FUNCTION;
use claimonce::migrate::{self, Migration};
use claimonce_tests::TestDb;
use claimonce_tests::apigw::{json_body, post_stripe, post_to};
use claimonce_tests::db::receiver_at;
use claimonce_tests::db::sqlstate as outcome;
use claimonce_tests::roles::login_with;
use claimonce_tests::sign::{
    RESEND_SECRET, checkout_completed, invoice_paid, now, resend, resend_email, stripe,
    stripe_event, subscription, svix_headers,
};

#[tokio::test]
async fn the_runner_applies_nothing_twice_and_refuses_an_edited_migration() {
    let db = TestDb::new().await;
    // The runner as the migrate function runs it: through the pooler in the pooled pass.
    let (mut client, connection) =
        tokio_postgres::connect(db.function_url(), tokio_postgres::NoTls)
            .await
            .expect("connect");
    tokio::spawn(connection);
    // The template already applied everything.
    let again = migrate::apply(&mut client, claimonce_local::migrations::ALL)
        .await
        .expect("re-run");
    assert!(again.is_empty(), "{again:?}");
    let recorded = db.count("SELECT count(*) FROM schema_migrations").await;
    assert_eq!(
        recorded,
        i64::try_from(claimonce_local::migrations::ALL.len()).expect("len")
    );

    let mut edited = claimonce_local::migrations::ALL.to_vec();
    edited[0] = Migration {
        sql: "SELECT 1",
        ..edited[0]
    };
    let refused = migrate::apply(&mut client, &edited).await;
    assert!(
        matches!(refused, Err(migrate::MigrateError::Changed { version: 1 })),
        "{refused:?}"
    );

    let extra = [Migration {
        version: 99,
        name: "extra",
        sql: "CREATE TABLE extra_table (id int)",
    }];
    let mut more = claimonce_local::migrations::ALL.to_vec();
    more.extend_from_slice(&extra);
    let applied = migrate::apply(&mut client, &more).await.expect("apply new");
    assert_eq!(applied, vec![99]);
}

#[tokio::test]
async fn the_sql_files_apply_in_order_with_psql() {
    let db = TestDb::new().await;
    db.direct_because("psql applies the files to the server, as an operator would by hand");
    let client = db.client().await;
    // An empty database next to the test's own.
    let empty = format!("{}_psql", db.name);
    client
        .batch_execute(&format!("CREATE DATABASE {empty} TEMPLATE template0"))
        .await
        .expect("create");
    let url = claimonce_tests::db::with_database(&db.url, &empty);
    // The shared folder and each provider's own, as an operator would list them.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut folders = vec![root.join("migrations")];
    folders.extend(
        std::fs::read_dir(root.join("functions"))
            .expect("functions dir")
            .map(|e| e.expect("entry").path().join("migrations"))
            .filter(|p| p.is_dir()),
    );
    let mut files: Vec<_> = folders
        .iter()
        .flat_map(|dir| std::fs::read_dir(dir).expect("migrations dir"))
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "sql"))
        .filter(|p| p.file_name().is_some_and(|n| n != "schema.sql"))
        .collect();
    files.sort_by_key(|p| {
        p.file_name()
            .and_then(|n| n.to_str())
            .and_then(claimonce_local::registry::migration_file_name)
            .map(|(version, _)| version)
            .expect("V<n>__<name>.sql")
    });
    assert_eq!(
        files.len(),
        claimonce_local::migrations::ALL.len(),
        "every file is compiled in"
    );
    for file in &files {
        let output = Command::new("psql")
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", &url, "-f"])
            .arg(file)
            .output()
            .expect("psql is installed");
        assert!(
            output.status.success(),
            "{}: {}",
            file.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let psql_db = TestDb::for_assertions(&url);
    let tables = psql_db
        .count(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename IN \
             ('processed_events', 'customers', 'subscriptions', 'email_events', 'email_suppressions')",
        )
        .await;
    assert_eq!(tables, 5);
}

#[tokio::test]
async fn a_handler_login_of_the_previous_release_writes_nothing_directly_and_still_delivers() {
    let db = TestDb::new().await;
    // A database as PostgreSQL 14 and older create it, where every role may create objects
    // in `public`; the migrations must take that away.
    let old = db
        .migrated_beside("pg14", "GRANT CREATE ON SCHEMA public TO PUBLIC")
        .await;
    let handler_url = login_with(&old, "claimonce_handler").await;
    let (handler, connection) = tokio_postgres::connect(&handler_url, tokio_postgres::NoTls)
        .await
        .expect("connect as the handler");
    tokio::spawn(connection);

    let denied = "42501";
    for (sql, expected) in [
        // A claim dated in the past would be swept while its sender may still retry.
        (
            "INSERT INTO processed_events (provider, event_id, event_type, received_at) \
             VALUES ('stripe', 'evt_old', 't', now() - interval '1000 days')",
            denied,
        ),
        // A message marked sent would never be relayed.
        (
            "INSERT INTO outbox (topic, payload, dispatched_at) VALUES ('t', '{}', now())",
            denied,
        ),
        (
            "INSERT INTO outbox (topic, payload, attempts) VALUES ('t', '{}', 99)",
            denied,
        ),
        // A function planted in `public` could shadow one the sweep or a migration calls.
        (
            "CREATE FUNCTION public.planted() RETURNS int LANGUAGE sql AS 'SELECT 1'",
            denied,
        ),
        ("CREATE TABLE public.planted (id int)", denied),
        // Not even what the claim and the effects write (V9): only the functions write.
        (
            "INSERT INTO processed_events (provider, event_id, event_type, payload_sha256) \
             VALUES ('stripe', 'evt_ok', 't', '\\x00')",
            denied,
        ),
        (
            "INSERT INTO outbox (topic, payload, provider, event_id, dedup_key) \
             VALUES ('t', '{}', 'stripe', 'evt_ok', 'k')",
            denied,
        ),
        ("UPDATE customers SET credit_balance_cents = 42", denied),
    ] {
        assert_eq!(outcome(&handler, sql).await, expected, "{sql}");
    }

    // A login of the previous release, granted only claimonce_handler, still delivers through
    // every effect (rollout): the effects run with their owner's rights behind the claim gate,
    // and claimonce_handler is a member of each provider's role until its logins are moved.
    let (stripe, _) = receiver_at(&handler_url, stripe());
    let bodies = [
        checkout_completed("evt_h1", "cus_h", "h@example.com"),
        invoice_paid("evt_h2", "cus_h", 5),
        subscription("evt_h3", "created", "sub_h", "incomplete", 10),
        subscription("evt_h4", "updated", "sub_h", "active", 10),
        stripe_event("evt_h5", "charge.refunded", 1, serde_json::json!({})),
    ];
    for body in &bodies {
        let response = post_stripe(&stripe, body).await;
        assert_eq!(response.status().as_u16(), 200, "{}", json_body(&response));
    }
    let (resend, _) = receiver_at(&handler_url, resend());
    let body = resend_email("bounced", "em_h", &["h@example.com"]);
    let headers = svix_headers("svix", RESEND_SECRET, "msg_h", now(), &body);
    let headers: Vec<(&str, &str)> = headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let response = post_to(&resend, "/webhooks/resend", &headers, &body).await;
    assert_eq!(response.status().as_u16(), 200, "{}", json_body(&response));
    for (sql, expected) in [
        ("SELECT count(*) FROM processed_events", 6),
        (
            "SELECT count(*) FROM outbox WHERE topic = 'email.welcome'",
            1,
        ),
        ("SELECT credit_balance_cents FROM customers", 5),
        (
            "SELECT count(*) FROM subscriptions WHERE status = 'active'",
            1,
        ),
        ("SELECT count(*) FROM email_suppressions", 1),
    ] {
        assert_eq!(old.count(sql).await, expected, "{sql}");
    }
}

/// `pg_dump --schema-only` of a database with every migration applied, without what changes
/// from one dump to the next (the version banner, psql's `\restrict` key, empty lines).
async fn schema_now(db: &TestDb) -> String {
    let output = tokio::process::Command::new(claimonce_local::postgres::tool("pg_dump"))
        .args(["--schema-only", "--no-owner", "-d", &db.url])
        .output()
        .await
        .expect("pg_dump is installed beside the server");
    assert!(
        output.status.success(),
        "pg_dump: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut kept = String::from(
        "-- The schema every migration leaves, functions and grants included: what a fresh\n\
         -- database looks like after `migrate`. Rendered with pg_dump --schema-only; a test\n\
         -- (migrations::the_committed_schema_is_what_the_migrations_make) fails when it is\n\
         -- stale: CLAIMONCE_WRITE_SCHEMA=1 cargo test --test integration committed_schema\n\
         -- writes it again. Not applied by anything: the migrations are the source.\n",
    );
    // Runs of empty lines, left where the dump's own comments were, are kept as one.
    let mut blank = true;
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let noise = line.starts_with("--")
            || line.starts_with("\\restrict")
            || line.starts_with("\\unrestrict");
        if noise || (line.is_empty() && blank) {
            continue;
        }
        blank = line.is_empty();
        kept.push_str(line);
        kept.push('\n');
    }
    kept
}

/// `migrations/schema.sql` is today's schema, so a reader (or a reviewer of a migration) sees
/// the result without replaying eight files and picking the highest `_vN` of each function.
#[tokio::test]
async fn the_committed_schema_is_what_the_migrations_make() {
    let db = TestDb::new().await;
    db.direct_because("pg_dump reads the server's catalog, as an operator would");
    let now = schema_now(&db).await;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations/schema.sql");
    if std::env::var("CLAIMONCE_WRITE_SCHEMA").is_ok_and(|v| v == "1") {
        std::fs::write(&path, &now).expect("write migrations/schema.sql");
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == now,
        "migrations/schema.sql is not what the migrations make: run \
         CLAIMONCE_WRITE_SCHEMA=1 cargo test --test integration committed_schema, and review \
         the diff"
    );
    // What a reader comes for is in it: the ledger and the newest claim function.
    assert!(
        now.contains("CREATE TABLE public.processed_events"),
        "{now}"
    );
    assert!(
        now.contains(&format!("FUNCTION public.{CLAIM_FUNCTION}(")),
        "{now}"
    );
}

/// One `Effect::call("name", vec![Param::new(.., Type::X), ..])` in a crate's source: the
/// function it names, the argument types, in order, and whether `.with_claim()` follows it
/// (the claim's provider and event id passed first).
fn effect_calls_in(source: &str) -> Vec<(String, Vec<String>, bool)> {
    let mut calls = Vec::new();
    for (at, _) in source.match_indices("Effect::call(") {
        let rest = &source[at + "Effect::call(".len()..];
        let name = rest
            .trim_start()
            .strip_prefix('"')
            .and_then(|r| r.split_once('"'))
            .map(|(name, _)| name.to_owned())
            .unwrap_or_else(|| {
                panic!(
                    "an Effect::call whose function is not a literal: {}",
                    &rest[..80.min(rest.len())]
                )
            });
        let (args, after) = rest
            .split_once("vec![")
            .and_then(|(_, r)| r.split_once(']'))
            .unwrap_or_else(|| panic!("{name}: arguments not a vec![..] literal"));
        let with_claim = after
            .trim_start()
            .strip_prefix(',')
            .unwrap_or(after)
            .trim_start()
            .strip_prefix(')')
            .is_some_and(|r| r.trim_start().starts_with(".with_claim()"));
        let types = args
            .split("Type::")
            .skip(1)
            .map(|t| {
                t.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .next()
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect();
        calls.push((name, types, with_claim));
    }
    calls
}

fn postgres_type(name: &str) -> claimonce::prelude::Type {
    use claimonce::prelude::Type;
    match name {
        "TEXT" => Type::TEXT,
        "INT2" => Type::INT2,
        "INT4" => Type::INT4,
        "INT8" => Type::INT8,
        "BOOL" => Type::BOOL,
        "BYTEA" => Type::BYTEA,
        "JSONB" => Type::JSONB,
        "TIMESTAMPTZ" => Type::TIMESTAMPTZ,
        "TEXT_ARRAY" => Type::TEXT_ARRAY,
        "INT8_ARRAY" => Type::INT8_ARRAY,
        other => panic!("Type::{other}: add it to this test's table"),
    }
}

/// Every effect call in the code names a function that the migrations create, with argument
/// types it takes: each `Effect::call` in the source of every crate under `functions/` and of
/// the shared crate, and the forward effect, is prepared as the delivery statement the
/// pipeline sends (`claim::statement`, the claim's four arguments first) on a database
/// migrated to the latest version. A call that no sample reaches is checked too; a renamed or
/// retyped function, a dropped `_vN` that code still names, or a call this test cannot read
/// fails it.
#[tokio::test]
async fn every_effect_call_in_the_code_names_a_function_the_migrations_create() {
    let db = TestDb::new().await;
    db.direct_because("it prepares statements to check names and types; it delivers nothing");
    let client = db.client().await;
    let root = claimonce_local::functions::workspace_root();
    let mut pending: Vec<std::path::PathBuf> = std::fs::read_dir(root.join("functions"))
        .expect("functions/")
        .map(|e| e.expect("entry").path().join("src"))
        .collect();
    pending.push(root.join("shared").join("src"));
    let mut checked = Vec::new();
    while let Some(path) = pending.pop() {
        if path.is_dir() {
            pending.extend(
                std::fs::read_dir(&path)
                    .expect("dir")
                    .map(|e| e.expect("entry").path()),
            );
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let source = std::fs::read_to_string(&path).expect("source");
        for (name, types, with_claim) in effect_calls_in(&source) {
            let params = types
                .iter()
                .map(|t| claimonce::prelude::Param::new(None::<String>, postgres_type(t)))
                .collect();
            let function: &'static str = Box::leak(name.clone().into_boxed_str());
            let effect = claimonce::prelude::Effect::call(function, params);
            let effect = if with_claim {
                effect.with_claim()
            } else {
                effect
            };
            let declared = types.iter().map(|t| postgres_type(t)).collect();
            prepare(&client, &effect, declared)
                .await
                .unwrap_or_else(|e| {
                    panic!("{}: {name}({}): {e}", path.display(), types.join(", "))
                });
            checked.push(name);
        }
    }
    let forward = claimonce::prelude::Effect::forward(
        "topic".into(),
        claimonce::prelude::Forwardable::new(b"{}").expect("a JSON body"),
    );
    prepare(&client, &forward, vec![claimonce::prelude::Type::TEXT; 4])
        .await
        .expect("the forward effect");
    checked.sort();
    checked.dedup();
    // Stripe's three, Resend's, GitHub's and Shopify's: fewer means the scan stopped reading.
    assert!(checked.len() >= 6, "only {checked:?} found");
}

/// Prepares the delivery statement for `effect`, the claim's types then `declared`: PostgreSQL
/// resolves the function by its name and these argument types.
async fn prepare(
    client: &tokio_postgres::Client,
    effect: &claimonce::prelude::Effect,
    declared: Vec<claimonce::prelude::Type>,
) -> Result<(), String> {
    let mut types = vec![
        claimonce::prelude::Type::TEXT,
        claimonce::prelude::Type::TEXT,
        claimonce::prelude::Type::TEXT,
        claimonce::prelude::Type::BYTEA,
    ];
    types.extend(declared);
    client
        .prepare_typed(&claimonce::jobs::claim_statement(Some(effect)), &types)
        .await
        .map(drop)
        .map_err(|e| match e.as_db_error() {
            Some(db) => format!("{}: {}", db.code().code(), db.message()),
            None => e.to_string(),
        })
}
