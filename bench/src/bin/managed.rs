//! Lambda Managed Instances' mode against classic Lambda: one execution environment serving N
//! invocations at once (`AWS_LAMBDA_MAX_CONCURRENCY=N`) beside N classic environments (N
//! processes, one invocation at a time each), the real release binary under the Runtime API
//! emulator, through PgBouncer (RDS Proxy's stand-in), optionally behind a relay that delays
//! each direction by half a stated round trip. N clients keep N deliveries in flight; every
//! delivery is a new checkout (claim, customer, outbox). For each: deliveries per second, the
//! functions' CPU per delivery, the most database connections they held at once, and the p50
//! and p99 latency an invoker saw; and pgbench running the same statement with N clients
//! through the same path, the database's own limit.
//!
//! ```text
//! cargo build --release -p stripe-webhook     # alone: with the bench tools, cargo would give
//! cargo build --release -p claimonce-bench    # it claimonce's `jobs` feature too
//! ./target/release/managed [--deliveries 4000] [--at-once 1,8,32] [--rtt-ms 0] [--binary PATH]
//! ```

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use claimonce::jobs::CLAIM_FUNCTION;
use claimonce_bench::fleet::{Fleet, connections_to, delaying_relay, status_is};
use claimonce_bench::{checkout, migrated_postgres, stripe_event};
use claimonce_local::pgbouncer::PgBouncer;

struct Args {
    deliveries: u64,
    at_once: Vec<usize>,
    rtt_ms: u64,
    binary: Option<PathBuf>,
}

fn args() -> Result<Args, (String, u8)> {
    use lexopt::prelude::*;
    let usage =
        "usage: managed [--deliveries 4000] [--at-once 1,8,32] [--rtt-ms 0] [--binary PATH]";
    let mut args = Args {
        deliveries: 4000,
        at_once: vec![1, 8, 32],
        rtt_ms: 0,
        binary: None,
    };
    let mut parser = lexopt::Parser::from_env();
    let bad = |e: lexopt::Error| (format!("managed: {e}\n{usage}"), 2);
    while let Some(arg) = parser.next().map_err(bad)? {
        match arg {
            Long("deliveries") => {
                args.deliveries = parser.value().map_err(bad)?.parse().map_err(bad)?
            }
            Long("rtt-ms") => args.rtt_ms = parser.value().map_err(bad)?.parse().map_err(bad)?,
            Long("binary") => args.binary = Some(parser.value().map_err(bad)?.into()),
            Long("at-once") => {
                let list = parser.value().map_err(bad)?.string().map_err(bad)?;
                args.at_once = list
                    .split(',')
                    .map(|n| {
                        n.trim()
                            .parse()
                            .map_err(|_| (format!("managed: --at-once {list}\n{usage}"), 2))
                    })
                    .collect::<Result<_, _>>()?;
            }
            Long("help") => return Err((usage.to_owned(), 0)),
            other => return Err(bad(other.unexpected())),
        }
    }
    Ok(args)
}

/// What one run measured.
struct Measured {
    per_second: f64,
    cpu_us: f64,
    connections: usize,
    p50_ms: f64,
    p99_ms: f64,
    failures: u64,
}

/// `deliveries` new checkouts tagged `tag`, kept `clients` in flight, shared out over the
/// fleet's copies (client `i` invokes copy `i % copies`).
async fn measure(
    fleet: &Fleet,
    clients: usize,
    deliveries: u64,
    tag: &str,
    db_port: u16,
) -> Measured {
    let events: Arc<Vec<String>> = Arc::new(
        (0..deliveries)
            .map(|k| {
                stripe_event(
                    &checkout(&format!("evt_{tag}_{k}"), &format!("cus_{tag}_{k}")),
                    true,
                )
            })
            .collect(),
    );
    let next = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(AtomicU64::new(0));
    // The connections the fleet holds, read every 2 ms while it runs.
    let peak = Arc::new(AtomicUsize::new(0));
    let running = Arc::new(AtomicBool::new(true));
    let watcher = {
        let (peak, running, pids) = (Arc::clone(&peak), Arc::clone(&running), fleet.pids.clone());
        std::thread::spawn(move || {
            while running.load(Ordering::Relaxed) {
                peak.fetch_max(connections_to(&pids, db_port), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let before = fleet.usage();
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for client in 0..clients {
        let api = Arc::clone(&fleet.apis[client % fleet.apis.len()]);
        let (events, next, failures) = (
            Arc::clone(&events),
            Arc::clone(&next),
            Arc::clone(&failures),
        );
        tasks.spawn(async move {
            let mut latencies = Vec::new();
            while let Some(event) = events.get(next.fetch_add(1, Ordering::Relaxed)) {
                let sent = Instant::now();
                let answered = api.invoke(event.clone(), Duration::from_secs(30)).await;
                latencies.push(sent.elapsed());
                if !status_is(&answered, br#"\"disposition\":\"processed\""#) {
                    failures.fetch_add(1, Ordering::Relaxed);
                }
            }
            latencies
        });
    }
    let mut latencies: Vec<Duration> = tasks.join_all().await.into_iter().flatten().collect();
    let elapsed = started.elapsed();
    let after = fleet.usage();
    running.store(false, Ordering::Relaxed);
    let _ = watcher.join();
    latencies.sort_unstable();
    let at = |q: f64| {
        let i = ((latencies.len() as f64 - 1.0) * q).round() as usize;
        latencies.get(i).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    let n = deliveries.max(1) as f64;
    Measured {
        per_second: n / elapsed.as_secs_f64(),
        cpu_us: (after.0 - before.0) as f64 / 1000.0 / n,
        connections: peak.load(Ordering::Relaxed),
        p50_ms: at(0.50),
        p99_ms: at(0.99),
        failures: failures.load(Ordering::Relaxed),
    }
}

/// The delivery's statement for pgbench: event `:id`, suffixed `n` within a pipeline.
fn statement(n: usize) -> String {
    format!(
        "SELECT c.won, c.stored_sha256, CASE WHEN c.won THEN stripe_provision_v2(\
         'cus_pgb_' || :client_id || '_' || :id || '_{n}', 'x@example.com', \
         'pgb_' || :client_id || '_' || :id || '_{n}') END \
         FROM {CLAIM_FUNCTION}('stripe', 'pgb_' || :client_id || '_' || :id || '_{n}', \
         'checkout.session.completed', '\\x00') AS c;\n"
    )
}

/// pgbench's statements per second for the delivery's statement, `clients` at once, through
/// `port`; with `pipelined` above one, each client sends that many statements in one
/// pipeline per transaction: what one connection shared by that many deliveries could carry.
fn pgbench(
    port: u16,
    clients: usize,
    pipelined: usize,
    deliveries: u64,
    dir: &std::path::Path,
) -> Result<f64, String> {
    let script = dir.join("checkout.sql");
    let mut text = "\\set id random(1, 9000000000000000)\n".to_owned();
    if pipelined > 1 {
        text.push_str("\\startpipeline\n");
        text.extend((0..pipelined).map(statement));
        text.push_str("\\endpipeline\n");
    } else {
        text.push_str(&statement(0));
    }
    std::fs::write(&script, text).map_err(|e| e.to_string())?;
    let per_client = (deliveries / (clients * pipelined).max(1) as u64).max(1);
    let output = claimonce_bench::pgbench_at(port)
        .args(["-M", "extended", "-c", &clients.to_string()])
        .args([
            "-j",
            &clients.min(2).to_string(),
            "-t",
            &per_client.to_string(),
            "-f",
        ])
        .arg(&script)
        .arg("postgres")
        .output()
        .map_err(|e| format!("pgbench: {e}"))?;
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines()
        .find_map(|l| {
            l.strip_prefix("tps = ")?
                .split_whitespace()
                .next()?
                .parse::<f64>()
                .ok()
        })
        .map(|tps| tps * pipelined.max(1) as f64)
        .ok_or_else(|| format!("pgbench: {}", String::from_utf8_lossy(&output.stderr)))
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let Args {
        deliveries,
        at_once,
        rtt_ms,
        binary,
    } = match args() {
        Ok(a) => a,
        Err(stop) => return claimonce_bench::exit_with(stop),
    };
    let root = claimonce_local::functions::workspace_root();
    let binary = binary.unwrap_or_else(|| root.join("target/release/stripe-webhook"));
    if !binary.exists() {
        eprintln!(
            "managed: build it first, each alone: cargo build --release -p stripe-webhook; cargo build --release -p claimonce-bench"
        );
        return std::process::ExitCode::FAILURE;
    }
    let dir = root.join(format!("target/claimonce-managed-{}", std::process::id()));
    let (pg, url) = match migrated_postgres(&dir.join("pg")).await {
        Ok(started) => started,
        Err(e) => {
            eprintln!("managed: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let bouncer = match PgBouncer::start(&dir.join("pgbouncer"), pg.port) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("managed: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let port = if rtt_ms == 0 {
        bouncer.port
    } else {
        match delaying_relay(bouncer.port, Duration::from_micros(rtt_ms * 500)).await {
            Ok(port) => port,
            Err(e) => {
                eprintln!("managed: the relay: {e}");
                return std::process::ExitCode::FAILURE;
            }
        }
    };
    let through = url.replace(&format!(":{}/", pg.port), &format!(":{port}/"));
    let path = if rtt_ms == 0 {
        "PgBouncer on loopback".to_owned()
    } else {
        format!("a relay adding {rtt_ms} ms of round trip, then PgBouncer")
    };
    println!("{deliveries} new checkouts per row, through {path}:\n");
    println!(
        "| environments × invocations at once | deliveries/s | function CPU µs per delivery | connections (most at once) | p50 ms | p99 ms | pgbench, same statement and clients (tps) |"
    );
    println!("|---|---|---|---|---|---|---|");
    let mut failures = 0;
    for n in at_once {
        let ceiling =
            pgbench(port, n, 1, deliveries, &dir).map_or_else(|e| e, |tps| format!("{tps:.0}"));
        // One environment, n at once, on n connections and on one; n classic environments.
        let shapes = [
            (format!("1 × {n}"), 1, n, n),
            (format!("1 × {n}, `DB_MAX_CONNECTIONS=1`"), 1, n, 1),
            (format!("{n} × 1"), n, 1, 1),
        ];
        for (i, (row, processes, concurrency, connections)) in shapes.into_iter().enumerate() {
            // At one, the three are the same environment.
            if n == 1 && i > 0 {
                continue;
            }
            let (at_once, most) = (concurrency.to_string(), connections.to_string());
            let fleet = Fleet::start("stripe-webhook", processes as u64, |api| {
                claimonce_bench::spawn_stripe(
                    api,
                    &binary,
                    &through,
                    &[
                        ("AWS_LAMBDA_MAX_CONCURRENCY", at_once.as_str()),
                        ("DB_MAX_CONNECTIONS", most.as_str()),
                    ],
                )
            })
            .await;
            let tag = format!("{processes}_{concurrency}_{connections}");
            // Warm: every connection made, the first allocations done.
            let _ = measure(&fleet, n, 4 * n as u64, &format!("warm_{tag}"), port).await;
            let m = measure(&fleet, n, deliveries, &format!("run_{tag}"), port).await;
            failures += m.failures;
            fleet.stop().await;
            println!(
                "| {row} | {:.0} | {:.1} | {} | {:.2} | {:.2} | {ceiling} |",
                m.per_second, m.cpu_us, m.connections, m.p50_ms, m.p99_ms
            );
        }
    }
    for n in [8, 32] {
        match pgbench(port, 1, n, deliveries, &dir) {
            Ok(per_second) => println!(
                "\npgbench, one client pipelining {n} statements per transaction (what one \
                 connection shared by {n} deliveries could carry at most): {per_second:.0} \
                 statements/s"
            ),
            Err(e) => eprintln!("managed: {e}"),
        }
    }
    let _ = tokio::task::spawn_blocking(move || pg.stop()).await;
    let _ = std::fs::remove_dir_all(&dir);
    if failures > 0 {
        eprintln!("managed: {failures} deliveries were not processed");
        return std::process::ExitCode::FAILURE;
    }
    std::process::ExitCode::SUCCESS
}
