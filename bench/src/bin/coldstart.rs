//! Cold start and memory of the real function binary: process spawn to the first 200 for a
//! new event (the first database connection included), its peak RSS after a run of
//! deliveries, and the binaries' sizes.
//!
//! With `--tls` the database is the tests' TLS PostgreSQL (`claimonce_tests::tls`, a throwaway
//! CA the function is given as `PGSSLROOTCERT`), reached with `sslmode=require`: the first
//! connection then includes a full TLS handshake, as RDS Proxy's does.
//!
//! ```text
//! cargo build --release -p stripe-webhook -p resend-webhook
//! cargo run --release -p claimonce-bench --bin coldstart -- [--runs 11] [--deliveries 500] [--tls]
//! ```

use std::path::PathBuf;
use std::time::{Duration, Instant};

use claimonce_bench::{checkout, migrated_postgres, peak_rss_kib, stripe_event};
use claimonce_local::runtime_api::{Outcome, RuntimeApi};
use claimonce_tests::tls::TlsServer;

const USAGE: &str = "usage: coldstart [--runs 11] [--deliveries 500] [--tls]
  --runs N          cold starts to measure (the median is reported)
  --deliveries N    deliveries after the first cold start, for the peak RSS
  --tls             the database over verified TLS (sslmode=require), not plain TCP";

/// (runs, deliveries, tls), or the message to print and the exit code.
fn args() -> Result<(u64, u64, bool), (String, u8)> {
    use lexopt::prelude::*;
    let (mut runs, mut deliveries, mut tls) = (11, 500, false);
    let mut parser = lexopt::Parser::from_env();
    let bad = |e: lexopt::Error| (format!("coldstart: {e}\n{USAGE}"), 2);
    while let Some(arg) = parser.next().map_err(bad)? {
        match arg {
            Long("runs") => runs = parser.value().map_err(bad)?.parse().map_err(bad)?,
            Long("deliveries") => {
                deliveries = parser.value().map_err(bad)?.parse().map_err(bad)?;
            }
            Long("tls") => tls = true,
            Short('h') | Long("help") => return Err((USAGE.to_owned(), 0)),
            other => return Err(bad(other.unexpected())),
        }
    }
    Ok((runs, deliveries, tls))
}

fn ok(outcome: Result<Outcome, claimonce_local::runtime_api::InvokeError>) -> bool {
    matches!(outcome, Ok(Outcome::Response(p)) if p.windows(14).any(|w| w == b"\"statusCode\":2"))
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let (runs, deliveries, tls) = match args() {
        Ok(a) => a,
        Err(stop) => return claimonce_bench::exit_with(stop),
    };
    let root = claimonce_local::functions::workspace_root();
    let release = root.join("target/release");
    let binary = release.join("stripe-webhook");
    if !binary.exists() {
        eprintln!(
            "coldstart: build it first: cargo build --release -p stripe-webhook -p resend-webhook"
        );
        return std::process::ExitCode::FAILURE;
    }
    // The server, plain or TLS (kept running until the end), the function's URL and its root
    // certificate.
    let (_plain, _tls, url, root_cert) = if tls {
        let (server, _admin) = TlsServer::migrated().await;
        let url = server.url("localhost", Some("require"));
        let ca = server.ca.to_string_lossy().into_owned();
        (None, Some(server), url, Some(ca))
    } else {
        match migrated_postgres(&root.join("target/claimonce-coldstart")).await {
            Ok((pg, url)) => (Some(pg), None, url, None),
            Err(e) => {
                eprintln!("coldstart: {e}");
                return std::process::ExitCode::FAILURE;
            }
        }
    };
    let extra: Vec<(&str, &str)> = root_cert
        .as_deref()
        .map(|ca| ("PGSSLROOTCERT", ca))
        .into_iter()
        .collect();

    let mut cold = Vec::new();
    let mut peak = 0;
    let mut failures = 0;
    for run in 0..runs {
        let api = RuntimeApi::start("stripe-webhook").await.expect("api");
        let first = stripe_event(
            &checkout(&format!("evt_cold_{run}"), &format!("cus_cold_{run}")),
            true,
        );
        let started = Instant::now();
        let mut child = claimonce_bench::spawn_stripe(&api, &binary, &url, &extra);
        let answered = api.invoke(first, Duration::from_secs(10)).await;
        let took = started.elapsed();
        if !ok(answered) {
            failures += 1;
        }
        cold.push(took);
        // The first run also measures memory over a stretch of deliveries.
        if run == 0 {
            for n in 0..deliveries {
                let body = checkout(&format!("evt_rss_{n}"), &format!("cus_rss_{}", n % 50));
                if !ok(api
                    .invoke(stripe_event(&body, true), Duration::from_secs(10))
                    .await)
                {
                    failures += 1;
                }
            }
        }
        if let Some(pid) = child.id() {
            peak = peak.max(peak_rss_kib(&pid.to_string()));
        }
        let _ = child.kill().await;
    }
    cold.sort();
    let ms = |d: &Duration| d.as_secs_f64() * 1000.0;
    let median = cold.get(cold.len() / 2).map_or(0.0, ms);
    println!(
        "cold start (spawn to first 200, first connection included{}), {runs} runs: median {median:.1} ms, min {:.1} ms, max {:.1} ms",
        if tls { ", over TLS" } else { "" },
        cold.first().map_or(0.0, ms),
        cold.last().map_or(0.0, ms)
    );
    println!(
        "peak RSS of one function process after {deliveries} deliveries: {peak} KiB ({:.1} MiB)",
        peak as f64 / 1024.0
    );
    for name in ["stripe-webhook", "resend-webhook"] {
        let path: PathBuf = release.join(name);
        if let Ok(meta) = std::fs::metadata(&path) {
            println!(
                "{name}: {} bytes ({:.2} MiB), x86_64, release, stripped",
                meta.len(),
                meta.len() as f64 / 1048576.0
            );
        }
    }
    if failures > 0 {
        eprintln!("coldstart: {failures} deliveries did not answer 200");
        return std::process::ExitCode::FAILURE;
    }
    std::process::ExitCode::SUCCESS
}
