//! Every line a Lambda log line: the real binary under the Runtime API emulator writes, for
//! each delivery, one JSON line that joins its Lambda request (the emulator's request id, trace
//! id, function ARN, name and memory size), its API Gateway request (the event's
//! `requestContext.requestId`) and its process (`cold_start` once); the level filter that
//! Lambda's `ApplicationLogLevel` sets (`AWS_LAMBDA_LOG_LEVEL`) is honoured, and the debug
//! detail exists when asked for.

use std::process::Stdio;
use std::time::Duration;

use claimonce_local::runtime_api::{Outcome, RuntimeApi};
use claimonce_local::sign::resign;
use claimonce_tests::TestDb;
use claimonce_tests::lambda::{binaries, function, sample_event};
use claimonce_tests::sign::now;
use serde_json::Value;

/// Runs the Stripe binary with `extra` environment, invokes it with `events` one at a time,
/// stops it, and returns every line it printed, parsed.
async fn lines_of(db: &TestDb, extra: &[(&str, &str)], events: &[Value]) -> Vec<Value> {
    let f = function("stripe");
    let api = RuntimeApi::start(f.binary).await.expect("api");
    let url = db.function_url_as("stripe");
    let mut env = vec![("DATABASE_URL", url.as_str()), (f.secret_var, f.dev_secret)];
    env.extend_from_slice(extra);
    let child = api
        .command(&binaries().await.join(f.binary), &env)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    for event in events {
        match api
            .invoke(event.to_string(), Duration::from_secs(20))
            .await
            .expect("an answer")
        {
            Outcome::Response(_) => {}
            Outcome::Error(e) => panic!("function error: {}", String::from_utf8_lossy(&e)),
        }
    }
    let mut child = child;
    child.start_kill().expect("kill");
    let output = child.wait_with_output().await.expect("output");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|_| panic!("not a JSON line: {l}")))
        .collect()
}

fn signed(sample: &str) -> Value {
    let mut event = sample_event(sample);
    resign(&mut event, now()).expect("sign");
    event
}

#[tokio::test]
async fn every_delivery_line_joins_its_lambda_request_its_api_request_and_its_trace() {
    let db = TestDb::new().await;
    let event = signed("stripe/invoice.paid.json");
    let api_request_id = event["requestContext"]["requestId"]
        .as_str()
        .expect("the sample's request id")
        .to_owned();
    let lines = lines_of(&db, &[], &[event.clone(), event]).await;
    let deliveries: Vec<&Value> = lines
        .iter()
        .filter(|l| l["message"] == "delivery")
        .collect();
    assert_eq!(deliveries.len(), 2, "{lines:?}");
    for (n, line) in deliveries.iter().enumerate() {
        // The emulator numbers its invocations from 1; Lambda's would be UUIDs.
        let request = format!("{:08x}-local", n + 1);
        assert_eq!(line["function_request_id"], request.as_str());
        assert_eq!(
            line["xray_trace_id"],
            format!("Root=1-00000000-{request}").as_str()
        );
        assert_eq!(line["request_id"], api_request_id.as_str());
        assert_eq!(line["function_name"], "stripe-webhook");
        assert_eq!(line["function_memory_size"], 256);
        assert_eq!(
            line["function_arn"],
            "arn:aws:lambda:us-east-1:123456789012:function:stripe-webhook"
        );
        assert_eq!(line["cold_start"], n == 0, "cold only the first time");
        assert_eq!(line["level"], "INFO");
        assert_eq!(line["service"], "claimonce");
        let timestamp = line["timestamp"].as_str().expect("timestamp");
        assert!(
            timestamp.len() == 24 && timestamp.ends_with('Z') && timestamp.as_bytes()[10] == b'T',
            "{timestamp}"
        );
    }
    assert_eq!(deliveries[0]["disposition"], "processed");
    assert_eq!(deliveries[1]["disposition"], "duplicate");
    // The warm-up's line, before the first invocation, is the cold start too: its key agrees
    // with its metric.
    let warm_up = lines
        .iter()
        .find(|l| l["message"] == "cold start")
        .expect("the cold start line");
    assert_eq!(warm_up["cold_start"], true, "{warm_up}");
    assert_eq!(warm_up["ColdStart"], 1.0, "{warm_up}");
    // Nothing the process printed carries the secret, a signature or the body.
    let text = lines
        .iter()
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join("\n");
    for secret in [function("stripe").dev_secret, "v1=", "amount_paid"] {
        assert!(!text.contains(secret), "{secret} in the log");
    }
}

#[tokio::test]
async fn the_log_level_lambda_sets_filters_the_lines_and_debug_says_why_a_request_was_refused() {
    let db = TestDb::new().await;
    let mut tampered = signed("stripe/invoice.paid.json");
    tampered["body"] = Value::String(
        tampered["body"]
            .as_str()
            .expect("body")
            .replacen("\"id\"", "\"id\" ", 1),
    );
    let events = [tampered];
    let at = |level: &'static str| {
        let db = &db;
        let events = &events;
        async move { lines_of(db, &[("AWS_LAMBDA_LOG_LEVEL", level)], events).await }
    };
    let levels = |lines: &[Value]| {
        lines
            .iter()
            .map(|l| {
                format!(
                    "{} {}",
                    l["level"].as_str().unwrap_or(""),
                    l["message"].as_str().unwrap_or("")
                )
            })
            .collect::<Vec<_>>()
    };
    let debug = at("DEBUG").await;
    assert_eq!(
        levels(&debug),
        ["INFO cold start", "DEBUG rejected", "INFO delivery"]
    );
    assert_eq!(debug[1]["problem"], "signature-mismatch");
    assert!(debug[1]["detail"].as_str().is_some_and(|d| !d.is_empty()));
    assert_eq!(
        levels(&at("INFO").await),
        ["INFO cold start", "INFO delivery"]
    );
    assert_eq!(levels(&at("WARN").await), Vec::<String>::new());
}

#[tokio::test]
async fn a_login_whose_statement_timeout_bounds_nothing_is_named_at_cold_start() {
    let db = TestDb::new().await;
    let login = format!("{}_stripe", db.name);
    let event = signed("stripe/invoice.paid.json");
    let unbounded = |lines: &[Value]| -> Vec<Value> {
        lines
            .iter()
            .filter(|l| l["level"] == "ERROR" && l["login"] == login.as_str())
            .cloned()
            .collect()
    };
    // As a login nobody gave a statement_timeout: behind RDS Proxy, which cancels nothing, a
    // statement the delivery gave up on would run on without end.
    db.client()
        .await
        .batch_execute(&format!("ALTER ROLE {login} RESET statement_timeout"))
        .await
        .expect("no bound");
    let lines = lines_of(&db, &[], std::slice::from_ref(&event)).await;
    let named = unbounded(&lines);
    assert_eq!(named.len(), 1, "{lines:?}");
    assert_eq!(named[0]["statement_timeout_ms"], 0);
    assert_eq!(named[0]["UnboundedStatements"], 1.0);
    assert!(
        named[0]["function_timeout_ms"]
            .as_u64()
            .is_some_and(|ms| ms > 0)
    );
    // The delivery itself is served all the same.
    assert!(
        lines.iter().any(|l| l["disposition"] == "processed"),
        "{lines:?}"
    );

    // Once the migrate function (or an operator) set it, nothing is said. A login's default
    // reaches new server sessions only: a pooler (PgBouncer here, RDS Proxy in AWS) keeps the
    // one it has, so that one is ended too.
    db.client()
        .await
        .batch_execute(&format!(
            "ALTER ROLE {login} SET statement_timeout = '3s'; \
             SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{login}'"
        ))
        .await
        .expect("set the login's bound");
    let lines = lines_of(&db, &[], &[event]).await;
    assert!(unbounded(&lines).is_empty(), "{lines:?}");
    assert!(
        lines.iter().any(|l| l["message"] == "cold start"),
        "{lines:?}"
    );
}

/// PostgreSQL's warnings reach the log: a statement the server answers with a `WARNING`
/// notice (here `COMMIT` with no transaction open, SQLSTATE 25P01) is one line at WARN, in the
/// common shape, with the severity, the code and the server's message; a plain `NOTICE` is
/// not written.
#[tokio::test]
async fn a_postgres_warning_on_the_function_s_connection_is_a_line_of_its_log() {
    let db = TestDb::new().await;
    let (log, captured) = claimonce::log::Log::capture();
    // The test process's forwarding, as a function's `main` installs it; the first call wins,
    // so this is the one test here that installs it.
    claimonce::log::forward_dependencies(&log);
    let client = db.settings().connect().await.expect("connect");
    client
        .batch_execute("DROP TABLE IF EXISTS claimonce_no_such_table")
        .await
        .expect("a notice only");
    client
        .batch_execute("COMMIT")
        .await
        .expect("a warning only");
    let lines: Vec<Value> = captured
        .lock()
        .expect("lines")
        .iter()
        .map(|l| serde_json::from_str(l).expect("json"))
        .filter(|l: &Value| l["target"] == "postgres")
        .collect();
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert_eq!(lines[0]["level"], "WARN");
    assert_eq!(
        lines[0]["message"],
        "WARNING 25P01: there is no transaction in progress"
    );
    assert!(lines[0]["service"].is_string());
}

/// EMF publishes each metric by one dimension set, the line's own, unless the Powertools
/// `service` set is asked for: the real binary's delivery line, by default and with
/// `CLAIMONCE_METRICS_SERVICE_DIMENSION=true`.
#[tokio::test]
async fn metrics_have_one_dimension_set_and_the_service_set_is_opt_in() {
    let db = TestDb::new().await;
    let sets = |lines: Vec<Value>| {
        lines
            .into_iter()
            .find(|l| l["message"] == "delivery")
            .map(|l| l["_aws"]["CloudWatchMetrics"][0]["Dimensions"].clone())
            .expect("a delivery line")
    };
    let plain = sets(lines_of(&db, &[], &[signed("stripe/invoice.paid.json")]).await);
    assert_eq!(plain, serde_json::json!([["Provider", "Disposition"]]));
    let with_service = sets(
        lines_of(
            &db,
            &[("CLAIMONCE_METRICS_SERVICE_DIMENSION", "true")],
            &[signed("stripe/invoice.paid.json")],
        )
        .await,
    );
    assert_eq!(
        with_service,
        serde_json::json!([["Provider", "Disposition"], ["service"]])
    );
}
