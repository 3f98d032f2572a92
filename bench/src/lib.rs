//! Shared pieces of the benchmarks: event bodies shaped like real Stripe payloads, and
//! readings of this process's CPU time and peak memory.

pub mod fleet;

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use claimonce::verify::timestamp_v1;
use claimonce_local::postgres::{Options, Postgres};
use serde_json::{Value, json};

/// The Stripe signing secret every benchmark's function and deliveries use.
pub const SECRET: &str = "whsec_bench";

/// The API Gateway (HTTP API v2) event of a POST of `body` to `/webhooks/stripe`, as API
/// Gateway sends it: signed now with [`SECRET`], or, when `signed` is false, with a signature
/// that matches nothing.
pub fn stripe_event(body: &[u8], signed: bool) -> String {
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let v1 = if signed {
        timestamp_v1::sign(SECRET, t, body)
    } else {
        "0".repeat(64)
    };
    api_gateway_event(
        "/webhooks/stripe",
        json!({"content-type": "application/json", "stripe-signature": format!("t={t},v1={v1}")}),
        body,
    )
}

/// The API Gateway (HTTP API v2) event of a POST of `body` to `path` with `headers` (a JSON
/// object), as API Gateway sends it.
pub fn api_gateway_event(path: &str, headers: Value, body: &[u8]) -> String {
    json!({
        "version": "2.0", "routeKey": format!("POST {path}"), "rawPath": path,
        "rawQueryString": "",
        "headers": headers,
        "requestContext": {"accountId": "123456789012", "apiId": "bench", "domainName": "bench",
            "domainPrefix": "bench", "http": {"method": "POST", "path": path,
            "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1", "userAgent": "bench"},
            "requestId": "bench", "routeKey": format!("POST {path}"), "stage": "$default",
            "time": "", "timeEpoch": 0},
        "body": String::from_utf8_lossy(body), "isBase64Encoded": false
    })
    .to_string()
}

/// A private PostgreSQL in `dir` (emptied first) with the project's migrations applied to its
/// `postgres` database, and that database's URL.
pub async fn migrated_postgres(dir: &Path) -> Result<(Postgres, String), String> {
    let _ = std::fs::remove_dir_all(dir);
    let dir = dir.to_path_buf();
    let pg = tokio::task::spawn_blocking(move || Postgres::start(&dir, &Options::default()))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("PostgreSQL: {e}"))?;
    let url = pg.url("postgres");
    let (mut client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    claimonce::migrate::apply(&mut client, claimonce_local::migrations::ALL)
        .await
        .map_err(|e| e.to_string())?;
    Ok((pg, url))
}

/// A `checkout.session.completed` body about the size Stripe sends (~2 KiB).
pub fn checkout(id: &str, customer: &str) -> Vec<u8> {
    event(
        id,
        "checkout.session.completed",
        json!({
            "id": format!("cs_{id}"), "object": "checkout.session", "amount_subtotal": 2000, "amount_total": 2000,
            "cancel_url": "https://example.com/cancel", "client_reference_id": null, "created": 1795977900,
            "currency": "usd", "customer": customer, "customer_creation": "always",
            "customer_details": {"address": {"city": null, "country": "US", "line1": null, "line2": null,
                "postal_code": "94103", "state": null}, "email": "jenny.rosen@example.com", "name": "Jenny Rosen",
                "phone": null, "tax_exempt": "none", "tax_ids": []},
            "expires_at": 1796064300, "invoice": "in_1QLocalInvoice0000000001", "livemode": false, "locale": null,
            "metadata": {}, "mode": "subscription", "payment_intent": null, "payment_method_types": ["card"],
            "payment_status": "paid", "status": "complete", "subscription": "sub_1QLocalSubscription001",
            "success_url": "https://example.com/success", "url": null
        }),
    )
}

/// An `invoice.paid` body about the size Stripe sends.
pub fn invoice(id: &str, customer: &str, amount: i64) -> Vec<u8> {
    event(
        id,
        "invoice.paid",
        json!({
            "id": format!("in_{id}"), "object": "invoice", "account_country": "US", "account_name": "Acme",
            "amount_due": amount, "amount_paid": amount, "amount_remaining": 0, "attempt_count": 1,
            "billing_reason": "subscription_cycle", "collection_method": "charge_automatically",
            "created": 1795977950, "currency": "usd", "customer": customer,
            "customer_email": "jenny.rosen@example.com", "customer_name": "Jenny Rosen",
            "lines": {"object": "list", "data": [{"id": "il_1", "object": "line_item", "amount": amount,
                "currency": "usd", "description": "1 x Pro (at $20.00 / month)",
                "period": {"end": 1798570000, "start": 1795978000}, "quantity": 1}],
                "has_more": false, "total_count": 1, "url": "/v1/invoices/in_1/lines"},
            "livemode": false, "metadata": {}, "number": "ACME-0001", "paid": true, "status": "paid",
            "subscription": "sub_1", "subtotal": amount, "total": amount
        }),
    )
}

fn event(id: &str, kind: &str, object: Value) -> Vec<u8> {
    serde_json::to_vec_pretty(&json!({
        "id": id, "object": "event", "api_version": "2024-06-20", "created": 1795978000,
        "data": {"object": object}, "livemode": false, "pending_webhooks": 1,
        "request": {"id": null, "idempotency_key": null}, "type": kind
    }))
    .unwrap_or_default()
}

/// Fields `n` (1-based, as `proc(5)` numbers them) of `/proc/<pid>/stat` ("self" for this
/// process), each read as a time in milliseconds: the CPU fields count clock ticks, 100 per
/// second. A process that is gone reads as zeros.
fn stat_ms<const N: usize>(pid: &str, fields: [usize; N]) -> [f64; N] {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The command name (field 2) may contain spaces; the fields after it, from field 3 on,
    // are space separated.
    let after: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    fields.map(|n| {
        after
            .get(n.saturating_sub(3))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
            * 10.0
    })
}

/// This process's CPU time so far, in milliseconds: (user, system), fields 14 and 15
/// (utime, stime).
pub fn cpu_ms() -> (f64, f64) {
    let [user, system] = stat_ms("self", [14, 15]);
    (user, system)
}

/// CPU time (user + system) of this process's children that have ended and been waited for,
/// in milliseconds: fields 16 and 17 (cutime, cstime).
pub fn children_cpu_ms() -> f64 {
    stat_ms("self", [16, 17]).iter().sum()
}

/// CPU time (user + system) that a PostgreSQL server has used so far, in milliseconds: the
/// postmaster's own, its live children's (backends and background processes), and that of the
/// children that have ended (the postmaster's cutime and cstime). The difference between two
/// readings is the database's CPU over the interval, whichever backends came and went.
pub fn postgres_cpu_ms(postmaster: u32) -> f64 {
    let own: f64 = stat_ms(&postmaster.to_string(), [14, 15, 16, 17])
        .iter()
        .sum();
    let children: f64 = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            let [parent] = stat_ms(&pid.to_string(), [4]);
            // stat_ms scales by 10; the parent pid field is not a time.
            (parent / 10.0) as u32 == postmaster
        })
        .map(|pid| stat_ms(&pid.to_string(), [14, 15]).iter().sum::<f64>())
        .sum();
    own + children
}

/// Peak resident memory (VmHWM) of process `pid` ("self" for this one), in KiB.
pub fn peak_rss_kib(pid: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The partner event source the benchmarks' Stripe function takes events of.
pub const EVENT_SOURCE: &str = "aws.partner/stripe.com/ed_test_claimonce_bench";

/// Starts `binary` (a `stripe-webhook` build) under `api` on `database_url` with [`SECRET`],
/// its JSON lines dropped: one execution environment, as Lambda starts it.
pub fn spawn_stripe(
    api: &claimonce_local::runtime_api::RuntimeApi,
    binary: &Path,
    database_url: &str,
    extra: &[(&str, &str)],
) -> tokio::process::Child {
    api.command(
        binary,
        &[
            ("DATABASE_URL", database_url),
            ("STRIPE_WEBHOOK_SECRET", SECRET),
        ],
    )
    .envs(extra.iter().copied())
    .stdout(std::process::Stdio::null())
    .spawn()
    .expect("spawn the function")
}

/// Ends a command whose arguments were not run: `--help`'s text on stdout with code 0, or a
/// usage error on stderr with its code.
pub fn exit_with((message, code): (String, u8)) -> std::process::ExitCode {
    if code == 0 {
        println!("{message}");
    } else {
        eprintln!("{message}");
    }
    std::process::ExitCode::from(code)
}

/// Waits until database `db` has no backend left, so that the CPU of the ones that served a run
/// is in the postmaster's count of its ended children when it is read.
pub async fn settle(admin: &tokio_postgres::Client, db: &str) {
    for _ in 0..500 {
        let left = admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = $1",
                &[&db],
            )
            .await
            .map_or(0, |r| r.get::<_, i64>(0));
        if left == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    // The postmaster reaps an ended backend on SIGCHLD; give it that moment.
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
}

/// The postmaster's pid, from `postmaster.pid` in the data directory.
pub fn postmaster_pid(pg: &Postgres) -> u32 {
    std::fs::read_to_string(pg.dir.join("data").join("postmaster.pid"))
        .ok()
        .and_then(|text| text.lines().next()?.trim().parse().ok())
        .unwrap_or(0)
}

/// pgbench against the server on loopback `port` as `postgres`, with no vacuum first; the
/// caller adds the rest of the run.
pub fn pgbench_at(port: u16) -> std::process::Command {
    let exe = claimonce_local::postgres::bin_dir().map_or_else(
        || std::path::PathBuf::from("pgbench"),
        |d| d.join("pgbench"),
    );
    let mut command = std::process::Command::new(exe);
    command.args([
        "-h",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-U",
        "postgres",
        "-n",
    ]);
    command
}
