//! The connection: bounded waits, reconnecting, and verified TLS.

use std::time::{Duration, Instant};

use claimonce::Receiver;
use claimonce::db::{Settings, Timeouts};
use claimonce_tests::TestDb;
use claimonce_tests::apigw::{Answer, json_body, post_stripe};
use claimonce_tests::db::{receiver_with, test_timeouts};
use claimonce_tests::outage::Outage;
use claimonce_tests::sign::{invoice_paid, stripe};
use claimonce_tests::tls::TlsServer;
use stripe_webhook::Stripe;

async fn deliver(receiver: &Receiver<Stripe>, id: &str) -> Answer {
    post_stripe(receiver, &invoice_paid(id, "cus_conn", 1)).await
}

fn short_timeouts() -> Timeouts {
    Timeouts::new(Duration::from_millis(500), Duration::from_millis(800))
}

#[tokio::test]
async fn an_unresponsive_database_answers_500_within_the_bound() {
    // Accepts TCP connections and never says a word, like a black-holed endpoint.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = silent.local_addr().expect("addr").port();
    let url = format!("postgres://u:secretpw@127.0.0.1:{port}/db?sslmode=disable");
    let settings = Settings::from_url(&url, None, short_timeouts()).expect("settings");
    let (receiver, lines) = receiver_with(settings, stripe());
    let started = Instant::now();
    let response = deliver(&receiver, "evt_hang").await;
    let elapsed = started.elapsed();
    assert_eq!(response.status().as_u16(), 500);
    assert_eq!(json_body(&response)["status"], 500);
    // The connect bound is 500 ms; allow generous slack for a loaded machine, but far less
    // than a Lambda timeout.
    assert!(elapsed < Duration::from_secs(3), "took {elapsed:?}");
    let logged = lines.lock().expect("logs").join("\n");
    assert!(logged.contains("connect timed out"), "{logged}");
    assert!(!logged.contains("secretpw"));
    drop(silent);

    // Nothing listening at all: refused at once, also a 500.
    let url = format!("postgres://u@127.0.0.1:{port}/db?sslmode=disable");
    let settings = Settings::from_url(&url, None, short_timeouts()).expect("settings");
    let receiver = receiver_with(settings, stripe()).0;
    assert_eq!(
        deliver(&receiver, "evt_refused").await.status().as_u16(),
        500
    );
}

#[tokio::test]
async fn a_connection_killed_between_invocations_is_replaced_without_a_500() {
    let db = TestDb::new().await;
    let (receiver, _) = db.receiver(stripe());
    assert_eq!(deliver(&receiver, "evt_k1").await.status().as_u16(), 200);
    let admin = db.client().await;
    for round in 0..3 {
        // As an RDS Proxy idle timeout or a failover would: the function login's backend (not
        // the superuser's, such as PgBouncer's own look-up of that login).
        let killed = admin
            .query_one(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                 WHERE datname = current_database() AND usename <> session_user",
                &[],
            )
            .await
            .expect("terminate")
            .get::<_, i64>(0);
        assert_eq!(killed, 1, "round {round}");
        let response = deliver(&receiver, &format!("evt_k{}", round + 2)).await;
        assert_eq!(response.status().as_u16(), 200, "round {round}");
    }
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 4);
}

/// The `message` of each captured line.
fn messages(lines: &claimonce::log::Captured) -> Vec<serde_json::Value> {
    let mut lines = lines.lock().expect("logs");
    let parsed = lines
        .iter()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect();
    lines.clear();
    parsed
}

/// A delivery whose reconnect is refused logs the refusal and no `reconnected` line (the
/// count was taken before the connect, so a refused one said `reconnected` right before
/// `connect failed`); once the database is back, the next delivery's reconnect is logged,
/// once, before the delivery's own line.
#[tokio::test]
async fn only_a_reconnect_that_was_made_is_logged_as_reconnected() {
    let db = TestDb::new().await;
    let (outage, through) = Outage::in_front_of(&db.function_url_as("stripe"))
        .await
        .expect("the forwarder");
    let settings = Settings::from_url(&through, None, short_timeouts()).expect("settings");
    let (receiver, lines) = receiver_with(settings, stripe());
    receiver.warm_up().await;
    assert_eq!(deliver(&receiver, "evt_up").await.status().as_u16(), 200);
    messages(&lines);

    outage.down().await;
    assert_eq!(deliver(&receiver, "evt_down").await.status().as_u16(), 500);
    let down = messages(&lines);
    let said = |lines: &[serde_json::Value], what: &str| {
        lines
            .iter()
            .filter(|l| l["message"] == what)
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(said(&down, "reconnected"), Vec::<serde_json::Value>::new());
    assert!(
        down.iter()
            .any(|l| l.to_string().contains("connect failed")),
        "the refusal is logged: {down:?}"
    );

    outage.up().await.expect("up again");
    assert_eq!(deliver(&receiver, "evt_back").await.status().as_u16(), 200);
    let back = messages(&lines);
    let reconnected = said(&back, "reconnected");
    assert_eq!(reconnected.len(), 1, "{back:?}");
    assert_eq!(reconnected[0]["Reconnects"], 1.0);
    assert_eq!(reconnected[0]["event_id"], "evt_back");
    let first = back.first().map(|l| l["message"].clone());
    assert_eq!(first, Some("reconnected".into()), "{back:?}");
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 2);
}

async fn tls_select(url: &str, ca: Option<&std::path::Path>) -> Result<(), String> {
    let settings = Settings::from_url(url, ca, test_timeouts()).map_err(|e| e.to_string())?;
    let client = settings.connect().await.map_err(|e| e.to_string())?;
    let row = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .map_err(|e| e.to_string())?;
    if row.get::<_, bool>(0) {
        Ok(())
    } else {
        Err("plain".into())
    }
}

#[tokio::test]
async fn tls_verifies_the_chain_and_the_host_name() {
    let tls = tokio::task::spawn_blocking(TlsServer::start)
        .await
        .expect("start");
    let right = Some(tls.ca.as_path());
    // Right CA, right name: verified TLS, for every spelling of "verify".
    for mode in [
        None,
        Some("require"),
        Some("verify-ca"),
        Some("verify-full"),
    ] {
        assert_eq!(
            tls_select(&tls.url("localhost", mode), right).await,
            Ok(()),
            "{mode:?}"
        );
    }
    // Wrong CA: refused.
    let wrong = tls_select(&tls.url("localhost", Some("require")), Some(&tls.other_ca)).await;
    assert!(
        wrong.as_ref().is_err_and(|e| e.contains("certificate")),
        "{wrong:?}"
    );
    // The public web roots do not trust a private CA either.
    let public = tls_select(&tls.url("localhost", Some("require")), None).await;
    assert!(public.is_err(), "{public:?}");
    // Right CA but a name the certificate does not carry: refused.
    let wrong_name = tls_select(&tls.url("127.0.0.1", Some("require")), right).await;
    assert!(
        wrong_name
            .as_ref()
            .is_err_and(|e| e.contains("certificate")),
        "{wrong_name:?}"
    );
    // sslmode=disable is plain text, on purpose.
    let plain = tls_select(&tls.url("127.0.0.1", Some("disable")), None).await;
    assert_eq!(plain, Err("plain".into()));
    // prefer would silently fall back to plain text: refused at start-up.
    let prefer = tls_select(&tls.url("localhost", Some("prefer")), right).await;
    assert!(
        prefer.as_ref().is_err_and(|e| e.contains("sslmode=prefer")),
        "{prefer:?}"
    );
}

#[tokio::test]
async fn a_delivery_over_verified_tls_is_processed() {
    let (tls, admin) = TlsServer::migrated().await;
    let settings = Settings::from_url(
        &tls.url("localhost", Some("require")),
        Some(&tls.ca),
        test_timeouts(),
    )
    .expect("settings");
    let receiver = receiver_with(settings, stripe()).0;
    let response = deliver(&receiver, "evt_tls").await;
    assert_eq!(response.status().as_u16(), 200);
    let rows = admin
        .query_one(
            "SELECT count(*) FROM processed_events WHERE event_id = 'evt_tls'",
            &[],
        )
        .await
        .expect("count")
        .get::<_, i64>(0);
    assert_eq!(rows, 1);
}

/// What waiting cannot heal is a 500, never a queued delivery: a certificate the client does
/// not trust (the wrong CA, or a host name the certificate does not carry) and a refused
/// password (28P01) are not "unavailable", while a server that refuses connections is.
#[tokio::test]
async fn a_certificate_or_password_refusal_is_not_unavailable_and_so_never_queued() {
    use claimonce::db::{ConnectError, DeliveryError};
    let tls = tokio::task::spawn_blocking(TlsServer::start)
        .await
        .expect("start");
    let classified = |url: String, ca: Option<std::path::PathBuf>| async move {
        let settings = Settings::from_url(&url, ca.as_deref(), test_timeouts()).expect("settings");
        let error: ConnectError = settings.connect().await.expect_err("refused");
        let text = error.to_string();
        (DeliveryError::Connect(error).unavailable(), text)
    };
    let (wrong_ca, why) = classified(
        tls.url("localhost", Some("require")),
        Some(tls.other_ca.clone()),
    )
    .await;
    assert!(
        why.contains("certificate"),
        "the refusal is the certificate's: {why}"
    );
    assert_eq!(wrong_ca, None, "an untrusted certificate: {why}");
    let (wrong_name, why) =
        classified(tls.url("127.0.0.1", Some("require")), Some(tls.ca.clone())).await;
    assert!(why.contains("certificate"), "{why}");
    assert_eq!(
        wrong_name, None,
        "a name the certificate does not carry: {why}"
    );

    let admin = tls.superuser().await;
    admin
        .batch_execute("CREATE ROLE pw_login LOGIN PASSWORD 'right-pw'")
        .await
        .expect("a login");
    tls.require_password(&admin, "pw_login").await;
    let url = format!(
        "postgres://pw_login:wrong-pw@localhost:{}/postgres?sslmode=require",
        tls.server.port
    );
    let (refused, why) = classified(url, Some(tls.ca.clone())).await;
    assert!(
        why.contains("password authentication failed"),
        "the server's refusal (28P01): {why}"
    );
    assert_eq!(refused, None, "a refused password: {why}");

    // The positive control: nothing listening is unavailable (a restart, a failover).
    let port = claimonce_local::postgres::free_loopback_port().expect("a free port");
    let (down, why) = classified(
        format!("postgres://x@127.0.0.1:{port}/x?sslmode=disable"),
        None,
    )
    .await;
    assert_eq!(down, Some("connect-failed"), "{why}");
}
