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
//! ```text
//! cargo build --release -p stripe-webhook
//! cargo run --release -p claimonce-bench --bin lambda-loop -- [--deliveries 2000] [--binary PATH]
//! ```

use std::time::Duration;

use claimonce_bench::{checkout, invoice, migrated_postgres, stripe_event};
use claimonce_local::runtime_api::{Outcome, RuntimeApi};
use serde_json::json;

/// (run time in ns, voluntary context switches) of every thread of process `pid`.
fn usage(pid: u32) -> (u64, u64) {
    let mut total = (0, 0);
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return total;
    };
    for task in tasks.flatten() {
        let path = task.path();
        let ns = std::fs::read_to_string(path.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0);
        let switches = std::fs::read_to_string(path.join("status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))?
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .unwrap_or(0);
        total.0 += ns;
        total.1 += switches;
    }
    total
}

const USAGE: &str = "usage: lambda-loop [--deliveries 2000] [--binary PATH]
  --deliveries N    deliveries of each kind
  --binary PATH     the function to measure (default target/release/stripe-webhook), e.g. a
                    build with symbols for a profiler";

/// (deliveries, binary), or the message to print and the exit code.
fn args() -> Result<(u64, Option<std::path::PathBuf>), (String, u8)> {
    use lexopt::prelude::*;
    let (mut deliveries, mut binary) = (2000, None);
    let mut parser = lexopt::Parser::from_env();
    let bad = |e: lexopt::Error| (format!("lambda-loop: {e}\n{USAGE}"), 2);
    while let Some(arg) = parser.next().map_err(bad)? {
        match arg {
            Long("deliveries") => {
                deliveries = parser.value().map_err(bad)?.parse().map_err(bad)?;
            }
            Long("binary") => binary = Some(parser.value().map_err(bad)?.into()),
            Short('h') | Long("help") => return Err((USAGE.to_owned(), 0)),
            other => return Err(bad(other.unexpected())),
        }
    }
    Ok((deliveries, binary))
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Rejected,
    NewCheckout,
    Duplicate,
    Credit,
    Ignored,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Rejected => "rejected (bad signature)",
            Kind::NewCheckout => "new checkout (claim, customer, outbox)",
            Kind::Duplicate => "duplicate",
            Kind::Credit => "invoice.paid (credit)",
            Kind::Ignored => "ignored type",
        }
    }

    /// The event of delivery `n` and the status code it must get.
    fn delivery(self, n: u64) -> (String, &'static [u8]) {
        match self {
            Kind::Rejected => (
                stripe_event(&invoice(&format!("evt_r_{n}"), "cus_r", 1), false),
                b"400",
            ),
            Kind::NewCheckout => (
                stripe_event(
                    &checkout(&format!("evt_c_{n}"), &format!("cus_c_{n}")),
                    true,
                ),
                b"200",
            ),
            // Every copy of one event that a first delivery (below) already claimed.
            Kind::Duplicate => (
                stripe_event(&invoice("evt_dup", "cus_dup", 1), true),
                b"200",
            ),
            Kind::Credit => (
                stripe_event(&invoice(&format!("evt_i_{n}"), "cus_i", 1), true),
                b"200",
            ),
            Kind::Ignored => {
                let body =
                    serde_json::to_vec(&json!({"id": format!("evt_x_{n}"), "object": "event",
                    "type": "charge.refunded", "created": 1, "data": {"object": {"id": "ch_1"}}}))
                    .unwrap_or_default();
                (stripe_event(&body, true), b"200")
            }
        }
    }
}

fn status_is(
    outcome: &Result<Outcome, claimonce_local::runtime_api::InvokeError>,
    code: &[u8],
) -> bool {
    let needle = [b"\"statusCode\":".as_slice(), code].concat();
    matches!(outcome, Ok(Outcome::Response(p)) if p.windows(needle.len()).any(|w| w == needle.as_slice()))
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let (deliveries, binary) = match args() {
        Ok(a) => a,
        Err(stop) => return claimonce_bench::exit_with(stop),
    };
    let root = claimonce_local::functions::workspace_root();
    let binary = binary.unwrap_or_else(|| root.join("target/release/stripe-webhook"));
    if !binary.exists() {
        eprintln!("lambda-loop: build it first: cargo build --release -p stripe-webhook");
        return std::process::ExitCode::FAILURE;
    }
    // Its own directory per run: a server of the previous run may still be going away.
    let dir = root.join(format!(
        "target/claimonce-lambda-loop-{}",
        std::process::id()
    ));
    let (pg, url) = match migrated_postgres(&dir).await {
        Ok(started) => started,
        Err(e) => {
            eprintln!("lambda-loop: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };

    let api = RuntimeApi::start("stripe-webhook").await.expect("api");
    let mut child = claimonce_bench::spawn_stripe(&api, &binary, &url);
    let Some(pid) = child.id() else {
        eprintln!("lambda-loop: the function did not start");
        return std::process::ExitCode::FAILURE;
    };
    let mut failures = 0;
    // Warm up: the connection, the first-use allocations, and the duplicate's first copy.
    for n in 0..200 {
        let (e, _) = Kind::Credit.delivery(1_000_000 + n);
        let _ = api.invoke(e, Duration::from_secs(10)).await;
    }
    let (first_dup, _) = Kind::Duplicate.delivery(0);
    if !status_is(
        &api.invoke(first_dup, Duration::from_secs(10)).await,
        b"200",
    ) {
        failures += 1;
    }

    println!(
        "function CPU and wakeups per delivery, {deliveries} deliveries each, one at a time under the Runtime API emulator:\n"
    );
    println!("| delivery | function CPU µs | voluntary wakeups | CPU beyond a rejected one (µs) |");
    println!("|---|---|---|---|");
    let mut rejected_us = 0.0;
    for kind in [
        Kind::Rejected,
        Kind::NewCheckout,
        Kind::Duplicate,
        Kind::Credit,
        Kind::Ignored,
    ] {
        // Built before the clock starts: only the function's side is measured anyway, but
        // the emulator shares the machine.
        let events: Vec<(String, &[u8])> = (0..deliveries).map(|n| kind.delivery(n)).collect();
        let before = usage(pid);
        for (e, expected) in events {
            let outcome = api.invoke(e, Duration::from_secs(10)).await;
            if !status_is(&outcome, expected) {
                failures += 1;
            }
        }
        let after = usage(pid);
        let n = deliveries.max(1) as f64;
        let cpu_us = (after.0 - before.0) as f64 / 1000.0 / n;
        let wakeups = (after.1 - before.1) as f64 / n;
        if kind == Kind::Rejected {
            rejected_us = cpu_us;
        }
        println!(
            "| {} | {cpu_us:.1} | {wakeups:.2} | {} |",
            kind.name(),
            if kind == Kind::Rejected {
                "—".to_owned()
            } else {
                format!("{:.1}", cpu_us - rejected_us)
            }
        );
    }
    let _ = child.kill().await;
    let _ = tokio::task::spawn_blocking(move || pg.stop()).await;
    let _ = std::fs::remove_dir_all(&dir);
    if failures > 0 {
        eprintln!("lambda-loop: {failures} deliveries did not get the status expected");
        return std::process::ExitCode::FAILURE;
    }
    std::process::ExitCode::SUCCESS
}
