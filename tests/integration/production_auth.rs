//! The production database configuration, end to end through the real binary: verified TLS,
//! and a password that is never in the environment (a Secrets Manager secret read once per
//! cold start, or an RDS IAM token per connection).

use std::time::Duration;

use aws_config::Region;
use aws_credential_types::Credentials;
use aws_credential_types::provider::SharedCredentialsProvider;
use claimonce::auth::{IamTokens, fetch_secret};
use claimonce::db::Settings;
use claimonce_local::runtime_api::{Outcome, RuntimeApi};
use claimonce_local::sign::resign;
use claimonce_tests::db::test_timeouts;
use claimonce_tests::lambda::{binaries, function, sample_event};
use claimonce_tests::recorder::Recorder;
use claimonce_tests::sign::now;
use claimonce_tests::tls::TlsServer;
use serde_json::Value;
use tokio_postgres::Client;

const ARN: &str = "arn:aws:secretsmanager:us-east-1:123456789012:secret:claimonce/db-AbCdEf";
const SECRET: &str = r#"{"username":"stripe_fn","password":"never-logged-pw","engine":"postgres","host":"db.internal.invalid","port":5432,"dbname":"ignored"}"#;

fn credentials() -> Credentials {
    Credentials::new(
        "AKIDEXAMPLE",
        "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        None,
        None,
        "test",
    )
}

/// A TLS server with the migrations applied and a login role for the function.
async fn server() -> (TlsServer, Client) {
    let (tls, admin) = TlsServer::migrated().await;
    admin
        .batch_execute("CREATE ROLE stripe_fn LOGIN IN ROLE claimonce_handler")
        .await
        .expect("role");
    (tls, admin)
}

async fn invoke(api: &RuntimeApi, sample: &str) -> (u64, String) {
    let mut event = sample_event(sample);
    resign(&mut event, now()).expect("sign");
    match api
        .invoke(event.to_string(), Duration::from_secs(20))
        .await
        .expect("answer")
    {
        Outcome::Response(payload) => {
            let payload: Value = serde_json::from_slice(&payload).expect("json");
            let body: Value =
                serde_json::from_str(payload["body"].as_str().unwrap_or("")).expect("body");
            (
                payload["statusCode"].as_u64().unwrap_or(0),
                body["disposition"].as_str().unwrap_or("").to_owned(),
            )
        }
        Outcome::Error(e) => panic!("function error: {}", String::from_utf8_lossy(&e)),
    }
}

/// The function's connection as the server sees it: (user, over TLS).
async fn function_session(admin: &Client) -> Vec<(String, bool)> {
    admin
        .query(
            "SELECT a.usename::text, s.ssl FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
             WHERE a.usename = 'stripe_fn'",
            &[],
        )
        .await
        .expect("sessions")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

fn aws_env<'a>(tls: &'a TlsServer, port: &'a str) -> Vec<(&'a str, &'a str)> {
    let f = function("stripe");
    vec![
        ("DB_HOST", "localhost"),
        ("DB_PORT", port),
        ("DB_NAME", "postgres"),
        ("PGSSLROOTCERT", tls.ca.to_str().expect("utf-8 path")),
        ("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"),
        (
            "AWS_SECRET_ACCESS_KEY",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        ),
        ("AWS_REGION", "us-east-1"),
        (f.secret_var, f.dev_secret),
    ]
}

#[tokio::test]
async fn the_sdk_reads_the_standard_rds_secret() {
    let stub = Recorder::secrets_manager(ARN, SECRET).await;
    let config = claimonce::auth::aws_config()
        .region(Region::new("us-east-1"))
        .endpoint_url(&stub.url)
        .credentials_provider(credentials())
        .load()
        .await;
    let secret = fetch_secret(&config, ARN).await.expect("secret");
    assert_eq!(
        (secret.username.as_str(), secret.port),
        ("stripe_fn", Some(5432))
    );
    let missing = fetch_secret(&config, "arn:aws:secretsmanager:us-east-1:1:secret:nope")
        .await
        .expect_err("unknown secret");
    assert!(
        missing.to_string().contains("ResourceNotFoundException"),
        "{missing}"
    );
    assert_eq!(stub.requests().len(), 2);
}

#[tokio::test]
async fn a_function_configured_with_a_secret_arn_reads_it_once_and_connects_over_verified_tls() {
    let (tls, admin) = server().await;
    let stub = Recorder::secrets_manager(ARN, SECRET).await;
    let f = function("stripe");
    let api = RuntimeApi::start(f.binary).await.expect("api");
    let port = tls.server.port.to_string();
    let mut env = aws_env(&tls, &port);
    env.push(("DB_SECRET_ARN", ARN));
    env.push(("AWS_ENDPOINT_URL_SECRETS_MANAGER", &stub.url));
    let mut command = api.command(&binaries().await.join(f.binary), &env);
    command
        .env_remove("DATABASE_URL")
        .stdout(std::process::Stdio::null());
    let _instance = command.spawn().expect("spawn");
    for sample in [
        "stripe/invoice.paid.json",
        "stripe/checkout.session.completed.json",
    ] {
        assert_eq!(
            invoke(&api, sample).await,
            (200, "processed".into()),
            "{sample}"
        );
    }
    assert_eq!(
        invoke(&api, "stripe/invoice.paid.json").await,
        (200, "duplicate".into())
    );
    assert_eq!(
        stub.requests().len(),
        1,
        "the secret is read once per cold start"
    );
    assert_eq!(
        function_session(&admin).await,
        vec![("stripe_fn".to_owned(), true)]
    );
}

#[tokio::test]
async fn a_function_with_iam_auth_connects_with_a_token_over_verified_tls() {
    let (tls, admin) = server().await;
    let f = function("stripe");
    let api = RuntimeApi::start(f.binary).await.expect("api");
    let port = tls.server.port.to_string();
    let mut env = aws_env(&tls, &port);
    env.push(("DB_IAM_AUTH", "true"));
    env.push(("DB_USER", "stripe_fn"));
    let mut command = api.command(&binaries().await.join(f.binary), &env);
    command
        .env_remove("DATABASE_URL")
        .stdout(std::process::Stdio::null());
    let _instance = command.spawn().expect("spawn");
    assert_eq!(
        invoke(&api, "stripe/invoice.paid.json").await,
        (200, "processed".into())
    );
    assert_eq!(
        function_session(&admin).await,
        vec![("stripe_fn".to_owned(), true)]
    );
}

#[tokio::test]
async fn every_new_connection_gets_a_fresh_token_as_its_password() {
    let (tls, _admin) = server().await;
    let tokens = IamTokens::new(
        SharedCredentialsProvider::new(credentials()),
        "localhost",
        tls.server.port,
        "stripe_fn",
        "us-east-1",
    );
    let settings = Settings::with_iam(
        "localhost",
        tls.server.port,
        "postgres",
        tokens,
        Some(&tls.ca),
        test_timeouts(),
    )
    .expect("settings");
    let first = settings.connection_config().await.expect("config");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let second = settings.connection_config().await.expect("config");
    let password = |c: &tokio_postgres::Config| {
        String::from_utf8(c.get_password().expect("password").to_vec()).expect("utf8")
    };
    let (a, b) = (password(&first), password(&second));
    let prefix = format!(
        "localhost:{}/?Action=connect&DBUser=stripe_fn&",
        tls.server.port
    );
    assert!(
        a.starts_with(&prefix) && a.contains("X-Amz-Expires=900"),
        "{a}"
    );
    assert_ne!(a, b, "signed at different times");
    let client = settings
        .connect()
        .await
        .expect("connects over verified TLS");
    let user: String = client
        .query_one("SELECT current_user::text", &[])
        .await
        .expect("q")
        .get(0);
    assert_eq!(user, "stripe_fn");
}
