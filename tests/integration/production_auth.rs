//! The production database configuration, end to end through the real binary: verified TLS,
//! and a password that is never in the environment (a Secrets Manager secret read once per
//! cold start, or an RDS IAM token per connection).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_config::Region;
use aws_credential_types::Credentials;
use aws_credential_types::provider::SharedCredentialsProvider;
use claimonce::auth::{IamTokens, fetch_secret};
use claimonce::db::{ConnectError, Connection, Database, Settings};
use claimonce::log::Log;
use claimonce::{Limits, Receiver};
use claimonce_local::runtime_api::{Outcome, RuntimeApi};
use claimonce_local::sign::resign;
use claimonce_tests::apigw::post_stripe;
use claimonce_tests::db::test_timeouts;
use claimonce_tests::lambda::{binaries, function, sample_event};
use claimonce_tests::recorder::Recorder;
use claimonce_tests::sign::{STRIPE_SECRET, invoice_paid, now};
use claimonce_tests::tls::TlsServer;
use serde_json::Value;
use stripe_webhook::Stripe;
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
async fn server() -> (TlsServer, Connection) {
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
    // The server asks for the secret's password: a function that sent none would be refused.
    admin
        .batch_execute("ALTER ROLE stripe_fn PASSWORD 'never-logged-pw'")
        .await
        .expect("password");
    tls.require_password(&admin, "stripe_fn").await;
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

fn secret_with(password: &str) -> String {
    SECRET.replace("never-logged-pw", password)
}

/// The Secrets Manager password is what authenticates (the server asks for it, SCRAM over
/// TLS), and a rotated one is read again when the server refuses the old one on a reconnect.
#[tokio::test]
async fn a_rotated_password_is_read_again_from_the_secret_when_a_reconnect_is_refused() {
    let (tls, admin) = server().await;
    admin
        .batch_execute("ALTER ROLE stripe_fn PASSWORD 'first-pw'")
        .await
        .expect("password");
    tls.require_password(&admin, "stripe_fn").await;
    let current = Arc::new(Mutex::new(secret_with("first-pw")));
    let stub = Recorder::rotating_secret(ARN, Arc::clone(&current)).await;
    let aws = claimonce::auth::aws_config()
        .region(Region::new("us-east-1"))
        .endpoint_url(&stub.url)
        .credentials_provider(credentials())
        .load()
        .await;
    let settings = Settings::with_secret(
        "localhost",
        tls.server.port,
        "postgres",
        aws.clone(),
        ARN,
        Some(&tls.ca),
        test_timeouts(),
    )
    .await
    .expect("settings");
    let receiver = Receiver::new(
        Stripe::new(&[STRIPE_SECRET], 300).expect("secret"),
        Database::new(settings),
        Limits::default(),
        Log::capture().0,
    );
    let body = invoice_paid("evt_rotate_1", "cus_rotate", 10);
    assert_eq!(deliver(&receiver, &body).await, 200);
    assert_eq!(stub.requests().len(), 1, "read once at start");

    // A wrong password is refused: the password really is checked.
    *current.lock().expect("secret") = secret_with("wrong-pw");
    let refused = Settings::with_secret(
        "localhost",
        tls.server.port,
        "postgres",
        aws,
        ARN,
        Some(&tls.ca),
        test_timeouts(),
    )
    .await
    .expect("settings")
    .connect()
    .await
    .expect_err("a wrong password");
    assert!(
        matches!(&refused, ConnectError::Failed(e) if e.code().map(|c| c.code()) == Some("28P01")),
        "{refused}"
    );

    // The rotation: a new password in the database and in the secret, and the proxy drops
    // the idle connection. The next delivery reconnects, is refused with the old password,
    // reads the secret again and goes through.
    admin
        .batch_execute(
            "ALTER ROLE stripe_fn PASSWORD 'second-pw'; \
             SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'stripe_fn'",
        )
        .await
        .expect("rotate");
    *current.lock().expect("secret") = secret_with("second-pw");
    let before = stub.requests().len();
    let body = invoice_paid("evt_rotate_2", "cus_rotate", 10);
    assert_eq!(deliver(&receiver, &body).await, 200);
    assert_eq!(stub.requests().len(), before + 1, "read again once");
    assert_eq!(
        function_session(&admin).await,
        vec![("stripe_fn".to_owned(), true)]
    );
}

async fn deliver(receiver: &Receiver<Stripe>, body: &[u8]) -> u16 {
    post_stripe(receiver, body).await.status().as_u16()
}
