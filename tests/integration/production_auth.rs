//! The production database configuration, end to end through the real binary: verified TLS,
//! and a password that is never in the environment (a Secrets Manager secret read once per
//! cold start, or an RDS IAM token per connection).

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_credential_types::Credentials;
use aws_credential_types::provider::SharedCredentialsProvider;
use claimonce::Receiver;
use claimonce::db::{ConnectError, Connection, Settings, Trust};
use claimonce::jobs::{IamTokens, auth_token, fetch_secret};
use claimonce_local::runtime_api::{Outcome, RuntimeApi};
use claimonce_local::sign::resign;
use claimonce_tests::apigw::{payload_outcome, post_stripe};
use claimonce_tests::db::{receiver_with, test_timeouts};
use claimonce_tests::lambda::{binaries, function, sample_event};
use claimonce_tests::recorder::Recorder;
use claimonce_tests::sign::{invoice_paid, now, stripe};
use claimonce_tests::tls::TlsServer;
use stripe_webhook::Stripe;
use tokio::net::TcpListener;
use tokio::process::Child;
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

async fn invoke(api: &RuntimeApi, sample: &str) -> (u16, String) {
    let mut event = sample_event(sample);
    resign(&mut event, now()).expect("sign");
    invoke_event(api, &event).await
}

/// Hands `event` to the function on `api`; its answer's (status, disposition or problem).
async fn invoke_event(api: &RuntimeApi, event: &serde_json::Value) -> (u16, String) {
    match api
        .invoke(event.to_string(), Duration::from_secs(20))
        .await
        .expect("answer")
    {
        Outcome::Response(payload) => {
            payload_outcome(&serde_json::from_slice(&payload).expect("json"))
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
    let config = stub.aws_config().await;
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
    let instance = spawn_watched(&api, &env).await;
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
    let printed = everything_printed(instance).await;
    assert!(
        printed.contains("\"disposition\":\"duplicate\""),
        "{printed}"
    );
    assert!(
        !printed.contains("never-logged-pw"),
        "the password in the output"
    );
}

/// Spawns the Stripe binary on `api` with `env` (and no `DATABASE_URL`), its stdout and
/// stderr kept for [`everything_printed`].
async fn spawn_watched(api: &RuntimeApi, env: &[(&str, &str)]) -> Child {
    let binary = binaries().await.join(function("stripe").binary);
    api.command(&binary, env)
        .env_remove("DATABASE_URL")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn")
}

/// Ends the instance and returns everything it printed, stdout then stderr.
async fn everything_printed(mut instance: Child) -> String {
    instance.start_kill().expect("kill");
    let output = instance.wait_with_output().await.expect("reaped");
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The credentials the function gets from its container-credentials endpoint, and signs its
/// IAM tokens with.
fn session_credentials() -> Credentials {
    Credentials::new(
        "ASIAEXAMPLE",
        "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        Some("session-token-example".into()),
        None,
        "test",
    )
}

/// The whole second of `time`.
fn second_of(time: SystemTime) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()))
}

/// One request the function made for credentials, each made for one new connection.
#[derive(Debug, Clone)]
struct Asked {
    /// The token the function signs with these credentials, when its second is known: the
    /// second of the request was also the second of the previous one (or of the spawn), and
    /// the function signs between the two.
    token: Option<String>,
    /// Whether the database user's password was then set to that token (else to one signed a
    /// minute earlier: a well-formed token, not the one sent).
    right: bool,
}

#[derive(Debug)]
struct Gate {
    /// When the function last asked (at first: before it was spawned).
    since: SystemTime,
    /// Set the right token as the password, or a wrong one.
    right: bool,
    asked: Vec<Asked>,
    /// Every token signed here, and every password set, for the leak check.
    tokens: Vec<String>,
}

/// The function's container-credentials endpoint (`AWS_CONTAINER_CREDENTIALS_FULL_URI`, as
/// Lambda SnapStart and ECS give credentials). The function signs its token (at second `T`)
/// before it asks for credentials, so when a request comes within the second of the previous
/// one, `T` is that second and the token is known: the endpoint sets the database user's
/// password to it (or to a wrong one) before it answers, and so before the function connects.
/// When the second changed in between, the password is cleared and that attempt proves
/// nothing.
async fn credentials_endpoint(admin: Arc<Connection>, port: u16) -> (String, Arc<Mutex<Gate>>) {
    let gate = Arc::new(Mutex::new(Gate {
        since: SystemTime::now(),
        right: false,
        asked: Vec::new(),
        tokens: Vec::new(),
    }));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!(
        "http://{}/credentials",
        listener.local_addr().expect("addr")
    );
    let state = Arc::clone(&gate);
    tokio::spawn(claimonce_local::http::serve(listener, move |_request| {
        let (gate, admin) = (Arc::clone(&state), Arc::clone(&admin));
        async move {
            let asked = SystemTime::now();
            let (since, right) = {
                let mut gate = gate.lock().expect("gate");
                (std::mem::replace(&mut gate.since, asked), gate.right)
            };
            let sign = |at: SystemTime| {
                auth_token(
                    &session_credentials(),
                    "localhost",
                    port,
                    "stripe_fn",
                    "us-east-1",
                    at,
                )
                .expect("token")
            };
            let token = (second_of(since) == second_of(asked)).then(|| sign(second_of(asked)));
            let password = token.as_ref().map(|_| {
                if right {
                    sign(second_of(asked))
                } else {
                    sign(second_of(asked) - Duration::from_secs(60))
                }
            });
            let sql = match &password {
                Some(p) => format!("ALTER ROLE stripe_fn PASSWORD '{}'", p.replace('\'', "''")),
                None => "ALTER ROLE stripe_fn PASSWORD NULL".to_owned(),
            };
            admin.batch_execute(&sql).await.expect("set the password");
            {
                let mut gate = gate.lock().expect("gate");
                gate.tokens
                    .extend(token.iter().chain(password.iter()).cloned());
                gate.asked.push(Asked { token, right });
            }
            let body = serde_json::json!({
                "AccessKeyId": "ASIAEXAMPLE",
                "SecretAccessKey": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
                "Token": "session-token-example",
                "Expiration": "2099-01-01T00:00:00Z",
            });
            let mut reply = lambda_http::http::Response::new(http_body_util::Full::new(
                bytes::Bytes::from(body.to_string()),
            ));
            reply.headers_mut().insert(
                "content-type",
                lambda_http::http::HeaderValue::from_static("application/json"),
            );
            reply
        }
    }));
    (url, gate)
}

/// The IAM token is what authenticates, checked on the wire: the server asks for the function
/// user's password (SCRAM over TLS), and that password is exactly the token the function
/// signs. A well-formed token signed for another time is refused; the right one connects.
/// Neither, nor the signing key, is in anything the function printed.
#[tokio::test]
async fn a_function_with_iam_auth_authenticates_with_exactly_its_token_over_verified_tls() {
    let (tls, admin) = server().await;
    tls.require_password(&admin, "stripe_fn").await;
    let admin = Arc::new(admin);
    let (credentials_url, gate) = credentials_endpoint(Arc::clone(&admin), tls.server.port).await;
    let f = function("stripe");
    let api = RuntimeApi::start(f.binary).await.expect("api");
    let port = tls.server.port.to_string();
    let missing = std::env::temp_dir().join("claimonce-no-aws-files");
    let missing = missing.to_str().expect("utf-8 path");
    let env = [
        ("DB_HOST", "localhost"),
        ("DB_PORT", port.as_str()),
        ("DB_NAME", "postgres"),
        ("PGSSLROOTCERT", tls.ca.to_str().expect("utf-8 path")),
        ("AWS_REGION", "us-east-1"),
        ("DB_IAM_AUTH", "true"),
        ("DB_USER", "stripe_fn"),
        (
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            credentials_url.as_str(),
        ),
        ("AWS_SHARED_CREDENTIALS_FILE", missing),
        ("AWS_CONFIG_FILE", missing),
        (f.secret_var, f.dev_secret),
    ];
    let mut command = api.command(&binaries().await.join(f.binary), &env);
    for variable in [
        "DATABASE_URL",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
    ] {
        command.env_remove(variable);
    }
    let instance = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    drop(command);

    // First a wrong token as the password, until one attempt's token was known: refused.
    // Then the right one: it authenticates. An attempt whose second is not known is retried.
    let (mut refused, mut authenticated) = (0, 0);
    for _ in 0..10 {
        if authenticated > 0 {
            break;
        }
        let right = refused > 0;
        let before = {
            let mut gate = gate.lock().expect("gate");
            gate.right = right;
            gate.asked.len()
        };
        let answer = invoke(&api, "stripe/invoice.paid.json").await;
        let asked: Vec<Asked> = gate.lock().expect("gate").asked[before..].to_vec();
        assert!(!asked.is_empty(), "a new connection asks for credentials");
        // What each request was, for the messages: (its token known, the right password set).
        let seen: Vec<(bool, bool)> = asked.iter().map(|a| (a.token.is_some(), a.right)).collect();
        let known = asked.iter().any(|a| a.token.is_some());
        if !right {
            // Every password set was not the token sent (a wrong token, or none): refused.
            assert_eq!(answer.0, 500, "accepted without its token: {seen:?}");
            if known {
                refused += 1;
            }
        } else if known {
            assert_eq!(answer, (200, "processed".into()), "{seen:?}");
            authenticated += 1;
        } else {
            assert_eq!(answer.0, 500, "accepted without its token: {seen:?}");
        }
    }
    assert_eq!((refused > 0, authenticated), (true, 1));
    assert_eq!(
        function_session(&admin).await,
        vec![("stripe_fn".to_owned(), true)]
    );

    let printed = everything_printed(instance).await;
    // PostgreSQL's words for 28P01 (invalid_password), in the failed deliveries' lines.
    assert!(
        printed.contains("password authentication failed for user"),
        "the refusal is the server's: {printed}"
    );
    let tokens = gate.lock().expect("gate").tokens.clone();
    assert!(!tokens.is_empty());
    for token in &tokens {
        let signature = token
            .split('&')
            .find_map(|p| p.strip_prefix("X-Amz-Signature="))
            .expect("signed");
        assert_eq!(signature.len(), 64, "{signature}");
        assert!(!printed.contains(token.as_str()), "a token in the output");
        assert!(
            !printed.contains(signature),
            "a token's signature in the output"
        );
    }
    for secret in ["wJalrXUtnFEMI", "session-token-example"] {
        assert!(!printed.contains(secret), "{secret} in the output");
    }
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
    let aws = stub.aws_config().await;
    let settings = Settings::with_secret(
        "localhost",
        tls.server.port,
        "postgres",
        aws.clone(),
        ARN,
        Trust::PemFile(&tls.ca),
        test_timeouts(),
    )
    .await
    .expect("settings");
    let receiver = receiver_with(settings, stripe()).0;
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
        Trust::PemFile(&tls.ca),
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

const WEBHOOK_ARN: &str =
    "arn:aws:secretsmanager:us-east-1:123456789012:secret:claimonce/stripe-webhook-AbCdEf";

/// `sample` signed with `secret` (not the registry's local one), as the invocation's payload.
async fn invoke_signed(api: &RuntimeApi, sample: &str, secret: &str) -> (u16, String) {
    let mut event = sample_event(sample);
    let body = event["body"].as_str().expect("text body").to_owned();
    event["headers"]["stripe-signature"] = serde_json::Value::String(
        claimonce_tests::sign::stripe_header(secret, now(), body.as_bytes()),
    );
    invoke_event(api, &event).await
}

/// The Stripe binary under a Runtime API, its signing secret read from the Secrets Manager
/// secret `arn` at `endpoint` (a stub or moto), every mismatch allowed to read it again.
async fn stripe_reading_its_secret(
    db: &claimonce_tests::TestDb,
    arn: &str,
    endpoint: &str,
    extra: &[(&str, &str)],
) -> (RuntimeApi, Child) {
    let f = function("stripe");
    let api = RuntimeApi::start(f.binary).await.expect("api");
    let url = db.function_url_as("stripe");
    let arn_var = format!("{}_ARN", f.secret_var);
    let env = [
        ("DATABASE_URL", url.as_str()),
        (arn_var.as_str(), arn),
        ("AWS_ENDPOINT_URL_SECRETS_MANAGER", endpoint),
        ("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"),
        (
            "AWS_SECRET_ACCESS_KEY",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        ),
        ("AWS_REGION", "us-east-1"),
        // Every mismatch may read again: the interval's own test is below.
        ("WEBHOOK_SECRET_REFRESH_SECONDS", "0"),
    ];
    let instance = api
        .command(&binaries().await.join(f.binary), &env)
        .envs(extra.iter().copied())
        .env_remove(f.secret_var)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    (api, instance)
}

/// The signing secret as a deployment has it: not in the function's environment but in the
/// Secrets Manager secret `<VAR>_ARN` names, read by the real binary at cold start, and read
/// again when a delivery's signature matches none (a rotation: "old,new" in the secret).
#[tokio::test]
async fn the_signing_secret_is_read_from_secrets_manager_and_a_rotation_needs_no_deploy() {
    let db = claimonce_tests::TestDb::new().await;
    let f = function("stripe");
    let current = Arc::new(Mutex::new(f.dev_secret.to_owned()));
    let stub = Recorder::rotating_secret(WEBHOOK_ARN, Arc::clone(&current)).await;
    let (api, instance) = stripe_reading_its_secret(&db, WEBHOOK_ARN, &stub.url, &[]).await;
    assert_eq!(
        invoke_signed(&api, "stripe/invoice.paid.json", f.dev_secret).await,
        (200, "processed".into())
    );
    assert_eq!(stub.requests().len(), 1, "read once at cold start");

    // The rotation's first step, in the secret only; the sender signs with the new one.
    let new = "whsec_rotated_in_without_a_deploy";
    *current.lock().expect("secret") = format!("{},{new}", f.dev_secret);
    assert_eq!(
        invoke_signed(&api, "stripe/checkout.session.completed.json", new).await,
        (200, "processed".into())
    );
    assert_eq!(stub.requests().len(), 2, "read again on the first mismatch");
    // The old one still verifies (both are configured), with no further read.
    assert_eq!(
        invoke_signed(&api, "stripe/invoice.paid.json", f.dev_secret).await,
        (200, "duplicate".into())
    );
    assert_eq!(stub.requests().len(), 2);
    // A signature no secret made: read again, still refused.
    assert_eq!(
        invoke_signed(&api, "stripe/invoice.paid.json", "whsec_nobody").await,
        (400, "signature-mismatch".into())
    );
    assert_eq!(stub.requests().len(), 3);
    let printed = everything_printed(instance).await;
    assert!(printed.contains("signing secrets read again"), "{printed}");
    for secret in [f.dev_secret, new] {
        assert!(!printed.contains(secret), "a secret in the output");
    }
}

/// The same rotation against a real Secrets Manager emulator (moto's server, started by the
/// harness): the secret created and then rotated through the SDK as an operator would
/// (`put-secret-value`), the real binary reading it at cold start and again at the first
/// signature the current secrets do not match, with no restart and nothing secret printed.
/// The stub above stays for what only it can show: how many reads were made.
#[tokio::test]
async fn a_signing_secret_rotated_in_secrets_manager_verifies_the_next_delivery_with_no_restart() {
    let db = claimonce_tests::TestDb::new().await;
    let moto = claimonce_tests::moto::moto().await;
    let manager = aws_sdk_secretsmanager::Client::new(&moto.aws_config().await);
    let f = function("stripe");
    let created = manager
        .create_secret()
        .name(format!("claimonce/{}/stripe", db.name))
        .secret_string(f.dev_secret)
        .send()
        .await
        .expect("create the secret in moto");
    let arn = created.arn().expect("an ARN").to_owned();
    let (api, instance) = stripe_reading_its_secret(&db, &arn, &moto.url, &[]).await;
    assert_eq!(
        invoke_signed(&api, "stripe/invoice.paid.json", f.dev_secret).await,
        (200, "processed".into())
    );
    // The rotation's first step: the new secret beside the old one, a new version.
    let new = "whsec_rotated_in_moto_without_a_deploy";
    manager
        .put_secret_value()
        .secret_id(&arn)
        .secret_string(format!("{},{new}", f.dev_secret))
        .send()
        .await
        .expect("rotate the secret in moto");
    assert_eq!(
        invoke_signed(&api, "stripe/checkout.session.completed.json", new).await,
        (200, "processed".into()),
        "the warm function verifies the new secret"
    );
    assert_eq!(
        invoke_signed(&api, "stripe/invoice.paid.json", f.dev_secret).await,
        (200, "duplicate".into()),
        "and still the old one"
    );
    let printed = everything_printed(instance).await;
    assert!(printed.contains("signing secrets read again"), "{printed}");
    for secret in [f.dev_secret, new] {
        assert!(!printed.contains(secret), "a secret in the output");
    }
}

/// Unsigned requests cannot make a function call Secrets Manager more often than the
/// interval: within it, a mismatch is refused without a read.
#[tokio::test]
async fn within_the_refresh_interval_a_mismatch_reads_nothing() {
    let db = claimonce_tests::TestDb::new().await;
    let current = Arc::new(Mutex::new("whsec_before".to_owned()));
    let stub = Recorder::rotating_secret(WEBHOOK_ARN, Arc::clone(&current)).await;
    let aws = stub.aws_config().await;
    let secrets = claimonce::secrets::WebhookSecrets::secrets_manager(
        "STRIPE_WEBHOOK_SECRET",
        WEBHOOK_ARN,
        aws,
    );
    let provider = Stripe::from_secret(&secrets.read().await.expect("read")).expect("provider");
    let settings =
        Settings::from_url(&db.function_url_as("stripe"), None, test_timeouts()).expect("settings");
    let (receiver, _) = receiver_with(settings, provider);
    let receiver = receiver.with_secret_refresh(
        secrets,
        Stripe::from_secret,
        claimonce::secrets::REFRESH_INTERVAL,
    );
    *current.lock().expect("secret") = "whsec_before,whsec_after".to_owned();
    let body = invoice_paid("evt_interval", "cus_interval", 1);
    let signature = claimonce_tests::sign::stripe_header("whsec_after", now(), &body);
    let answer = claimonce_tests::apigw::post_to(
        &receiver,
        "/webhooks/stripe",
        &[("stripe-signature", &signature)],
        &body,
    )
    .await;
    assert_eq!(
        claimonce_tests::apigw::outcome(&answer),
        (400, "signature-mismatch".into())
    );
    assert_eq!(stub.requests().len(), 1, "only the first read");
}

/// What the AWS SDK reports reaches the function's log: aws-config's warning about a setting
/// it cannot read (here `AWS_USE_FIPS_ENDPOINT`, which it then ignores) is one JSON line of the
/// real binary's output, in the shape of every other line, while the delivery is served.
#[tokio::test]
async fn the_aws_sdk_s_warnings_are_lines_of_the_function_s_log() {
    let db = claimonce_tests::TestDb::new().await;
    let f = function("stripe");
    let current = Arc::new(Mutex::new(f.dev_secret.to_owned()));
    let stub = Recorder::rotating_secret(WEBHOOK_ARN, Arc::clone(&current)).await;
    let (api, instance) = stripe_reading_its_secret(
        &db,
        WEBHOOK_ARN,
        &stub.url,
        &[("AWS_USE_FIPS_ENDPOINT", "perhaps")],
    )
    .await;
    assert_eq!(
        invoke_signed(&api, "stripe/invoice.paid.json", f.dev_secret).await,
        (200, "processed".into())
    );
    instance_lines(instance, |lines| {
        let warning = lines
            .iter()
            .find(|l| l["message"] == "invalid value for FIPS setting")
            .unwrap_or_else(|| panic!("no SDK warning among {lines:#?}"));
        assert_eq!(warning["level"], "WARN");
        assert!(
            warning["target"]
                .as_str()
                .is_some_and(|t| t.starts_with("aws_config")),
            "{warning}"
        );
        assert!(warning["fields"]["err"].is_string(), "{warning}");
        assert_eq!(warning["service"], lines[0]["service"]);
        assert_eq!(warning["cold_start"], true, "read at cold start: {warning}");
        assert!(warning["timestamp"].is_string());
    })
    .await;
}

/// Stops `instance` and hands every line it printed on stdout, each parsed as JSON (a line
/// that is not JSON fails the test), to `check`.
async fn instance_lines(instance: Child, check: impl FnOnce(&[serde_json::Value])) {
    let mut instance = instance;
    instance.start_kill().expect("kill");
    let output = instance.wait_with_output().await.expect("reaped");
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|_| panic!("not a JSON line: {l}")))
        .collect();
    check(&lines);
}
