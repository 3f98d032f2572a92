//! Migrations on deploy: the migrate function as a CloudFormation custom resource (its answer
//! PUT to a loopback stand-in for the pre-signed response URL) and as a one-shot invoke of
//! the real binary.

use std::time::Duration;

use claimonce::db::Settings;
use claimonce::jobs::CLAIM_FUNCTION;
use claimonce::log::Log;
use claimonce::migrate::Migration;
use claimonce::prelude::ConfigError;
use claimonce_local::runtime_api::{Outcome, RuntimeApi};
use claimonce_migrate::Migrator;
use claimonce_tests::TestDb;
use claimonce_tests::db::{test_timeouts, with_database};
use claimonce_tests::recorder::{Recorded, Recorder};
use serde_json::{Value, json};

fn fresh_name(db: &TestDb) -> String {
    format!("{}_fresh", db.name)
}

/// A database with nothing in it, next to the test's own; returns its URL as the migrate
/// function reaches it: through PgBouncer in the pooled pass, as it reaches RDS Proxy.
async fn empty_database(db: &TestDb) -> String {
    let name = fresh_name(db);
    db.client()
        .await
        .batch_execute(&format!("CREATE DATABASE {name} TEMPLATE template0"))
        .await
        .expect("create an empty database");
    with_database(db.function_url(), &name)
}

/// A migrator that answers custom-resource requests at a loopback stand-in for CloudFormation's
/// S3 URL (`MIGRATE_LOOPBACK_RESPONSE_URL=1`, which the template never sets).
fn migrator(url: &str, migrations: &'static [Migration]) -> Migrator {
    let settings = Settings::from_url(url, None, test_timeouts()).expect("settings");
    Migrator::new(Ok(settings), migrations, Log::capture().0).with_options(Ok(loopback()))
}

fn loopback() -> claimonce_migrate::Options {
    claimonce_migrate::Options {
        loopback_response_url: true,
        ..claimonce_migrate::Options::default()
    }
}

/// A migrator whose database settings could not be read (answering every request).
fn unconfigured() -> Migrator {
    Migrator::new(
        Err(ConfigError::new(
            "set DATABASE_URL, or DB_HOST and DB_NAME".into(),
        )),
        claimonce_migrations::ALL,
        Log::capture().0,
    )
    .with_options(Ok(loopback()))
}

/// The migrations plus `extra`, as the migrate binary would carry them.
fn with_extra(extra: Migration) -> &'static [Migration] {
    let mut all = claimonce_migrations::ALL.to_vec();
    all.push(extra);
    Box::leak(all.into_boxed_slice())
}

/// A migrator with these `options`.
fn migrator_with(
    url: &str,
    migrations: &'static [Migration],
    options: claimonce_migrate::Options,
) -> Migrator {
    migrator(url, migrations).with_options(Ok(options))
}

/// The database [`empty_database`] made beside `db`, for assertions: reached directly, not
/// through the pooler the function under test goes through.
fn fresh(db: &TestDb) -> TestDb {
    TestDb::for_assertions(&with_database(&db.url, &fresh_name(db)))
}

fn request(kind: &str, response_url: &str) -> Value {
    let mut event = json!({
        "RequestType": kind,
        "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:claimonce-MigrateFunction:live",
        "ResponseURL": format!("{response_url}/cfn-response/abc?X-Amz-Signature=deadbeef"),
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/claimonce/0a1b2c3d",
        "RequestId": format!("req-{kind}"),
        "LogicalResourceId": "DatabaseMigrations",
        "ResourceType": "Custom::DatabaseMigrations",
        "ResourceProperties": {"ServiceToken": "arn:…", "FunctionVersion": "7"}
    });
    if kind != "Create" {
        event["PhysicalResourceId"] = json!(claimonce_migrate::PHYSICAL_RESOURCE_ID);
    }
    event
}

/// The one PUT CloudFormation would receive for the last request.
fn last_put(recorder: &Recorder) -> (Recorded, Value) {
    let requests = recorder.requests();
    let put = requests.last().expect("a response was PUT").clone();
    assert_eq!(put.method, "PUT");
    assert_eq!(put.uri, "/cfn-response/abc?X-Amz-Signature=deadbeef");
    // The URL is pre-signed for a PUT without a content type.
    assert_eq!(put.header("content-type"), None, "{put:?}");
    let body = put.json();
    (put, body)
}

fn all_versions() -> String {
    claimonce_migrations::ALL
        .iter()
        .map(|m| m.version.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

#[tokio::test]
async fn a_create_applies_the_migrations_and_an_update_or_delete_changes_nothing() {
    let db = TestDb::new().await;
    let url = empty_database(&db).await;
    let cfn = Recorder::ok().await;
    let migrate = migrator(&url, claimonce_migrations::ALL);

    migrate
        .handle(&request("Create", &cfn.url))
        .await
        .expect("answered");
    let (_, body) = last_put(&cfn);
    assert_eq!(body["Status"], "SUCCESS", "{body}");
    assert_eq!(body["Data"]["Applied"], all_versions().as_str());
    assert_eq!(
        body["Data"]["Latest"],
        claimonce_migrations::latest().to_string().as_str()
    );
    assert_eq!(
        body["PhysicalResourceId"],
        claimonce_migrate::PHYSICAL_RESOURCE_ID
    );
    assert_eq!(body["RequestId"], "req-Create");
    assert_eq!(body["LogicalResourceId"], "DatabaseMigrations");
    assert_eq!(
        body["StackId"],
        "arn:aws:cloudformation:us-east-1:123456789012:stack/claimonce/0a1b2c3d"
    );
    let fresh = fresh(&db);
    assert_eq!(
        fresh.count("SELECT count(*) FROM schema_migrations").await,
        i64::try_from(claimonce_migrations::ALL.len()).expect("len")
    );
    assert_eq!(fresh.count("SELECT count(*) FROM outbox").await, 0);

    // The next deploy's Update applies nothing and keeps the physical id.
    migrate
        .handle(&request("Update", &cfn.url))
        .await
        .expect("answered");
    let (_, body) = last_put(&cfn);
    assert_eq!(body["Status"], "SUCCESS", "{body}");
    assert_eq!(body["Data"]["Applied"], "");
    assert_eq!(
        body["PhysicalResourceId"],
        claimonce_migrate::PHYSICAL_RESOURCE_ID
    );

    // Delete does not touch the database: here there is none to reach.
    let unreachable = migrator(
        "postgres://postgres@127.0.0.1:1/nothing?sslmode=disable",
        claimonce_migrations::ALL,
    );
    let started = std::time::Instant::now();
    unreachable
        .handle(&request("Delete", &cfn.url))
        .await
        .expect("answered");
    assert!(started.elapsed() < Duration::from_secs(2));
    let (_, body) = last_put(&cfn);
    assert_eq!(body["Status"], "SUCCESS", "{body}");
    assert_eq!(body["Data"], json!({}));
    assert_eq!(cfn.requests().len(), 3);
    assert_eq!(
        fresh.count("SELECT count(*) FROM schema_migrations").await,
        i64::try_from(claimonce_migrations::ALL.len()).expect("len")
    );
}

#[tokio::test]
async fn a_failing_migration_is_reported_failed_without_data_or_secrets() {
    let db = TestDb::new().await;
    let fresh_url = empty_database(&db).await;
    // The loopback server trusts every login, so a password in the URL is accepted and
    // ignored: it is there to show that it never reaches the answer or the log.
    let url = fresh_url.replacen("postgres@", "postgres:s3cr3t-pw@", 1);
    assert!(url.contains("s3cr3t-pw"));
    let mut with_poison = claimonce_migrations::ALL.to_vec();
    with_poison.push(Migration {
        version: 99,
        name: "poison",
        // The server's message would quote the value: "invalid input syntax ... hunter2".
        sql: "CREATE TABLE poisoned (n int); SELECT 'hunter2'::int",
    });
    let with_poison: &'static [Migration] = Box::leak(with_poison.into_boxed_slice());
    let cfn = Recorder::ok().await;
    let settings = Settings::from_url(&url, None, test_timeouts()).expect("settings");
    let (log, lines) = Log::capture();
    let migrate = Migrator::new(Ok(settings), with_poison, log).with_options(Ok(loopback()));

    migrate
        .handle(&request("Create", &cfn.url))
        .await
        .expect("answered");
    let (put, body) = last_put(&cfn);
    assert_eq!(body["Status"], "FAILED", "{body}");
    let reason = body["Reason"].as_str().expect("a reason");
    assert!(
        reason.contains("V99__poison") && reason.contains("22P02"),
        "{reason}"
    );
    let everything = format!(
        "{}{}",
        String::from_utf8_lossy(&put.body),
        lines.lock().expect("log").join("\n")
    );
    for secret in ["hunter2", "s3cr3t-pw", "invalid input"] {
        assert!(
            !everything.contains(secret),
            "{secret} leaked: {everything}"
        );
    }
    assert_eq!(body["Data"], json!({}));
    // The migrations before it were applied and recorded; the failed one left nothing.
    let fresh_db = fresh(&db);
    assert_eq!(
        fresh_db
            .count("SELECT count(*) FROM schema_migrations")
            .await,
        i64::try_from(claimonce_migrations::ALL.len()).expect("len")
    );
    assert_eq!(
        fresh_db
            .count("SELECT count(*) FROM pg_tables WHERE tablename = 'poisoned'")
            .await,
        0
    );

    // An edited migration is refused, and so is a function without database settings.
    let mut edited = claimonce_migrations::ALL.to_vec();
    edited[0] = Migration {
        sql: "SELECT 1",
        ..edited[0]
    };
    let edited: &'static [Migration] = Box::leak(edited.into_boxed_slice());
    migrator(&url, edited)
        .handle(&request("Update", &cfn.url))
        .await
        .expect("answered");
    let (_, body) = last_put(&cfn);
    assert_eq!(body["Status"], "FAILED");
    assert!(
        body["Reason"]
            .as_str()
            .unwrap_or("")
            .contains("V1 was changed"),
        "{body}"
    );
    unconfigured()
        .handle(&request("Create", &cfn.url))
        .await
        .expect("answered");
    let (_, body) = last_put(&cfn);
    assert_eq!(body["Status"], "FAILED");
    assert!(
        body["Reason"]
            .as_str()
            .unwrap_or("")
            .contains("DATABASE_URL"),
        "{body}"
    );
}

#[tokio::test]
async fn an_unreachable_response_url_fails_the_invocation_so_lambda_retries_it() {
    let db = TestDb::new().await;
    let migrate = migrator(db.function_url(), claimonce_migrations::ALL);
    let refused = Recorder::start(|_| (403, "application/xml", "<Error/>".into())).await;
    let outcome = migrate.handle(&request("Update", &refused.url)).await;
    let error = outcome.expect_err("a response CloudFormation never got is an error");
    assert!(error.contains("status 403"), "{error}");
    assert_eq!(refused.requests().len(), 3, "retried");
}

/// A request whose answer would go anywhere but CloudFormation's https S3 URL is refused with
/// nothing done: a forged request (anyone allowed to invoke the function) cannot make it PUT to
/// a host of its choosing. Without the test setting, the loopback stand-in is such a host.
#[tokio::test]
async fn a_request_naming_another_response_host_is_refused_with_nothing_done() {
    let db = TestDb::new().await;
    let url = empty_database(&db).await;
    let settings = Settings::from_url(&url, None, test_timeouts()).expect("settings");
    let (log, lines) = Log::capture();
    let strict = Migrator::new(Ok(settings), claimonce_migrations::ALL, log)
        .with_options(Ok(claimonce_migrate::Options::default()));
    let elsewhere = Recorder::ok().await;
    let error = strict
        .handle(&request("Create", &elsewhere.url))
        .await
        .expect_err("refused");
    assert!(error.contains("refused"), "{error}");
    assert!(elsewhere.requests().is_empty(), "nothing was sent");
    let said = lines.lock().expect("log").join("\n");
    assert!(said.contains("custom-resource request refused"), "{said}");
    assert_eq!(
        fresh(&db)
            .count("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
            .await,
        0,
        "no migration ran"
    );
}

/// The real migrate binary under a Runtime API with `env`; it runs until the child is dropped.
async fn migrate_binary(env: &[(&str, &str)]) -> (RuntimeApi, tokio::process::Child) {
    let mut env = env.to_vec();
    env.push(("MIGRATE_LOOPBACK_RESPONSE_URL", "1"));
    claimonce_tests::lambda::started("migrate", &env).await
}

#[tokio::test]
async fn the_migrate_binary_answers_a_plain_invoke_and_a_custom_resource() {
    let db = TestDb::new().await;
    let url = empty_database(&db).await;
    let (api, _instance) = migrate_binary(&[("DATABASE_URL", &url)]).await;

    let invoke = |event: Value| {
        let api = &api;
        async move {
            match api
                .invoke(event.to_string(), Duration::from_secs(30))
                .await
                .expect("answered")
            {
                Outcome::Response(payload) => {
                    serde_json::from_slice::<Value>(&payload).expect("JSON")
                }
                Outcome::Error(e) => panic!("migrate failed: {}", String::from_utf8_lossy(&e)),
            }
        }
    };
    let versions: Vec<i32> = claimonce_migrations::ALL
        .iter()
        .map(|m| m.version)
        .collect();
    let latest = claimonce_migrations::latest();
    assert_eq!(
        invoke(json!({})).await,
        json!({"applied": versions, "latest": latest})
    );
    assert_eq!(
        invoke(json!({})).await,
        json!({"applied": [], "latest": latest})
    );

    let cfn = Recorder::ok().await;
    invoke(request("Update", &cfn.url)).await;
    let (_, body) = last_put(&cfn);
    assert_eq!(body["Status"], "SUCCESS", "{body}");
    assert_eq!(body["Data"]["Applied"], "");
}

/// The migrate binary, run once with `CLAIMONCE_PROVIDERS` set to `providers`, and what its
/// plain invoke answered.
async fn migrate_binary_with(url: &str, providers: &str) -> Outcome {
    let (api, _instance) =
        migrate_binary(&[("DATABASE_URL", url), ("CLAIMONCE_PROVIDERS", providers)]).await;
    api.invoke(json!({}).to_string(), Duration::from_secs(30))
        .await
        .expect("answered")
}

fn versions(migrations: &[Migration]) -> Vec<i32> {
    migrations.iter().map(|m| m.version).collect()
}

#[tokio::test]
async fn the_migrate_binary_applies_the_shared_migrations_and_only_the_included_providers() {
    let db = TestDb::new().await;
    let url = empty_database(&db).await;
    let fresh = fresh(&db);
    let applied = |outcome: Outcome| match outcome {
        Outcome::Response(payload) => {
            serde_json::from_slice::<Value>(&payload).expect("JSON")["applied"].clone()
        }
        Outcome::Error(e) => panic!("migrate failed: {}", String::from_utf8_lossy(&e)),
    };
    let with_own: Vec<&str> = claimonce_migrations::PROVIDERS
        .iter()
        .filter(|(_, own)| !own.is_empty())
        .map(|(p, _)| *p)
        .collect();
    assert!(!with_own.is_empty(), "a provider ships its own migrations");
    let others: Vec<&str> = claimonce_migrations::PROVIDERS
        .iter()
        .map(|(p, _)| *p)
        .filter(|p| !with_own.contains(p))
        .collect();

    // A deployment of the providers without migrations of their own: the shared ones only.
    let first = applied(migrate_binary_with(&url, &format!("{},", others.join(","))).await);
    assert_eq!(first, json!(versions(claimonce_migrations::SHARED)));
    for (provider, own) in claimonce_migrations::PROVIDERS {
        for migration in *own {
            let recorded = format!(
                "SELECT count(*) FROM schema_migrations WHERE version = {}",
                migration.version
            );
            assert_eq!(fresh.count(&recorded).await, 0, "{provider}");
        }
    }
    assert_eq!(
        fresh
            .count("SELECT count(*) FROM pg_class WHERE relname = 'shopify_orders'")
            .await,
        0,
        "a provider left out gets no tables"
    );

    // Added to the deployment later: its migrations apply then, after newer shared ones.
    let all: Vec<&str> = claimonce_migrations::PROVIDERS
        .iter()
        .map(|(p, _)| *p)
        .collect();
    let second = applied(migrate_binary_with(&url, &all.join(",")).await);
    let mut own: Vec<i32> = claimonce_migrations::PROVIDERS
        .iter()
        .flat_map(|(_, own)| versions(own))
        .collect();
    own.sort_unstable();
    assert_eq!(second, json!(own));
    assert_eq!(
        fresh.count("SELECT count(*) FROM schema_migrations").await,
        i64::try_from(claimonce_migrations::ALL.len()).expect("len")
    );

    // A name the function does not carry is refused by name, and applies nothing.
    match migrate_binary_with(&url, "github,shopfy").await {
        Outcome::Error(e) => {
            let e = String::from_utf8_lossy(&e);
            assert!(
                e.contains("CLAIMONCE_PROVIDERS") && e.contains("shopfy"),
                "{e}"
            );
        }
        Outcome::Response(payload) => {
            panic!("answered {}", String::from_utf8_lossy(&payload))
        }
    }
}

#[tokio::test]
async fn a_rollback_update_for_the_previous_version_applies_nothing_and_succeeds() {
    let db = TestDb::new().await;
    let url = empty_database(&db).await;
    // The running (new) code carries a migration that fails; CloudFormation rolls the
    // resource back with the previous deploy's properties, naming the previous version.
    let mut with_poison = claimonce_migrations::ALL.to_vec();
    with_poison.push(Migration {
        version: 99,
        name: "poison",
        sql: "SELECT 1 / 0",
    });
    let with_poison: &'static [Migration] = Box::leak(with_poison.into_boxed_slice());
    let settings = Settings::from_url(&url, None, test_timeouts()).expect("settings");
    let migrate = Migrator::new(Ok(settings), with_poison, Log::capture().0)
        .with_options(Ok(loopback()))
        .with_version(Some("8".into()));
    let cfn = Recorder::ok().await;
    let version = |v: &str| {
        format!("arn:aws:lambda:us-east-1:123456789012:function:claimonce-MigrateFunction:{v}")
    };

    let mut rollback = request("Update", &cfn.url);
    rollback["ResourceProperties"]["FunctionVersion"] = json!(version("7"));
    migrate.handle(&rollback).await.expect("answered");
    let (_, body) = last_put(&cfn);
    assert_eq!(body["Status"], "SUCCESS", "{body}");
    assert_eq!(body["Data"]["Applied"], "");
    assert_eq!(body["Data"]["Latest"], "99");
    let fresh = fresh(&db);
    assert_eq!(
        fresh
            .count("SELECT count(*) FROM pg_tables WHERE tablename = 'schema_migrations'")
            .await,
        0,
        "the database was not touched"
    );

    // The update for the running version does apply (and here fails).
    let mut forward = request("Update", &cfn.url);
    forward["ResourceProperties"]["FunctionVersion"] = json!(version("8"));
    migrate.handle(&forward).await.expect("answered");
    let (_, body) = last_put(&cfn);
    assert_eq!(body["Status"], "FAILED", "{body}");
}

/// A request for the settings resource (the template's `MigrateSettings`), carrying the
/// migrate function's `variables`, log level and network as CloudFormation resolves them, with
/// the ServiceToken and ServiceTimeout it adds (numbers as strings).
fn settings_request(kind: &str, response_url: &str, variables: &[(&str, &str)]) -> Value {
    let mut event = request(kind, response_url);
    event["LogicalResourceId"] = json!("MigrateSettings");
    event["ResourceType"] = json!(claimonce_migrate::cfn::SETTINGS_RESOURCE_TYPE);
    let variables: serde_json::Map<String, Value> = variables
        .iter()
        .map(|(name, value)| ((*name).to_owned(), json!(value)))
        .collect();
    event["ResourceProperties"] = json!({
        "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:claimonce-MigrateFunction",
        "ServiceTimeout": "900",
        "Environment": {"Variables": variables},
        "LoggingConfig": {"LogFormat": "JSON", "ApplicationLogLevel": "INFO", "SystemLogLevel": "INFO"},
        "VpcConfig": {"SubnetIds": ["subnet-0a", "subnet-0b"], "SecurityGroupIds": ["sg-0a"]}
    });
    if kind != "Create" {
        event["PhysicalResourceId"] = json!(claimonce_migrate::cfn::SETTINGS_PHYSICAL_RESOURCE_ID);
    }
    event
}

/// The Digest a settings request was answered with (the version's description).
fn digest(body: &Value) -> String {
    assert_eq!(body["Status"], "SUCCESS", "{body}");
    body["Data"]["Digest"]
        .as_str()
        .unwrap_or_else(|| panic!("no Digest: {body}"))
        .to_owned()
}

/// The settings resource is answered with the digest of its properties and nothing is done:
/// the database is not touched (nor reached: an unconfigured function answers too). The digest
/// is the same for the same values in another order, and another when a provider is added to
/// CLAIMONCE_PROVIDERS (a provider deployed later): the version's description changes with it,
/// so CloudFormation replaces the version and Lambda publishes the new variables.
#[tokio::test]
async fn the_settings_resource_is_answered_with_the_digest_of_its_properties_alone() {
    let db = TestDb::new().await;
    let url = empty_database(&db).await;
    let migrate = migrator(&url, claimonce_migrations::ALL);
    let cfn = Recorder::ok().await;
    let variables = [
        ("DB_NAME", "claimonce"),
        ("CLAIMONCE_PROVIDERS", "resend,"),
        ("DB_HANDLER_STATEMENT_TIMEOUT_MS", "3000"),
    ];

    let create = settings_request("Create", &cfn.url, &variables);
    migrate.handle(&create).await.expect("answered");
    let (_, body) = last_put(&cfn);
    let first = digest(&body);
    assert_eq!(
        first,
        claimonce_migrate::cfn::settings_digest(&create["ResourceProperties"])
    );
    assert!(
        first.starts_with("settings sha256:") && first.len() <= 256,
        "{first}"
    );
    assert_eq!(
        body["PhysicalResourceId"],
        claimonce_migrate::cfn::SETTINGS_PHYSICAL_RESOURCE_ID
    );
    assert_eq!(body["LogicalResourceId"], "MigrateSettings");

    // The same values in another order: the same digest, no new version.
    let mut reordered = variables;
    reordered.reverse();
    migrate
        .handle(&settings_request("Update", &cfn.url, &reordered))
        .await
        .expect("answered");
    assert_eq!(digest(&last_put(&cfn).1), first);

    // A provider deployed later: another digest.
    let later = [
        ("DB_NAME", "claimonce"),
        ("CLAIMONCE_PROVIDERS", "github,resend,"),
        ("DB_HANDLER_STATEMENT_TIMEOUT_MS", "3000"),
    ];
    migrate
        .handle(&settings_request("Update", &cfn.url, &later))
        .await
        .expect("answered");
    assert_ne!(digest(&last_put(&cfn).1), first);

    migrate
        .handle(&settings_request("Delete", &cfn.url, &variables))
        .await
        .expect("answered");
    let (_, body) = last_put(&cfn);
    assert_eq!(body["Status"], "SUCCESS", "{body}");
    assert_eq!(body["Data"], json!({}));

    // A function whose configuration is unusable still names it.
    unconfigured()
        .handle(&settings_request("Create", &cfn.url, &variables))
        .await
        .expect("answered");
    assert_eq!(digest(&last_put(&cfn).1), first);

    assert_eq!(
        fresh(&db)
            .count("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
            .await,
        0,
        "no migration ran"
    );
}

/// One invocation of a migrate binary, answered.
async fn invoked(api: &RuntimeApi, event: &Value) -> Value {
    match api
        .invoke(event.to_string(), Duration::from_secs(30))
        .await
        .expect("answered")
    {
        Outcome::Response(payload) => serde_json::from_slice(&payload).expect("JSON"),
        Outcome::Error(e) => panic!("migrate failed: {}", String::from_utf8_lossy(&e)),
    }
}

/// The defect of docs/decisions/0055, through the real binary: a provider deployed after the
/// first deploy (its `Deploy<Name>` flipped, so CLAIMONCE_PROVIDERS gains it, the code the
/// same). CloudFormation gives `$LATEST` the new variables and sends MigrateSettings an Update,
/// answered by `$LATEST` with another digest; the version whose description that is, published
/// from `$LATEST`, is what the alias and DatabaseMigrations then name. A request for it applies
/// the provider's migrations; a rollback-shaped request (the deploy before's properties, its
/// version) to the same code applies nothing.
#[tokio::test]
async fn a_provider_deployed_later_is_migrated_by_the_version_its_settings_publish() {
    let db = TestDb::new().await;
    let url = empty_database(&db).await;
    let fresh = fresh(&db);
    let (provider, own) = claimonce_migrations::PROVIDERS
        .iter()
        .find(|(_, own)| !own.is_empty())
        .expect("a provider ships its own migrations");
    let others: Vec<&str> = claimonce_migrations::PROVIDERS
        .iter()
        .filter(|(_, own)| own.is_empty())
        .map(|(p, _)| *p)
        .collect();
    let before = format!("{},", others.join(","));
    let after = format!("{before}{provider},");
    // The function's variables, as $LATEST and each version published from it hold them and
    // as MigrateSettings carries them (one text in the template).
    let variables = |providers: &str| -> Vec<(&'static str, String)> {
        vec![
            ("DATABASE_URL", url.clone()),
            ("CLAIMONCE_PROVIDERS", providers.to_owned()),
        ]
    };
    // The binary as Lambda runs a version of it (or $LATEST).
    let start = |providers: &str, version: &str| {
        let mut env = variables(providers);
        env.push(("AWS_LAMBDA_FUNCTION_VERSION", version.to_owned()));
        async move {
            let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
            migrate_binary(&env).await
        }
    };
    let cfn = Recorder::ok().await;
    let migrations = |kind: &str, version: &str| {
        let mut event = request(kind, &cfn.url);
        event["ResourceProperties"]["FunctionVersion"] = json!(format!(
            "arn:aws:lambda:us-east-1:123456789012:function:claimonce-MigrateFunction:{version}"
        ));
        event
    };
    let settings = |kind: &str, providers: &str| {
        let vars = variables(providers);
        let pairs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        settings_request(kind, &cfn.url, &pairs)
    };
    let recorded =
        |version: i32| format!("SELECT count(*) FROM schema_migrations WHERE version = {version}");

    // The first deploy: version 7, without the provider.
    let (seven, _seven) = start(&before, "7").await;
    invoked(&seven, &settings("Create", &before)).await;
    let first = digest(&last_put(&cfn).1);
    invoked(&seven, &migrations("Create", "7")).await;
    assert_eq!(last_put(&cfn).1["Status"], "SUCCESS");
    for migration in *own {
        assert_eq!(
            fresh.count(&recorded(migration.version)).await,
            0,
            "{provider}"
        );
    }

    // The deploy that adds it: $LATEST has the new variables and names them.
    let (latest, _latest) = start(&after, "$LATEST").await;
    invoked(&latest, &settings("Update", &after)).await;
    let second = digest(&last_put(&cfn).1);
    assert_ne!(
        second, first,
        "the same description: no version would be published, and the alias would keep 7"
    );

    // Version 8, published from $LATEST. The deploy before's request applies nothing.
    let (eight, _eight) = start(&after, "8").await;
    invoked(&eight, &migrations("Update", "7")).await;
    let (_, body) = last_put(&cfn);
    assert_eq!(body["Status"], "SUCCESS", "{body}");
    assert_eq!(
        body["Data"]["Applied"], "",
        "a rollback's request applies nothing"
    );
    for migration in *own {
        assert_eq!(
            fresh.count(&recorded(migration.version)).await,
            0,
            "{provider}"
        );
    }

    // Its own applies the provider's migrations.
    invoked(&eight, &migrations("Update", "8")).await;
    let (_, body) = last_put(&cfn);
    assert_eq!(body["Status"], "SUCCESS", "{body}");
    let applied: Vec<String> = own.iter().map(|m| m.version.to_string()).collect();
    assert_eq!(body["Data"]["Applied"], applied.join(","));
    for migration in *own {
        assert_eq!(
            fresh.count(&recorded(migration.version)).await,
            1,
            "{provider}"
        );
    }
}

fn options(users: &[&str]) -> claimonce_migrate::Options {
    claimonce_migrate::Options {
        handler_users: users
            .iter()
            .map(|u| claimonce_migrate::HandlerUser::parse(u).expect("role name"))
            .collect(),
        ..loopback()
    }
}

/// Answers one custom-resource request and returns the body CloudFormation received.
async fn answer(migrate: &Migrator, kind: &str, cfn: &Recorder) -> Value {
    migrate
        .handle(&request(kind, &cfn.url))
        .await
        .expect("answered");
    last_put(cfn).1
}

/// Asserts a FAILED answer whose reason holds every one of `parts`.
fn assert_failed(body: &Value, parts: &[&str]) {
    assert_eq!(body["Status"], "FAILED", "{body}");
    let reason = body["Reason"].as_str().unwrap_or("");
    for part in parts {
        assert!(reason.contains(part), "{part:?} not in {reason}");
    }
}

#[tokio::test]
async fn the_handler_users_get_their_timeouts_as_login_role_settings() {
    let db = TestDb::new().await;
    let url = empty_database(&db).await;
    // Roles are cluster-wide: named after this test's database so that tests do not meet.
    let role = format!("{}_stripe-webhook", db.name);
    db.client()
        .await
        .batch_execute(&format!("CREATE ROLE \"{role}\" LOGIN"))
        .await
        .expect("create the handler user");
    let mut configured = options(&[&role]);
    configured.handler_timeout = Duration::from_millis(2500);
    let migrate = migrator_with(&url, claimonce_migrations::ALL, configured);
    let cfn = Recorder::ok().await;

    // Twice: the second run (a redeploy, or Lambda retrying the invocation) changes nothing.
    for kind in ["Create", "Update"] {
        let body = answer(&migrate, kind, &cfn).await;
        assert_eq!(body["Status"], "SUCCESS", "{body}");
    }
    let settings: Vec<String> = db
        .client()
        .await
        .query(
            "SELECT unnest(setconfig) FROM pg_db_role_setting s JOIN pg_roles r ON r.oid = s.setrole \
             WHERE r.rolname = $1 AND s.setdatabase = 0 ORDER BY 1",
            &[&role],
        )
        .await
        .expect("pg_db_role_setting")
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(
        settings,
        [
            "idle_in_transaction_session_timeout=2500ms",
            "lock_timeout=2000ms",
            "statement_timeout=2500ms"
        ]
    );
    // A new session of that user starts with them: nothing needs a SET on the wire.
    let as_handler = url.replacen("postgres@", &format!("{role}@"), 1);
    let (client, connection) = tokio_postgres::connect(&as_handler, tokio_postgres::NoTls)
        .await
        .expect("connect as the handler user");
    tokio::spawn(connection);
    for name in ["statement_timeout", "idle_in_transaction_session_timeout"] {
        let shown: String = client
            .query_one(&format!("SHOW {name}"), &[])
            .await
            .expect("show")
            .get(0);
        assert_eq!(shown, "2500ms", "{name}");
    }
    let lock: String = client
        .query_one("SHOW lock_timeout", &[])
        .await
        .expect("show")
        .get(0);
    assert_eq!(
        lock, "2s",
        "a Rust effect's lock wait is bounded as the functions' are"
    );
}

#[tokio::test]
async fn a_handler_user_given_with_its_provider_role_is_moved_onto_it() {
    let db = TestDb::new().await;
    let url = empty_database(&db).await;
    // A login as earlier releases' DEPLOY.md made it: granted the shared claimonce_handler.
    let user = format!("{}_moved", db.name);
    db.client()
        .await
        .batch_execute(&format!(
            "CREATE ROLE {user} LOGIN IN ROLE claimonce_handler"
        ))
        .await
        .expect("create the handler user");
    let entry = format!("{user}:claimonce_github");
    let migrate = migrator_with(&url, claimonce_migrations::ALL, options(&[&entry]));
    let cfn = Recorder::ok().await;
    for kind in ["Create", "Update"] {
        let body = answer(&migrate, kind, &cfn).await;
        assert_eq!(body["Status"], "SUCCESS", "{body}");
    }
    let memberships: Vec<String> = db
        .client()
        .await
        .query(
            "SELECT g.rolname::text FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid \
             JOIN pg_roles u ON u.oid = m.member WHERE u.rolname = $1 ORDER BY 1",
            &[&user],
        )
        .await
        .expect("memberships")
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(memberships, ["claimonce_github"]);
    // Now it claims GitHub's events and no one else's.
    let as_user = url.replacen("postgres@", &format!("{user}@"), 1);
    let (client, connection) = tokio_postgres::connect(&as_user, tokio_postgres::NoTls)
        .await
        .expect("connect as the moved user");
    tokio::spawn(connection);
    let claim = format!("SELECT won FROM {CLAIM_FUNCTION}($1, 'e1', 't', NULL)");
    assert!(client.query_one(&claim, &[&"github"]).await.is_ok());
    let refused = client
        .query_one(&claim, &[&"stripe"])
        .await
        .expect_err("another provider's claim");
    assert_eq!(refused.code().map(|c| c.code()), Some("42501"));

    // A role after ':' that is not a provider's is refused before anything runs.
    for bad in ["u:postgres", "u:", ":claimonce_stripe", "u:claimonce_x:y"] {
        assert!(
            claimonce_migrate::HandlerUser::parse(bad).is_err(),
            "{bad:?}"
        );
    }
}

/// With `DB_CREATE_LOGINS`, the quick start's logins are made by the migrate function: each
/// receiver and job user is created when missing, granted the IAM role (a stand-in `rds_iam`
/// here, as RDS has), its provider's or job's role and, for a receiver, its timeouts; a second
/// deploy finds them all and changes nothing, and a user made by hand before is kept.
#[tokio::test]
async fn the_migrate_function_creates_the_logins_it_is_given_once() {
    let db = TestDb::new().await;
    let url = empty_database(&db).await;
    // Roles are cluster-wide: named after this test's database so that tests do not meet.
    let iam = format!("{}_rds_iam", db.name);
    let stripe = format!("{}_stripe_webhook", db.name);
    let sweep = format!("{}_retention_sweep", db.name);
    let kept = format!("{}_outbox_relay", db.name);
    let admin = db.client().await;
    admin
        .batch_execute(&format!(
            "CREATE ROLE \"{iam}\" NOLOGIN; CREATE ROLE \"{kept}\" LOGIN PASSWORD 'by-hand'"
        ))
        .await
        .expect("the IAM stand-in and a user made by hand");
    let mut configured = options(&[&format!("{stripe}:claimonce_stripe")]);
    configured.job_users = [
        format!("{sweep}:claimonce_sweeper"),
        format!("{kept}:claimonce_relay"),
    ]
    .iter()
    .map(|u| claimonce_migrate::HandlerUser::parse(u).expect("a user"))
    .collect();
    configured.create_logins = Some(claimonce_migrate::RoleName::parse(&iam).expect("a role"));
    let migrate = migrator_with(&url, claimonce_migrations::ALL, configured);
    let cfn = Recorder::ok().await;
    let state = || async {
        admin
            .query(
                "SELECT u.rolname::text, u.rolcanlogin, u.rolpassword IS NOT NULL, \
                 array_agg(g.rolname::text ORDER BY g.rolname), \
                 (SELECT array_agg(c ORDER BY c) FROM pg_db_role_setting s, unnest(s.setconfig) c \
                  WHERE s.setrole = u.oid) \
                 FROM pg_authid u JOIN pg_auth_members m ON m.member = u.oid \
                 JOIN pg_roles g ON g.oid = m.roleid WHERE u.rolname = ANY($1) \
                 GROUP BY u.oid, u.rolname, u.rolcanlogin, u.rolpassword ORDER BY 1",
                &[&vec![stripe.clone(), sweep.clone(), kept.clone()]],
            )
            .await
            .expect("the logins")
            .iter()
            .map(|row| {
                let settings: Option<Vec<String>> = row.get(4);
                (
                    row.get::<_, String>(0),
                    row.get::<_, bool>(1),
                    row.get::<_, bool>(2),
                    row.get::<_, Vec<String>>(3),
                    settings.unwrap_or_default(),
                )
            })
            .collect::<Vec<_>>()
    };
    let body = answer(&migrate, "Create", &cfn).await;
    assert_eq!(body["Status"], "SUCCESS", "{body}");
    let first = state().await;
    let sorted = |mut roles: Vec<String>| {
        roles.sort();
        roles
    };
    assert_eq!(
        first,
        [
            (
                kept.clone(),
                true,
                true,
                sorted(vec![iam.clone(), "claimonce_relay".into()]),
                vec![]
            ),
            (
                sweep.clone(),
                true,
                false,
                sorted(vec![iam.clone(), "claimonce_sweeper".into()]),
                vec![]
            ),
            (
                stripe.clone(),
                true,
                false,
                sorted(vec![iam.clone(), "claimonce_stripe".into()]),
                vec![
                    "idle_in_transaction_session_timeout=3000ms".into(),
                    "lock_timeout=2000ms".into(),
                    "statement_timeout=3000ms".into()
                ]
            ),
        ],
        "created (the relay's kept, with its password), granted, the receiver's timeouts set"
    );
    let body = answer(&migrate, "Update", &cfn).await;
    assert_eq!(body["Status"], "SUCCESS", "{body}");
    assert_eq!(state().await, first, "a second deploy changes nothing");

    // Without the IAM role the run fails by name; a job user given without its job's role is
    // refused before anything runs.
    let mut missing = options(&[]);
    missing.job_users =
        vec![claimonce_migrate::HandlerUser::parse(&format!("{}_other", db.name)).expect("a user")];
    missing.create_logins = Some(
        claimonce_migrate::RoleName::parse(&format!("{}_no_such_role", db.name)).expect("a role"),
    );
    let body = answer(
        &migrator_with(&url, claimonce_migrations::ALL, missing),
        "Update",
        &cfn,
    )
    .await;
    assert_failed(&body, &["DB_CREATE_LOGINS", "_no_such_role"]);
}

#[tokio::test]
async fn a_handler_user_that_does_not_exist_fails_the_deploy_by_name() {
    let db = TestDb::new().await;
    let url = empty_database(&db).await;
    let missing = format!("{}_nobody", db.name);
    let migrate = migrator_with(&url, claimonce_migrations::ALL, options(&[&missing]));
    let body = answer(&migrate, "Create", &Recorder::ok().await).await;
    assert_failed(&body, &[&format!("role {missing} does not exist")]);

    // Names that are not plain identifiers are refused before anything runs.
    for bad in ["", "1abc", "a\"b", "x; DROP TABLE t", &"r".repeat(64)] {
        assert!(claimonce_migrate::RoleName::parse(bad).is_err(), "{bad:?}");
    }
}

#[tokio::test]
async fn a_migration_waiting_on_a_lock_does_not_make_an_unrelated_delivery_fail() {
    let db = TestDb::new().await;
    let admin = db.client().await;
    admin
        .batch_execute("INSERT INTO customers (stripe_customer_id) VALUES ('cus_held')")
        .await
        .expect("a customer");
    // A long transaction holds one customer's row; the next migration needs the whole table.
    let holder = db.client().await;
    holder
        .batch_execute(
            "BEGIN; SELECT 1 FROM customers WHERE stripe_customer_id = 'cus_held' FOR UPDATE",
        )
        .await
        .expect("hold a row");
    let more = with_extra(Migration {
        version: 99,
        name: "needs_the_customers",
        sql: "ALTER TABLE customers ADD COLUMN note text",
    });
    // The shipped bounds: a lock wait shorter than a delivery's, tried again when refused.
    let migrate = migrator_with(
        db.function_url(),
        more,
        claimonce_migrate::Options::default(),
    );
    let migration = tokio::spawn(async move { migrate.apply().await });
    // Until the migration waits for its lock, every delivery that needs the table queues
    // behind it.
    let waiting = "SELECT count(*) FROM pg_locks WHERE relation = 'customers'::regclass \
                   AND mode = 'AccessExclusiveLock' AND NOT granted";
    while db.count(waiting).await == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // A delivery for another customer: before, it waited behind the migration's 5 s lock wait
    // and failed at its own 2 s (55P03, 500).
    let (receiver, _) = db.receiver(claimonce_tests::sign::stripe());
    let body = claimonce_tests::sign::invoice_paid("evt_during", "cus_other", 300);
    let answer = claimonce_tests::apigw::post_stripe(&receiver, &body).await;
    assert_eq!(
        claimonce_tests::apigw::outcome(&answer),
        (200, "processed".into())
    );
    holder.batch_execute("COMMIT").await.expect("release");
    // The migration, refused its lock while the row was held, is applied on a later attempt.
    let outcome = migration.await.expect("task").expect("applied");
    assert_eq!(outcome.applied, vec![99]);
    assert_eq!(
        db.count("SELECT count(*) FROM customers WHERE note IS NULL")
            .await,
        2
    );
}

#[tokio::test]
async fn a_migration_that_waits_on_a_lock_is_stopped_and_answered_failed() {
    let db = TestDb::new().await;
    let url = empty_database(&db).await;
    migrator(&url, claimonce_migrations::ALL)
        .apply()
        .await
        .expect("migrated");
    // Something else holds the ledger (a long transaction); the next migration needs it.
    let (holder, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    holder
        .batch_execute("BEGIN; LOCK TABLE processed_events IN ACCESS SHARE MODE")
        .await
        .expect("hold a lock");
    let more = with_extra(Migration {
        version: 99,
        name: "needs_the_ledger",
        sql: "ALTER TABLE processed_events ADD COLUMN note text",
    });
    let mut bounded = loopback();
    bounded.bounds.lock = Duration::from_millis(300);
    let migrate = migrator_with(&url, more, bounded);
    let cfn = Recorder::ok().await;
    let body = answer(&migrate, "Update", &cfn).await;
    assert_failed(
        &body,
        &[
            "V99__needs_the_ledger",
            "55P03",
            "MIGRATE_LOCK_TIMEOUT_MS (300 ms)",
        ],
    );
    holder.batch_execute("COMMIT").await.expect("release");
    // Nothing of it was applied; once the lock is free the next deploy applies it, once.
    let count = "SELECT count(*) FROM schema_migrations WHERE version = 99";
    assert_eq!(fresh(&db).count(count).await, 0);
    assert_eq!(
        answer(&migrate, "Update", &cfn).await["Data"]["Applied"],
        "99"
    );
    assert_eq!(fresh(&db).count(count).await, 1);
}

#[tokio::test]
async fn a_migration_that_runs_too_long_is_stopped_and_answered_failed() {
    let db = TestDb::new().await;
    let url = empty_database(&db).await;
    let slow = with_extra(Migration {
        version: 99,
        name: "slow",
        sql: "CREATE TABLE slow (n int); SELECT pg_sleep(30)",
    });
    let mut bounded = loopback();
    bounded.bounds.statement = Duration::from_millis(300);
    let started = std::time::Instant::now();
    let body = answer(
        &migrator_with(&url, slow, bounded),
        "Create",
        &Recorder::ok().await,
    )
    .await;
    // Stopped by the server, not left to run its 30 s.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert_failed(
        &body,
        &["V99__slow", "57014", "MIGRATE_STATEMENT_TIMEOUT_MS"],
    );
    assert_eq!(
        fresh(&db)
            .count("SELECT count(*) FROM pg_tables WHERE tablename = 'slow'")
            .await,
        0,
        "rolled back"
    );
}

#[tokio::test]
async fn a_run_past_the_invocations_deadline_is_answered_failed_in_time() {
    let db = TestDb::new().await;
    let url = empty_database(&db).await;
    let slow = with_extra(Migration {
        version: 99,
        name: "slow",
        sql: "SELECT pg_sleep(30)",
    });
    let migrate = migrator(&url, slow);
    let cfn = Recorder::ok().await;
    let deadline = std::time::Instant::now() + Duration::from_millis(1500);
    migrate
        .handle_until(&request("Create", &cfn.url), Some(deadline))
        .await
        .expect("answered");
    // Answered, not left to the function's timeout: well before the 30 s the migration wanted.
    assert!(
        std::time::Instant::now() < deadline + Duration::from_secs(10),
        "answered late"
    );
    assert_failed(
        &last_put(&cfn).1,
        &["did not finish in this invocation's time"],
    );
}

#[tokio::test]
async fn concurrent_runs_apply_each_migration_once() {
    // Lambda may run a retried invocation while the first is still going: the runs queue on
    // the bookkeeping lock and each migration is applied by exactly one of them.
    let db = TestDb::new().await;
    let url = empty_database(&db).await;
    // The bookkeeping table exists after any earlier deploy; the runs race for what follows.
    let first = claimonce_migrations::ALL.get(..1).expect("a migration");
    migrator(&url, Box::leak(first.to_vec().into_boxed_slice()))
        .apply()
        .await
        .expect("first migration");
    let (one, two) = (
        migrator(&url, claimonce_migrations::ALL),
        migrator(&url, claimonce_migrations::ALL),
    );
    let (a, b) = tokio::join!(one.apply(), two.apply());
    let (a, b) = (a.expect("first run"), b.expect("second run"));
    let mut applied = [a.applied, b.applied].concat();
    applied.sort_unstable();
    let all: Vec<i32> = claimonce_migrations::ALL
        .iter()
        .map(|m| m.version)
        .collect();
    assert_eq!(applied, all.get(1..).expect("more than one migration"));
    assert_eq!(
        fresh(&db)
            .count("SELECT count(*) FROM schema_migrations")
            .await,
        i64::try_from(all.len()).expect("len")
    );
}

/// With `DatabaseAuth=secret` the receivers' logins are the users their database secrets
/// name: `DB_HANDLER_SECRETS` (`claimonce_<provider>=<ARN>`, which the template fills from the
/// deployed receivers' `<Name>DbSecretArn`) reads each secret's `username` from Secrets
/// Manager (moto's), so the migrations give every such login its provider's role and its
/// timeouts without a hand-kept list; a secret without a username, one that cannot be read,
/// and an entry that is not `role=ARN` are configuration errors that show no secret text.
#[tokio::test]
async fn the_receivers_logins_are_read_from_their_database_secrets() {
    let db = TestDb::new().await;
    let url = empty_database(&db).await;
    let moto = claimonce_tests::moto::moto().await;
    let aws = moto.aws_config().await;
    let manager = aws_sdk_secretsmanager::Client::new(&aws);
    let role = format!("{}_stripe_fn", db.name);
    db.client()
        .await
        .batch_execute(&format!("CREATE ROLE \"{role}\" LOGIN"))
        .await
        .expect("create the receiver's user");
    let secret = |name: &str, text: String| {
        let manager = manager.clone();
        let name = format!("claimonce/{}/{name}", db.name);
        async move {
            manager
                .create_secret()
                .name(name)
                .secret_string(text)
                .send()
                .await
                .expect("create the secret in moto")
                .arn()
                .expect("an ARN")
                .to_owned()
        }
    };
    let good = secret(
        "stripe",
        format!(r#"{{"username":"{role}","password":"pw-never-shown","engine":"postgres"}}"#),
    )
    .await;
    let nameless = secret("nameless", r#"{"password":"pw-never-shown"}"#.to_owned()).await;

    let users =
        claimonce_migrate::handler_users_from_secrets(&format!("claimonce_stripe={good}"), &aws)
            .await
            .expect("the users");
    assert_eq!(
        users,
        [
            claimonce_migrate::HandlerUser::parse(&format!("{role}:claimonce_stripe"))
                .expect("user")
        ]
    );
    for raw in [
        format!("claimonce_stripe={nameless}"),
        format!("claimonce_stripe={good}x"),
        "stripe_fn".to_owned(),
        format!("stripe={good}"),
    ] {
        let error = claimonce_migrate::handler_users_from_secrets(&raw, &aws)
            .await
            .expect_err("refused");
        assert!(error.message().contains("DB_HANDLER_SECRETS"), "{error:?}");
        assert!(!error.message().contains("pw-never-shown"), "{error:?}");
    }

    let mut configured = options(&[]);
    configured.handler_users = users;
    let migrate = migrator_with(&url, claimonce_migrations::ALL, configured);
    let cfn = Recorder::ok().await;
    let body = answer(&migrate, "Create", &cfn).await;
    assert_eq!(body["Status"], "SUCCESS", "{body}");
    let client = db.client().await;
    let member: bool = client
        .query_one(
            "SELECT pg_has_role($1, 'claimonce_stripe', 'MEMBER')",
            &[&role],
        )
        .await
        .expect("membership")
        .get(0);
    assert!(member, "the login was granted its provider's role");
    let settings: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_db_role_setting s JOIN pg_roles r ON r.oid = s.setrole \
             WHERE r.rolname = $1 AND 'statement_timeout=3000ms' = ANY (s.setconfig)",
            &[&role],
        )
        .await
        .expect("settings")
        .get(0);
    assert_eq!(settings, 1, "the login got its statement timeout");
}

/// A PostgreSQL server of a test's own (roles are cluster-wide), as the master user of RDS sees
/// it: the master is a `CREATEROLE CREATEDB` login (password `master-pw`), no superuser, that
/// owns database `claimonce` and is a member of `rds_superuser`, which may grant `rds_iam` (on
/// RDS the master grants it to IAM users: "GRANT rds_iam TO db_userx", the IAM database
/// authentication page). Returns the server and a superuser client for
/// set-up and assertions on `db`.
async fn rds_like(
    options: claimonce_local::postgres::Options,
) -> (
    claimonce_local::postgres::Postgres,
    impl Fn(&str) -> Settings,
) {
    let dir = std::env::temp_dir().join(format!(
        "claimonce-rds-like-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    let server = tokio::task::spawn_blocking(move || {
        claimonce_local::postgres::Postgres::start(&dir, &options)
    })
    .await
    .expect("start")
    .expect("a server of its own");
    let port = server.port;
    let superuser = move |db: &str| {
        Settings::from_url(
            &format!("postgres://postgres@127.0.0.1:{port}/{db}?sslmode=disable"),
            None,
            test_timeouts(),
        )
        .expect("settings")
    };
    let admin = superuser("postgres").connect().await.expect("connect");
    as_on_rds(&admin).await;
    (server, superuser)
}

/// Makes the server as RDS's master user sees it, through the superuser client `admin`:
/// `rds_iam`, which `rds_superuser` may grant, and the master `claimonce_admin` (password
/// `master-pw`, a member of `rds_superuser`) owning database `claimonce`.
async fn as_on_rds(admin: &tokio_postgres::Client) {
    admin
        .batch_execute(
            "CREATE ROLE rds_iam NOLOGIN; CREATE ROLE rds_superuser NOLOGIN; \
             GRANT rds_iam TO rds_superuser WITH ADMIN OPTION; \
             CREATE ROLE claimonce_admin LOGIN CREATEROLE CREATEDB PASSWORD 'master-pw' \
             IN ROLE rds_superuser",
        )
        .await
        .expect("an RDS-like master");
    admin
        .batch_execute("CREATE DATABASE claimonce OWNER claimonce_admin TEMPLATE template0")
        .await
        .expect("its database");
}

/// The logins of the first-login tests: a receiver's and a job's, created with `rds_iam`.
fn first_login_options() -> claimonce_migrate::Options {
    use claimonce_migrate::{HandlerUser, RoleName};
    let mut options = loopback();
    options.handler_users =
        vec![HandlerUser::parse("stripe_webhook:claimonce_stripe").expect("user")];
    options.job_users =
        vec![HandlerUser::parse("retention_sweep:claimonce_sweeper").expect("user")];
    options.create_logins = Some(RoleName::parse("rds_iam").expect("role"));
    options
}

/// A migrator whose first login is `master`'s, reaching the database behind it as
/// `claimonce_migrate` with no password (IAM in a deployment; trusted on plain TCP here).
fn first_login_migrator(
    port: u16,
    master: Settings,
    options: claimonce_migrate::Options,
) -> Migrator {
    let as_migrate = Settings::from_url(
        &format!("postgres://claimonce_migrate@127.0.0.1:{port}/claimonce?sslmode=disable"),
        None,
        test_timeouts(),
    )
    .expect("settings");
    Migrator::new(Ok(as_migrate), claimonce_migrations::ALL, Log::capture().0)
        .with_options(Ok(options))
        .with_bootstrap(Ok(Some(claimonce_migrate::bootstrap::Bootstrap::new(
            master,
            claimonce_migrate::RoleName::parse("claimonce_migrate").expect("role"),
        ))))
}

/// The quick start's first login: the migrate function logs in to the writer as the master
/// user, makes its own user and the logins, each granted the IAM role, and hands its user the
/// database; then it applies every migration as that user, neither a superuser nor the master,
/// and sets the logins' defaults, the migrations' REVOKEs taking effect. CI runs this one test
/// again on PostgreSQL 16, Aurora's major version, whose `ALTER ROLE` wants `ADMIN OPTION`.
#[tokio::test]
async fn the_first_login_lets_the_migrate_user_apply_every_migration_without_being_superuser() {
    let (server, superuser) = rds_like(claimonce_local::postgres::Options::default()).await;
    let master = Settings::from_url(
        &format!(
            "postgres://claimonce_admin:master-pw@127.0.0.1:{}/claimonce?sslmode=disable",
            server.port
        ),
        None,
        test_timeouts(),
    )
    .expect("settings");
    let migrate = first_login_migrator(server.port, master, first_login_options());
    let cfn = Recorder::ok().await;
    let body = answer(&migrate, "Create", &cfn).await;
    assert_eq!(body["Status"], "SUCCESS", "{body}");

    let admin = superuser("postgres").connect().await.expect("connect");
    let state = || async {
        admin
            .query_one(
                "SELECT (SELECT rolsuper OR NOT rolcreaterole FROM pg_roles WHERE rolname = 'claimonce_migrate'), \
                 (SELECT pg_get_userbyid(datdba)::text FROM pg_database WHERE datname = 'claimonce'), \
                 (SELECT array_agg(u.rolname::text || '>' || g.rolname::text || CASE WHEN m.admin_option THEN '*' ELSE '' END \
                   ORDER BY u.rolname, g.rolname) FROM pg_auth_members m JOIN pg_roles u ON u.oid = m.member \
                   JOIN pg_roles g ON g.oid = m.roleid \
                   WHERE u.rolname IN ('claimonce_migrate', 'stripe_webhook', 'retention_sweep', 'claimonce_admin')), \
                 (SELECT array_agg(c ORDER BY c) FROM pg_db_role_setting s, unnest(s.setconfig) c \
                   WHERE s.setrole = 'stripe_webhook'::regrole)",
                &[],
            )
            .await
            .map(|row| {
                (
                    row.get::<_, bool>(0),
                    row.get::<_, String>(1),
                    row.get::<_, Vec<String>>(2),
                    row.get::<_, Vec<String>>(3),
                )
            })
            .expect("the roles")
    };
    let first = state().await;
    // PostgreSQL 16 also records the grants a CREATEROLE user gives itself on the roles it
    // makes (the master's ADMIN on claimonce_migrate and the logins): only the members listed
    // above are compared.
    assert_eq!(
        (first.0, first.1.as_str(), first.3.clone()),
        (
            false,
            "claimonce_migrate",
            vec![
                "idle_in_transaction_session_timeout=3000ms".to_owned(),
                "lock_timeout=2000ms".into(),
                "statement_timeout=3000ms".into(),
            ],
        ),
        "the migrate user (no superuser, CREATEROLE) owns the database; the receiver has its \
         timeouts"
    );
    for grant in [
        "claimonce_admin>claimonce_migrate",
        "claimonce_migrate>rds_iam",
        "claimonce_migrate>retention_sweep*",
        "claimonce_migrate>stripe_webhook*",
        "retention_sweep>claimonce_sweeper",
        "retention_sweep>rds_iam",
        "stripe_webhook>claimonce_stripe",
        "stripe_webhook>rds_iam",
    ] {
        assert!(
            first.2.contains(&grant.to_owned()),
            "{grant} not in {:?}",
            first.2
        );
    }
    // The migrations ran as the database's owner: what they created is the migrate user's, and
    // their REVOKEs took effect.
    let db = superuser("claimonce").connect().await.expect("connect");
    let row = db
        .query_one(
            "SELECT has_schema_privilege('stripe_webhook', 'public', 'CREATE'), \
             has_database_privilege('stripe_webhook', 'claimonce', 'TEMPORARY'), \
             (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
              WHERE n.nspname = 'public' AND pg_get_userbyid(c.relowner) <> 'claimonce_migrate'), \
             (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
              WHERE n.nspname = 'public')",
            &[],
        )
        .await
        .expect("privileges");
    assert_eq!(
        (
            row.get::<_, bool>(0),
            row.get::<_, bool>(1),
            row.get::<_, i64>(2)
        ),
        (false, false, 0)
    );
    assert!(row.get::<_, i64>(3) > 10, "the migrations made the schema");

    let body = answer(&migrate, "Update", &cfn).await;
    assert_eq!(body["Status"], "SUCCESS", "{body}");
    assert_eq!(state().await, first, "a second deploy changes nothing");
}

/// The first login refuses a function's login that names an existing privileged role, before
/// anything is made, naming the variable, the login and what it holds: `SUPERUSER`,
/// `CREATEROLE`, `CREATEDB`, `BYPASSRLS`, `REPLICATION`, a member of `rds_superuser` (as RDS's
/// master is), directly or through a group, or of `pg_read_all_data`; as a handler's, a job's or
/// the migrate user's login. An ordinary existing role is kept and granted the IAM role. A run
/// with `DB_CREATE_LOGINS` and no first login refuses such a role too.
#[tokio::test]
async fn the_first_login_refuses_a_login_that_names_a_privileged_role() {
    use claimonce_migrate::{HandlerUser, RoleName};
    let (server, superuser) = rds_like(claimonce_local::postgres::Options::default()).await;
    let admin = superuser("postgres").connect().await.expect("connect");
    admin
        .batch_execute(
            "CREATE ROLE is_super LOGIN SUPERUSER; CREATE ROLE makes_roles LOGIN CREATEROLE; \
             CREATE ROLE makes_dbs LOGIN CREATEDB; CREATE ROLE skips_rls LOGIN BYPASSRLS; \
             CREATE ROLE replicates LOGIN REPLICATION; \
             CREATE ROLE administers LOGIN IN ROLE rds_superuser; \
             CREATE ROLE admins NOLOGIN IN ROLE rds_superuser; \
             CREATE ROLE through_group LOGIN IN ROLE admins; \
             CREATE ROLE reads_all LOGIN IN ROLE pg_read_all_data; \
             CREATE ROLE ordinary LOGIN",
        )
        .await
        .expect("the roles");
    let master = || {
        Settings::from_url(
            &format!(
                "postgres://claimonce_admin:master-pw@127.0.0.1:{}/claimonce?sslmode=disable",
                server.port
            ),
            None,
            test_timeouts(),
        )
        .expect("settings")
    };
    let with = |handler: &str, job: &str| {
        let mut options = first_login_options();
        options.handler_users = vec![HandlerUser::parse(handler).expect("user")];
        options.job_users = vec![HandlerUser::parse(job).expect("user")];
        options
    };
    let granted = || async {
        admin
            .query_one(
                "SELECT (SELECT count(*) FROM pg_roles WHERE rolname = 'claimonce_migrate'), \
                 (SELECT array_agg(u.rolname::text ORDER BY u.rolname) FROM pg_auth_members m \
                  JOIN pg_roles u ON u.oid = m.member \
                  WHERE m.roleid = 'rds_iam'::regrole AND u.rolname <> 'rds_superuser')",
                &[],
            )
            .await
            .map(|row| (row.get::<_, i64>(0), row.get::<_, Option<Vec<String>>>(1)))
            .expect("the grants")
    };
    let cfn = Recorder::ok().await;
    let job = "retention_sweep:claimonce_sweeper";
    for (handler, job, migrate_user, expected) in [
        (
            "administers",
            job,
            None,
            ["DB_HANDLER_USERS", "administers", "member of rds_superuser"],
        ),
        (
            "makes_roles",
            job,
            None,
            ["DB_HANDLER_USERS", "makes_roles", "CREATEROLE"],
        ),
        (
            "makes_dbs",
            job,
            None,
            ["DB_HANDLER_USERS", "makes_dbs", "CREATEDB"],
        ),
        (
            "skips_rls",
            job,
            None,
            ["DB_HANDLER_USERS", "skips_rls", "BYPASSRLS"],
        ),
        (
            "replicates",
            job,
            None,
            ["DB_HANDLER_USERS", "replicates", "REPLICATION"],
        ),
        (
            "through_group",
            job,
            None,
            [
                "DB_HANDLER_USERS",
                "through_group",
                "member of rds_superuser",
            ],
        ),
        (
            "reads_all",
            job,
            None,
            [
                "DB_HANDLER_USERS",
                "reads_all",
                "member of pg_read_all_data",
            ],
        ),
        (
            "is_super",
            job,
            None,
            ["DB_HANDLER_USERS", "is_super", "SUPERUSER"],
        ),
        (
            "stripe_webhook",
            "skips_rls",
            None,
            ["DB_JOB_USERS", "skips_rls", "BYPASSRLS"],
        ),
        (
            "stripe_webhook",
            job,
            Some("is_super"),
            ["DB_USER", "is_super", "SUPERUSER"],
        ),
    ] {
        let handler = format!("{handler}:claimonce_stripe");
        let mut migrate = first_login_migrator(server.port, master(), with(&handler, job));
        if let Some(user) = migrate_user {
            migrate =
                migrate.with_bootstrap(Ok(Some(claimonce_migrate::bootstrap::Bootstrap::new(
                    master(),
                    RoleName::parse(user).expect("role"),
                ))));
        }
        let body = answer(&migrate, "Create", &cfn).await;
        assert_failed(&body, &expected);
        assert!(!body.to_string().contains("master-pw"), "{body}");
        assert_eq!(granted().await, (0, None), "nothing made for {expected:?}");
    }

    let migrate = first_login_migrator(
        server.port,
        master(),
        with("ordinary:claimonce_stripe", job),
    );
    let body = answer(&migrate, "Create", &cfn).await;
    assert_eq!(body["Status"], "SUCCESS", "{body}");
    assert_eq!(
        granted().await,
        (
            1,
            Some(vec![
                "claimonce_migrate".to_owned(),
                "ordinary".into(),
                "retention_sweep".into()
            ])
        ),
        "an ordinary role made by hand is kept and granted"
    );

    // With the logins made by the migrate user itself (DB_CREATE_LOGINS, no first login).
    let migrate = first_login_migrator(
        server.port,
        master(),
        with("administers:claimonce_stripe", job),
    )
    .with_bootstrap(Ok(None));
    let body = answer(&migrate, "Update", &cfn).await;
    assert_failed(
        &body,
        &["DB_HANDLER_USERS", "administers", "member of rds_superuser"],
    );
}

/// The master's first login to the TLS test server: its password from the Secrets Manager
/// stand-in `secret`, the server's certificate verified against `ca`.
async fn master(
    tls: &claimonce_tests::tls::TlsServer,
    secret: &Recorder,
    ca: &std::path::Path,
) -> Settings {
    Settings::with_secret(
        "localhost",
        tls.server.port,
        "claimonce",
        secret.aws_config().await,
        FIRST_LOGIN_SECRET,
        claimonce::db::Trust::PemFile(ca),
        test_timeouts(),
    )
    .await
    .expect("master settings")
}

const FIRST_LOGIN_SECRET: &str =
    "arn:aws:secretsmanager:us-east-1:123456789012:secret:rds!cluster-1";

/// The first login reads the master's password from Secrets Manager and verifies the writer's
/// certificate against the CA it is given (in a deployment the RDS bundle the function
/// carries): under a CA the certificate does not chain to, nothing is made; a function login
/// that is the master user is refused before anything is made.
#[tokio::test]
async fn the_first_login_reads_the_master_secret_and_verifies_the_writer_s_certificate() {
    let tls = tokio::task::spawn_blocking(claimonce_tests::tls::TlsServer::start)
        .await
        .expect("a server of its own");
    let admin = tls.superuser().await;
    as_on_rds(&admin).await;
    tls.require_password(&admin, "claimonce_admin").await;
    let secret = Recorder::secrets_manager(
        FIRST_LOGIN_SECRET,
        &json!({"username": "claimonce_admin", "password": "master-pw"}).to_string(),
    )
    .await;
    let made = || async {
        admin
            .query_one(
                "SELECT count(*) FROM pg_roles WHERE rolname = 'claimonce_migrate'",
                &[],
            )
            .await
            .expect("count")
            .get::<_, i64>(0)
    };
    let cfn = Recorder::ok().await;

    let untrusted = first_login_migrator(
        tls.server.port,
        master(&tls, &secret, &tls.other_ca).await,
        first_login_options(),
    );
    let body = answer(&untrusted, "Create", &cfn).await;
    assert_failed(&body, &["DB_BOOTSTRAP_HOST", "master user's login failed"]);
    assert_eq!(
        made().await,
        0,
        "nothing made under a CA the writer does not chain to"
    );

    let mut clash = first_login_options();
    clash.handler_users = vec![
        claimonce_migrate::HandlerUser::parse("claimonce_admin:claimonce_stripe").expect("user"),
    ];
    let refused =
        first_login_migrator(tls.server.port, master(&tls, &secret, &tls.ca).await, clash);
    let body = answer(&refused, "Create", &cfn).await;
    assert_failed(&body, &["claimonce_admin is the master user"]);
    assert_eq!(
        made().await,
        0,
        "nothing made for a login that is the master"
    );

    let trusted = first_login_migrator(
        tls.server.port,
        master(&tls, &secret, &tls.ca).await,
        first_login_options(),
    );
    let body = answer(&trusted, "Create", &cfn).await;
    assert_eq!(body["Status"], "SUCCESS", "{body}");
    assert_eq!(
        made().await,
        1,
        "made over verified TLS with the secret's password"
    );
    assert_eq!(secret.requests().len(), 3, "the secret read for each login");
}
