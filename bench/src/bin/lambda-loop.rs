//! The Lambda loop's own cost: the real release binary under the Runtime API emulator, one
//! invocation at a time as Lambda runs it, and the function process's CPU time and wakeups
//! per delivery, for a rejected delivery (the Runtime API round trip, verification, the log
//! line: no database work) and for each kind of accepted one. Accepted minus rejected is what
//! the database part costs the function.
//!
//! CPU is read from the kernel's per-thread run time (`/proc/<pid>/task/*/schedstat`,
//! nanoseconds), wakeups are the voluntary context switches (each blocking wait the process
//! pays for, alone, as a Lambda function does).
//!
//! The floor is measured in the same run: `bare-runtime`, a `lambda_runtime` function with
//! nothing of ours in it that reads the raw event and answers a fixed 400, under the same
//! emulator; each row says how many times the floor it costs. `--processes N` runs N copies of
//! each function side by side (one emulator each), as N warm execution environments share a
//! host, and sums their CPU.
//!
//! With `--tls` the function reaches the database over verified TLS (`sslmode=require`, the
//! tests' TLS PostgreSQL and its throwaway CA as `PGSSLROOTCERT`), as it reaches RDS Proxy:
//! each statement and its answer then pass through the crypto provider's record layer.
//!
//! ```text
//! cargo build --release -p stripe-webhook     # alone: with the bench tools, cargo would give
//! cargo build --release -p claimonce-bench    # it claimonce's `jobs` feature too
//! cargo run --release -p claimonce-bench --bin lambda-loop -- [--deliveries 2000] [--processes 1] [--binary PATH] [--tls]
//! ```

use std::time::Duration;

use claimonce_bench::fleet::{Fleet, task_usage};
use claimonce_bench::{checkout, invoice, migrated_postgres, stripe_event};
use serde_json::json;

/// CPU µs and wakeups of one database round trip made by tokio-postgres alone, the way a
/// function makes its one (one connection driven on a current-thread runtime, the statement
/// unnamed): `SELECT 1`, `n` times, on a thread of its own that reads its own counters. What
/// one statement costs a function's client whatever the statement is: the floor of the
/// database part.
fn bare_round_trip(url: String, n: u64) -> Option<(f64, f64)> {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok()?;
        runtime.block_on(async {
            let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .ok()?;
            tokio::spawn(connection);
            let trip = || client.query_typed("SELECT 1", &[]);
            for _ in 0..200 {
                trip().await.ok()?;
            }
            // The kernel adds a running thread's time to its count when it stops running, so
            // the thread sleeps before each reading: read while running, the count lags by up
            // to a scheduler tick, which made 300 trips read as 5 µs each.
            let settled = || {
                std::thread::sleep(Duration::from_millis(2));
                task_usage(std::path::Path::new("/proc/thread-self"))
            };
            let before = settled();
            for _ in 0..n {
                trip().await.ok()?;
            }
            let after = settled();
            let n = n.max(1) as f64;
            Some((
                (after.0 - before.0) as f64 / 1000.0 / n,
                (after.1 - before.1) as f64 / n,
            ))
        })
    })
    .join()
    .ok()
    .flatten()
}

const USAGE: &str =
    "usage: lambda-loop [--deliveries 2000] [--processes 1] [--kinds K,...] [--binary PATH] [--bare PATH] [--tls]
  --deliveries N    deliveries of each kind
  --kinds K,...     only these kinds after the floor: rejected, new, duplicate, credit, ignored,
                    bridged, thin (default all); with two --deliveries counts under a profiler,
                    the difference is one kind's own cost
  --processes N     copies of each function run side by side, one emulator each
  --binary PATH     the function to measure (default target/release/stripe-webhook), e.g. a
                    build with symbols, or a script that runs it under a profiler
  --bare PATH       the floor's function (default target/release/bare-runtime), the same way
  --tls             the function's database connection over verified TLS (sslmode=require)";

/// What to run.
struct Args {
    deliveries: u64,
    processes: u64,
    kinds: Vec<Kind>,
    binary: Option<std::path::PathBuf>,
    bare: Option<std::path::PathBuf>,
    tls: bool,
}

/// The arguments, or the message to print and the exit code.
fn args() -> Result<Args, (String, u8)> {
    use lexopt::prelude::*;
    let (mut deliveries, mut binary, mut bare, mut processes) = (2000, None, None, 1);
    let mut tls = false;
    let mut kinds = Kind::MEASURED.to_vec();
    let mut parser = lexopt::Parser::from_env();
    let bad = |e: lexopt::Error| (format!("lambda-loop: {e}\n{USAGE}"), 2);
    while let Some(arg) = parser.next().map_err(bad)? {
        match arg {
            Long("deliveries") => {
                deliveries = parser.value().map_err(bad)?.parse().map_err(bad)?;
            }
            Long("processes") => {
                processes = parser.value().map_err(bad)?.parse().map_err(bad)?;
            }
            Long("kinds") => {
                let list = parser.value().map_err(bad)?;
                let list = list.to_string_lossy();
                kinds = list
                    .split(',')
                    .map(|key| {
                        Kind::MEASURED
                            .into_iter()
                            .find(|k| k.key() == key)
                            .ok_or_else(|| (format!("lambda-loop: no kind {key:?}\n{USAGE}"), 2))
                    })
                    .collect::<Result<_, _>>()?;
            }
            Long("binary") => binary = Some(parser.value().map_err(bad)?.into()),
            Long("bare") => bare = Some(parser.value().map_err(bad)?.into()),
            Long("tls") => tls = true,
            Short('h') | Long("help") => return Err((USAGE.to_owned(), 0)),
            other => return Err(bad(other.unexpected())),
        }
    }
    Ok(Args {
        deliveries,
        processes: processes.max(1),
        kinds,
        binary,
        bare,
        tls,
    })
}

/// The invoice every thin delivery names, served by the stand-in of Stripe's API.
const THIN_INVOICE: &str = "in_thin_loop";
/// The key the Stripe function sends the stand-in.
const THIN_KEY: &str = "rk_test_lambda_loop";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    /// The bare runtime's fixed answer to the rejected delivery's event.
    Floor,
    Rejected,
    NewCheckout,
    Duplicate,
    Credit,
    Ignored,
    /// An `invoice.paid` credit as a record of the event queue (EventBridge's path).
    Bridged,
    /// A thin `v1.invoice.paid` by webhook: its invoice read from Stripe's API (a stand-in on
    /// loopback, plain HTTP) before the claim, then the same credit.
    Thin,
}

impl Kind {
    /// Every kind measured against the floor, in the order the table lists them.
    const MEASURED: [Kind; 7] = [
        Kind::Rejected,
        Kind::NewCheckout,
        Kind::Duplicate,
        Kind::Credit,
        Kind::Ignored,
        Kind::Bridged,
        Kind::Thin,
    ];

    /// The kind's name in `--kinds`.
    fn key(self) -> &'static str {
        match self {
            Kind::Floor => "floor",
            Kind::Rejected => "rejected",
            Kind::NewCheckout => "new",
            Kind::Duplicate => "duplicate",
            Kind::Credit => "credit",
            Kind::Ignored => "ignored",
            Kind::Bridged => "bridged",
            Kind::Thin => "thin",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Floor => "bare lambda_runtime, a fixed 400 (the floor)",
            Kind::Rejected => "rejected (bad signature)",
            Kind::NewCheckout => "new checkout (claim, customer, outbox)",
            Kind::Duplicate => "duplicate",
            Kind::Credit => "invoice.paid (credit)",
            Kind::Ignored => "ignored type",
            Kind::Bridged => "invoice.paid through EventBridge (credit, a queue record)",
            Kind::Thin => "thin v1.invoice.paid (a GET of the invoice, then the credit)",
        }
    }

    /// The event of delivery `n` and what its answer must hold.
    fn delivery(self, n: u64) -> (String, &'static [u8]) {
        const OK: &[u8] = b"\"statusCode\":200";
        match self {
            Kind::Floor | Kind::Rejected => (
                stripe_event(&invoice(&format!("evt_r_{n}"), "cus_r", 1), false),
                b"\"statusCode\":400",
            ),
            Kind::NewCheckout => (
                stripe_event(
                    &checkout(&format!("evt_c_{n}"), &format!("cus_c_{n}")),
                    true,
                ),
                OK,
            ),
            // Every copy of one event that a first delivery (below) already claimed.
            Kind::Duplicate => (stripe_event(&invoice("evt_dup", "cus_dup", 1), true), OK),
            Kind::Credit => (
                stripe_event(&invoice(&format!("evt_i_{n}"), "cus_i", 1), true),
                OK,
            ),
            Kind::Ignored => {
                let body =
                    serde_json::to_vec(&json!({"id": format!("evt_x_{n}"), "object": "event",
                    "type": "charge.refunded", "created": 1, "data": {"object": {"id": "ch_1"}}}))
                    .unwrap_or_default();
                (stripe_event(&body, true), OK)
            }
            Kind::Bridged => {
                let detail: serde_json::Value =
                    serde_json::from_slice(&invoice(&format!("evt_b_{n}"), "cus_b", 1))
                        .unwrap_or_default();
                // The envelope alone: `received` puts it on the event queue and hands over
                // the record SQS gives back.
                let envelope = json!({"version": "0", "id": format!("eb-{n}"),
                    "detail-type": "invoice.paid", "source": claimonce_bench::EVENT_SOURCE,
                    "account": MOTO_ACCOUNT, "time": "2026-12-02T10:00:00Z",
                    "region": "us-east-1", "resources": [], "detail": detail});
                (envelope.to_string(), BATCH_OK)
            }
            Kind::Thin => {
                let body = serde_json::to_vec(&json!({"id": format!("evt_t_{n}"),
                    "object": "v2.core.event", "type": "v1.invoice.paid", "livemode": false,
                    "created": "2026-12-02T10:00:00.000Z", "context": null,
                    "related_object": {"id": THIN_INVOICE, "type": "invoice",
                        "url": format!("/v1/invoices/{THIN_INVOICE}")}}))
                .unwrap_or_default();
                (stripe_event(&body, true), OK)
            }
        }
    }
}

/// What a batch answer with no failed record holds.
const BATCH_OK: &[u8] = b"\"batchItemFailures\":[]";

/// The account moto's queues are in.
const MOTO_ACCOUNT: &str = "123456789012";

/// Each EventBridge envelope of `events` put on the event queue and received from it, as the
/// one record of an SQS event, as Lambda's event source mapping hands it over: the function
/// proves each with the receipt handle SQS issued (one ChangeMessageVisibilityBatch per batch).
async fn received(
    queues: &claimonce_local::bridge::EventQueues,
    events: Vec<(String, &'static [u8])>,
) -> Result<Vec<(String, &'static [u8])>, String> {
    let mut records = Vec::with_capacity(events.len());
    for chunk in events.chunks(10) {
        let mut ids = Vec::with_capacity(chunk.len());
        for (envelope, _) in chunk {
            let envelope: serde_json::Value =
                serde_json::from_str(envelope).map_err(|e| e.to_string())?;
            ids.push(queues.send(&queues.url, &envelope).await?);
        }
        for message in queues.receive(&queues.url, &ids).await? {
            let event = claimonce_local::spill::sqs_event(&queues.url, &[message]);
            records.push((event.to_string(), BATCH_OK));
        }
    }
    Ok(records)
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let Args {
        deliveries,
        processes,
        kinds,
        binary,
        bare,
        tls,
    } = match args() {
        Ok(a) => a,
        Err(stop) => return claimonce_bench::exit_with(stop),
    };
    let root = claimonce_local::functions::workspace_root();
    let binary = binary.unwrap_or_else(|| root.join("target/release/stripe-webhook"));
    let bare = bare.unwrap_or_else(|| root.join("target/release/bare-runtime"));
    if !binary.exists() || !bare.exists() {
        eprintln!(
            "lambda-loop: build them first, each alone: cargo build --release -p stripe-webhook; cargo build --release -p claimonce-bench"
        );
        return std::process::ExitCode::FAILURE;
    }
    // Its own directory per run: a server of the previous run may still be going away.
    let dir = root.join(format!(
        "target/claimonce-lambda-loop-{}",
        std::process::id()
    ));
    // The server, the function's URL and root certificate, and a plain URL for the bare
    // round trips.
    let (pg, url, root_cert, plain_url) = if tls {
        let (server, _admin) = claimonce_tests::tls::TlsServer::migrated().await;
        let url = server.url("localhost", Some("require"));
        let plain = server.url("127.0.0.1", Some("disable"));
        let ca = server.ca.to_string_lossy().into_owned();
        (server.server, url, Some(ca), plain)
    } else {
        match migrated_postgres(&dir).await {
            Ok((pg, url)) => (pg, url.clone(), None, url),
            Err(e) => {
                eprintln!("lambda-loop: {e}");
                return std::process::ExitCode::FAILURE;
            }
        }
    };

    let floor = Fleet::start("bare-runtime", processes, |api| {
        api.command(&bare, &[])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("spawn the bare runtime")
    })
    .await;
    // Stripe's API for the thin deliveries: the invoice as `GET /v1/invoices/{id}` returns it.
    let stripe_api = claimonce_tests::senders::StripeApi::start(THIN_KEY, 100, None).await;
    stripe_api.put_object(
        &format!("/v1/invoices/{THIN_INVOICE}"),
        json!({"id": THIN_INVOICE, "object": "invoice", "customer": "cus_t", "amount_paid": 1,
               "amount_due": 1, "status": "paid"}),
    );
    // With the bridged row, it takes EventBridge events too (shared/src/bridge.rs), from an event
    // queue in moto's SQS, as a deployment with StripeEventBusName does; without it, no queue
    // is made and the function is given none (so a build from before the queue's proof runs).
    let queues = if kinds.contains(&Kind::Bridged) {
        let made = match claimonce_local::moto::start().await {
            Ok(moto) => {
                claimonce_local::bridge::EventQueues::create(&moto, "lambda-loop", 900).await
            }
            Err(e) => Err(e),
        };
        match made {
            Ok(queues) => Some(queues),
            Err(e) => {
                eprintln!("lambda-loop: the event queue in moto's SQS: {e}");
                return std::process::ExitCode::FAILURE;
            }
        }
    } else {
        None
    };
    let bridge = queues
        .as_ref()
        .map(|q| q.function_env("stripe", claimonce_bench::EVENT_SOURCE))
        .unwrap_or_default();
    let stripe = Fleet::start("stripe-webhook", processes, |api| {
        let mut env = vec![
            ("STRIPE_API_KEY", THIN_KEY),
            ("STRIPE_API_BASE", stripe_api.url.as_str()),
        ];
        env.extend(bridge.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        env.extend(root_cert.as_deref().map(|ca| ("PGSSLROOTCERT", ca)));
        claimonce_bench::spawn_stripe(api, &binary, &url, &env)
    })
    .await;
    if floor.pids.len() as u64 != processes || stripe.pids.len() as u64 != processes {
        eprintln!("lambda-loop: a function did not start");
        return std::process::ExitCode::FAILURE;
    }
    // Warm up: the connections, the first-use allocations, and the duplicate's first copy.
    let warm: Vec<_> = (0..200 * processes)
        .map(|n| Kind::Credit.delivery(1_000_000 + n))
        .collect();
    let mut failures = stripe.send(warm).await;
    failures += floor
        .send(
            (0..50 * processes)
                .map(|n| Kind::Floor.delivery(n))
                .collect(),
        )
        .await;
    failures += stripe.send(vec![Kind::Duplicate.delivery(0)]).await;

    println!(
        "function CPU and wakeups per delivery, {deliveries} deliveries each, {processes} process(es) of each function side by side under the Runtime API emulator:\n"
    );
    println!(
        "| delivery | function CPU µs | voluntary wakeups | CPU beyond a rejected one (µs) | × the floor |"
    );
    println!("|---|---|---|---|---|");
    let (mut floor_us, mut rejected_us) = (0.0, None);
    for kind in std::iter::once(Kind::Floor).chain(kinds) {
        let fleet = if kind == Kind::Floor { &floor } else { &stripe };
        // Built before the clock starts: only the function's side is measured anyway, but
        // the emulator shares the machine.
        let mut events: Vec<(String, &'static [u8])> =
            (0..deliveries).map(|n| kind.delivery(n)).collect();
        if let (Kind::Bridged, Some(queues)) = (kind, &queues) {
            events = match received(queues, events).await {
                Ok(records) => records,
                Err(e) => {
                    eprintln!("lambda-loop: the event queue: {e}");
                    return std::process::ExitCode::FAILURE;
                }
            };
        }
        let before = fleet.usage();
        failures += fleet.send(events).await;
        let after = fleet.usage();
        let n = deliveries.max(1) as f64;
        let cpu_us = (after.0 - before.0) as f64 / 1000.0 / n;
        let wakeups = (after.1 - before.1) as f64 / n;
        match kind {
            Kind::Floor => floor_us = cpu_us,
            Kind::Rejected => rejected_us = Some(cpu_us),
            _ => {}
        }
        let beyond = match (kind, rejected_us) {
            (Kind::Floor | Kind::Rejected, _) | (_, None) => "—".to_owned(),
            (_, Some(rejected)) => format!("{:.1}", cpu_us - rejected),
        };
        println!(
            "| {} | {cpu_us:.1} | {wakeups:.2} | {beyond} | {:.2} |",
            kind.name(),
            cpu_us / floor_us.max(f64::MIN_POSITIVE)
        );
    }
    floor.stop().await;
    stripe.stop().await;
    // The database part's floor, with the functions stopped: the machine as quiet as for them.
    match tokio::task::spawn_blocking(move || bare_round_trip(plain_url, deliveries)).await {
        Ok(Some((cpu_us, wakeups))) => println!(
            "| one round trip of tokio-postgres alone (`SELECT 1`; the database part's floor) | {cpu_us:.1} | {wakeups:.2} | — | {:.2} |",
            cpu_us / floor_us.max(f64::MIN_POSITIVE)
        ),
        _ => {
            eprintln!("lambda-loop: the bare round trips failed");
            failures += 1;
        }
    }
    let _ = tokio::task::spawn_blocking(move || pg.stop()).await;
    let _ = std::fs::remove_dir_all(&dir);
    if failures > 0 {
        eprintln!("lambda-loop: {failures} deliveries did not get the status expected");
        return std::process::ExitCode::FAILURE;
    }
    std::process::ExitCode::SUCCESS
}
