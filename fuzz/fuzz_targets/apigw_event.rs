//! Arbitrary bytes as the raw API Gateway event a Lambda invocation carries, through
//! `lambda::handle_event` of every registered receiver: the whole boundary (event reading,
//! base64, method, size, headers, signature) as the runtime drives it.
//!
//! Every answer must be an API Gateway response payload with one of the statuses the policy
//! allows, one log line per request, no secret in the log, and no panic.
#![no_main]

use std::sync::LazyLock;

use claimonce_fuzz::RECEIVERS;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use tokio::runtime::Runtime;

/// One current-thread runtime for the process, with the timer and I/O drivers the database
/// code needs (a request that reached it would time out or be refused, never hang).
static RUNTIME: LazyLock<Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
});

const STATUSES: [u64; 5] = [200, 400, 405, 413, 500];

fn check(payload: &Value, log: &[String]) {
    let status = payload["statusCode"].as_u64();
    assert!(
        status.is_some_and(|s| STATUSES.contains(&s)),
        "unexpected statusCode in {payload}"
    );
    assert!(payload["body"].is_string(), "no body in {payload}");
    assert_eq!(payload["isBase64Encoded"], Value::Bool(false));
    // One delivery line per request. A request signed well enough to reach the (unreachable)
    // database may add a line about the connection: a scheme that signs no timestamp (GitHub's,
    // Shopify's) keeps its sample events valid, so they get that far.
    let deliveries = log
        .iter()
        .filter(|line| line.contains(r#""message":"delivery""#))
        .count();
    assert_eq!(deliveries, 1, "one delivery line per request, got {log:?}");
    for line in log {
        for receiver in &RECEIVERS.all {
            assert!(
                !line.contains(receiver.secret()),
                "a secret reached the log: {line}"
            );
        }
    }
}

fuzz_target!(|data: &[u8]| {
    // The runtime hands the handler the event as text; non-UTF-8 never gets that far.
    let Ok(event) = std::str::from_utf8(data) else {
        return;
    };
    let receivers = &*RECEIVERS;
    receivers.take_log();
    for receiver in &receivers.all {
        // The payload as the runtime sends it: serialised.
        let payload = RUNTIME.block_on(receiver.handle_event(event));
        let sent = serde_json::to_value(&payload).expect("the payload serialises");
        check(&sent, &receivers.take_log());
    }
});
