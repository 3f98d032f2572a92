//! The load benchmark: the real handler path (`lambda::handle_event`, from the raw API
//! Gateway event to the response payload) in N execution environments, each with its own
//! connection, dealt over `--threads` OS threads (each a current-thread runtime, as a Lambda
//! process runs) as pgbench deals its clients over its `-j` threads, against a private
//! PostgreSQL with fsync and synchronous_commit on; beside it, pgbench running the same SQL at
//! the same client count and thread count against the same server: the database's own
//! ceiling. After every run the invariants are checked.
//!
//! ```text
//! cargo run --release -p claimonce-bench --bin load -- [--seconds 10] [--clients 1,8,32,64]
//!     [--modes unique,dup,dup-apart,credit,naive] [--repeat 1] [--threads 2] [--quick]
//! ```

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use claimonce::db::{Database, Settings, Timeouts};
use claimonce::jobs::CLAIM_FUNCTION;
use claimonce::log::Log;
use claimonce::{Limits, Receiver};
use claimonce_bench::{
    SECRET, checkout, children_cpu_ms, cpu_ms, invoice, peak_rss_kib, postgres_cpu_ms,
    postmaster_pid, settle, stripe_event,
};
use claimonce_local::postgres::{Options, Postgres};
use stripe_webhook::Stripe;
use tokio_postgres::{Client, NoTls};

const HOT_CUSTOMERS: u64 = 8;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    /// Every delivery a new checkout.session.completed.
    Unique,
    /// Each event delivered 4 times back to back.
    Dup,
    /// Each event delivered 4 times, the copies 64 deliveries apart: more than the clients
    /// in flight, so no copy waits for another. Against `dup`, it prices that wait.
    DupApart,
    /// invoice.paid on a few hot customers.
    Credit,
    /// The naive shape: transaction(), then query()/execute() with named statements.
    Naive,
}

impl Mode {
    fn parse(s: &str) -> Option<Self> {
        match s {
            "unique" => Some(Mode::Unique),
            "dup" => Some(Mode::Dup),
            "dup-apart" => Some(Mode::DupApart),
            "credit" => Some(Mode::Credit),
            "naive" => Some(Mode::Naive),
            _ => None,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Mode::Unique => "unique",
            Mode::Dup => "dup",
            Mode::DupApart => "dup-apart",
            Mode::Credit => "credit",
            Mode::Naive => "naive (unique)",
        }
    }
}

struct Args {
    seconds: u64,
    /// Every row this many times, each handler run next to its own pgbench runs: the machine's
    /// drift between runs shows as the spread of the ratios.
    repeat: u32,
    clients: Vec<usize>,
    modes: Vec<Mode>,
    /// OS threads for the environments, and pgbench's `-j` (at most the client count).
    threads: usize,
}

const USAGE: &str = "usage: load [--seconds 10] [--clients 1,8,32,64]
            [--modes unique,dup,dup-apart,credit,naive] [--repeat 1] [--threads 2] [--quick]
  --seconds N       length of every run (handler and pgbench alike)
  --clients LIST    client counts, comma-separated
  --modes LIST      unique, dup, dup-apart, credit, naive, comma-separated
  --repeat N        every row this many times, to show the machine's drift
  --threads N       OS threads the environments share, and pgbench's -j (at most the clients)
  --quick           1 s runs at 1 and 8 clients (CI's smoke run)
The full default run takes about 14 minutes.";

/// The arguments (after the program's name), or the message to print and the exit code (0 for
/// --help).
fn args(argv: impl IntoIterator<Item = String>) -> Result<Args, (String, u8)> {
    use lexopt::prelude::*;
    let bad = |e: String| (format!("load: {e}\n{USAGE}"), 2);
    let lex = |e: lexopt::Error| bad(e.to_string());
    let (mut seconds, mut repeat, mut clients, mut modes, mut quick) = (None, 1, None, None, false);
    let mut threads = 2;
    let mut parser = lexopt::Parser::from_args(argv);
    while let Some(arg) = parser.next().map_err(lex)? {
        match arg {
            Long("seconds") => seconds = Some(parser.value().map_err(lex)?.parse().map_err(lex)?),
            Long("repeat") => repeat = parser.value().map_err(lex)?.parse().map_err(lex)?,
            Long("threads") => threads = parser.value().map_err(lex)?.parse().map_err(lex)?,
            Long("clients") => clients = Some(parser.value().map_err(lex)?.string().map_err(lex)?),
            Long("modes") => modes = Some(parser.value().map_err(lex)?.string().map_err(lex)?),
            Long("quick") => quick = true,
            Short('h') | Long("help") => return Err((USAGE.to_owned(), 0)),
            other => return Err(lex(other.unexpected())),
        }
    }
    let clients = clients
        .unwrap_or_else(|| if quick { "1,8" } else { "1,8,32,64" }.to_owned())
        .split(',')
        .map(|c| {
            c.parse()
                .map_err(|_| bad(format!("--clients: {c:?} is not a number")))
        })
        .collect::<Result<Vec<usize>, _>>()?;
    let modes = modes
        .unwrap_or_else(|| "unique,dup,dup-apart,credit,naive".to_owned())
        .split(',')
        .map(|m| Mode::parse(m).ok_or_else(|| bad(format!("--modes: unknown mode {m:?}"))))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Args {
        seconds: seconds.unwrap_or(if quick { 1 } else { 10 }),
        repeat,
        clients,
        modes,
        threads,
    })
}

/// The body of delivery number `n` in `mode`, and the amount it credits.
fn delivery(mode: Mode, run: &str, n: u64) -> (Vec<u8>, i64) {
    match mode {
        Mode::Unique | Mode::Naive => (
            checkout(&format!("evt_{run}_{n}"), &format!("cus_{run}_{n}")),
            0,
        ),
        Mode::Dup | Mode::DupApart => {
            let e = if mode == Mode::Dup {
                n / 4
            } else {
                (n / 256) * 64 + n % 64
            };
            (
                invoice(
                    &format!("evt_{run}_{e}"),
                    &format!("cus_{run}_{}", e % HOT_CUSTOMERS),
                    100,
                ),
                100,
            )
        }
        Mode::Credit => (
            invoice(
                &format!("evt_{run}_{n}"),
                &format!("cus_hot_{}", n % HOT_CUSTOMERS),
                100,
            ),
            100,
        ),
    }
}

struct Measured {
    deliveries: u64,
    processed: u64,
    errors: u64,
    seconds: f64,
    latencies_us: Vec<u32>,
    /// (user, system) CPU of the process during the run.
    cpu_ms: (f64, f64),
    credited: i64,
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    f64::from(sorted.get(i).copied().unwrap_or(0)) / 1000.0
}

async fn connect(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.expect("connect");
    tokio::spawn(connection);
    client
}

const NAIVE_CLAIM: &str = "INSERT INTO processed_events (provider, event_id, event_type, payload_sha256) \
     VALUES ($1, $2, $3, $4) ON CONFLICT (provider, event_id) DO NOTHING RETURNING id";
const NAIVE_EFFECT: &str = "INSERT INTO customers (stripe_customer_id, email) VALUES ($1, $2) \
     ON CONFLICT (stripe_customer_id) DO UPDATE SET email = COALESCE(EXCLUDED.email, customers.email), updated_at = now()";

/// Every delivery of a run, built and signed before the clock starts, so the measured CPU is
/// the handlers' (and tokio-postgres'), not the load generator's.
fn prepare(mode: Mode, run: &str, count: u64) -> Vec<(String, Vec<u8>, i64)> {
    (0..count)
        .map(|n| {
            let (body, amount) = delivery(mode, run, n);
            (stripe_event(&body, true), body, amount)
        })
        .collect()
}

/// The client's bounds; the server's are in the functions and the login role.
fn timeouts() -> Timeouts {
    Timeouts::new(Duration::from_secs(5), Duration::from_secs(10))
}

/// How the handler began every transaction before deliveries became one statement: the
/// bounds sent as `SET LOCAL` on the wire. pgbench replays that shape for comparison.
const TWO_FLIGHT_BEGIN: &str = "BEGIN; SET LOCAL statement_timeout = 8000; \
    SET LOCAL lock_timeout = 8000; SET LOCAL idle_in_transaction_session_timeout = 8000";

/// What one environment measured: its latencies, and its processed, failed and credited counts.
type Environment = (Vec<u32>, u64, u64, i64);

/// One execution environment: its own receiver and connection, taking deliveries from the
/// shared pool until the deadline.
async fn environment(
    mode: Mode,
    url: String,
    run: String,
    prepared: Arc<Vec<(String, Vec<u8>, i64)>>,
    next: Arc<AtomicU64>,
    deadline: Instant,
) -> Environment {
    let mut latencies = Vec::new();
    let (mut processed, mut errors, mut credited) = (0_u64, 0_u64, 0_i64);
    if mode == Mode::Naive {
        let mut client = connect(&url).await;
        while Instant::now() < deadline {
            let n = next.fetch_add(1, Ordering::Relaxed);
            let Some((_, body, _)) = prepared.get(usize::try_from(n).unwrap_or(usize::MAX)) else {
                break;
            };
            let t0 = Instant::now();
            let parsed = stripe_webhook::parse_event(body).expect("event");
            let hash: Vec<u8> = vec![0; 32];
            let tx = client.transaction().await.expect("begin");
            let won = !tx
                .query(
                    NAIVE_CLAIM,
                    &[
                        &"stripe",
                        &parsed.event_id.as_str(),
                        &parsed.event_type,
                        &hash,
                    ],
                )
                .await
                .expect("claim")
                .is_empty();
            if won {
                tx.execute(
                    NAIVE_EFFECT,
                    &[&format!("cus_{run}_{n}"), &"jenny.rosen@example.com"],
                )
                .await
                .expect("effect");
                processed += 1;
            }
            tx.commit().await.expect("commit");
            latencies.push(u32::try_from(t0.elapsed().as_micros()).unwrap_or(u32::MAX));
        }
    } else {
        let settings = Settings::from_url(&url, None, timeouts()).expect("settings");
        let stripe = Stripe::new(&[SECRET], 300).expect("secret");
        let receiver = Receiver::new(
            stripe,
            Database::new(settings),
            Limits::default(),
            Log::discard(),
        );
        receiver.warm_up().await;
        while Instant::now() < deadline {
            let n = next.fetch_add(1, Ordering::Relaxed);
            let Some((raw, _, amount)) = prepared.get(usize::try_from(n).unwrap_or(usize::MAX))
            else {
                break;
            };
            let amount = *amount;
            let t0 = Instant::now();
            let payload = claimonce::lambda::handle_event(&receiver, raw).await;
            // What the runtime sends back to Lambda: the payload, serialised.
            let sent = serde_json::to_vec(&payload).map_or(0, |v| v.len());
            latencies.push(u32::try_from(t0.elapsed().as_micros()).unwrap_or(u32::MAX));
            // The body is exactly what the response policy writes; compare, not parse.
            let processed_body =
                &payload.response().body()[..] == br#"{"disposition":"processed"}"#;
            match (
                Some(u64::from(payload.status())).filter(|_| sent > 0),
                processed_body,
            ) {
                (Some(200), true) => {
                    processed += 1;
                    credited += amount;
                }
                (Some(200), _) => {}
                _ => errors += 1,
            }
        }
    }
    (latencies, processed, errors, credited)
}

async fn run_handlers(
    mode: Mode,
    url: &str,
    clients: usize,
    threads: usize,
    seconds: u64,
    run: &str,
) -> Measured {
    // Enough for ~20k deliveries/s; a run that drains the pool stops early and says so.
    let prepared = Arc::new(prepare(mode, run, seconds * 20_000));
    let next = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let cpu_before = cpu_ms();
    let started = Instant::now();
    // The environments share `threads` OS threads (1 to `clients`), each a current-thread
    // runtime as a Lambda process runs, dealt out round robin: as pgbench deals its clients
    // over its `-j` threads.
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let share = clients / threads + usize::from(t < clients % threads);
            let (url, run) = (url.to_owned(), run.to_owned());
            let (prepared, next) = (Arc::clone(&prepared), Arc::clone(&next));
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                runtime.block_on(async move {
                    let tasks: Vec<_> = (0..share)
                        .map(|_| {
                            tokio::spawn(environment(
                                mode,
                                url.clone(),
                                run.clone(),
                                Arc::clone(&prepared),
                                Arc::clone(&next),
                                deadline,
                            ))
                        })
                        .collect();
                    let mut measured = Vec::with_capacity(share);
                    for task in tasks {
                        measured.push(task.await.expect("environment"));
                    }
                    measured
                })
            })
        })
        .collect();
    let environments = tokio::task::spawn_blocking(move || {
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("worker thread"))
            .collect::<Vec<Environment>>()
    })
    .await
    .expect("workers");
    let mut measured = Measured {
        deliveries: 0,
        processed: 0,
        errors: 0,
        seconds: 0.0,
        latencies_us: Vec::new(),
        cpu_ms: (0.0, 0.0),
        credited: 0,
    };
    for (latencies, processed, errors, credited) in environments {
        measured.deliveries += latencies.len() as u64;
        measured.latencies_us.extend(latencies);
        measured.processed += processed;
        measured.errors += errors;
        measured.credited += credited;
    }
    measured.seconds = started.elapsed().as_secs_f64();
    if next.load(Ordering::Relaxed) >= prepared.len() as u64 {
        eprintln!("load: the prepared deliveries ran out before the deadline");
    }
    let (user, sys) = cpu_ms();
    measured.cpu_ms = (user - cpu_before.0, sys - cpu_before.1);
    measured.latencies_us.sort_unstable();
    measured
}

/// The invariant after a run: one ledger row per processed event, the effects exactly once.
async fn check(mode: Mode, admin: &Client, m: &Measured) -> Result<(), String> {
    let one = |sql: &'static str| async move {
        admin
            .query_one(sql, &[])
            .await
            .map(|r| r.get::<_, i64>(0))
            .map_err(|e| e.to_string())
    };
    let ledger = one("SELECT count(*) FROM processed_events").await?;
    let distinct = one("SELECT count(DISTINCT (provider, event_id)) FROM processed_events").await?;
    let customers = one("SELECT count(*) FROM customers").await?;
    let credit =
        one("SELECT coalesce(sum(credit_balance_cents), 0)::bigint FROM customers").await?;
    let processed = i64::try_from(m.processed).map_err(|e| e.to_string())?;
    let mut problems = Vec::new();
    if ledger != processed || distinct != ledger {
        problems.push(format!(
            "ledger has {ledger} rows ({distinct} distinct) for {processed} processed"
        ));
    }
    if m.errors != 0 {
        problems.push(format!("{} deliveries failed", m.errors));
    }
    match mode {
        Mode::Unique | Mode::Naive if customers != processed => {
            problems.push(format!(
                "{customers} customers for {processed} processed checkouts"
            ));
        }
        Mode::Dup | Mode::DupApart | Mode::Credit if credit != m.credited => {
            problems.push(format!("credited {credit}, expected {}", m.credited));
        }
        _ => {}
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// The SQL shape pgbench replays for a delivery.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Shape {
    /// The handler's one statement: the claim function, and the effect function under
    /// `CASE WHEN c.won`.
    Statement,
    /// The shape deliveries had before (two pipelined flights: BEGIN with the bounds as
    /// `SET LOCAL` and the claim; the effect's statements, or the duplicate's hash lookup, with
    /// COMMIT): the baseline for the database's CPU per delivery.
    TwoFlights,
}

/// The handler's delivery statement with pgbench variables in place of its parameters.
fn statement(event_id: &str, effect: &str) -> String {
    format!(
        "SELECT c.won, c.stored_sha256, CASE WHEN c.won THEN {effect} END \
         FROM {CLAIM_FUNCTION}('stripe', {event_id}, 'x', '\\x00') AS c;\n"
    )
}

/// pgbench's script for one delivery of `mode` in `shape`.
fn pgbench_script(mode: Mode, shape: Shape) -> String {
    let head =
        format!("\\set id random(1, 9000000000000000)\n\\set c random(1, {HOT_CUSTOMERS})\n");
    let id = "'pgb_' || :client_id || '_' || :id";
    let customer = "'cus_pgb_' || :client_id || '_' || :id";
    let delivery = match shape {
        Shape::Statement => {
            let effect = match mode {
                Mode::Credit | Mode::Dup | Mode::DupApart => {
                    "stripe_credit_v1('cus_hot_' || :c, 'x@example.com', 100)".to_owned()
                }
                _ => format!("stripe_provision_v2({customer}, 'x@example.com', {id})"),
            };
            let new = statement(id, &effect);
            match mode {
                // Three of four deliveries find the claim taken.
                Mode::Dup => format!(
                    "\\set n random(1, 4)\n\\if :n = 1\n{new}\\else\n{}\\endif\n",
                    statement("'pgb_dup'", &effect)
                ),
                _ => new,
            }
        }
        Shape::TwoFlights => two_flights(mode),
    };
    format!("{head}{delivery}")
}

/// The two-flight shape's SQL: the bounds and the claim in the first flight, as the handler
/// sent them, and the effect the handler applies today (`stripe_provision_v2`,
/// `stripe_credit_v1`) written out as plain statements in the second, so both shapes do the
/// same work.
fn two_flights(mode: Mode) -> String {
    let begin: String = TWO_FLIGHT_BEGIN
        .split("; ")
        .map(|s| format!("{s};\n"))
        .collect();
    let claim = |id: &str| {
        format!(
            "INSERT INTO processed_events (provider, event_id, event_type, payload_sha256) \
             VALUES ('stripe', {id}, 'x', '\\x00') ON CONFLICT (provider, event_id) DO NOTHING RETURNING id;\n"
        )
    };
    let effect = match mode {
        Mode::Credit | Mode::Dup | Mode::DupApart => {
            "INSERT INTO customers (stripe_customer_id, email, credit_balance_cents) \
            VALUES ('cus_hot_' || :c, 'x@example.com', 100) ON CONFLICT (stripe_customer_id) DO UPDATE \
            SET credit_balance_cents = customers.credit_balance_cents + EXCLUDED.credit_balance_cents, \
            email = COALESCE(customers.email, EXCLUDED.email), updated_at = now();\n"
        }
        // A checkout provisions the customer and, the first time it has an address, marks it
        // welcomed and queues its welcome email in the outbox: stripe_provision_v2's work,
        // as plain statements.
        _ => {
            "INSERT INTO customers (stripe_customer_id, email) VALUES ('cus_pgb_' || :client_id || '_' || :id, 'x@example.com') \
            ON CONFLICT (stripe_customer_id) DO UPDATE SET email = COALESCE(EXCLUDED.email, customers.email), updated_at = now();\n\
            WITH welcomed AS (UPDATE customers SET welcomed_at = now() \
            WHERE stripe_customer_id = 'cus_pgb_' || :client_id || '_' || :id AND welcomed_at IS NULL RETURNING 1) \
            INSERT INTO outbox (topic, payload, provider, event_id, dedup_key) \
            SELECT 'email.welcome', jsonb_build_object('stripe_customer_id', 'cus_pgb_' || :client_id || '_' || :id, 'email', 'x@example.com'), \
            'stripe', 'pgb_' || :client_id || '_' || :id, 'cus_pgb_' || :client_id || '_' || :id FROM welcomed ON CONFLICT DO NOTHING;\n"
        }
    };
    let delivery = |claim: String, rest: &str| {
        format!(
            "\\startpipeline\n{begin}{claim}\\endpipeline\n\\startpipeline\n{rest}COMMIT;\n\\endpipeline\n"
        )
    };
    let full = delivery(claim("'pgb_' || :client_id || '_' || :id"), effect);
    match mode {
        Mode::Dup => format!(
            "\\set n random(1, 4)\n\\if :n = 1\n{full}\\else\n{}\\endif\n",
            delivery(
                claim("'pgb_dup'"),
                "SELECT payload_sha256 FROM processed_events WHERE provider = 'stripe' AND event_id = 'pgb_dup';\n"
            )
        ),
        _ => full,
    }
}

/// What one pgbench run measured.
#[derive(Clone, Copy, Default)]
struct Ceiling {
    tps: f64,
    /// pgbench's own CPU (user + system) per 1,000 transactions: the C client's cost, to
    /// read beside the handler's, since both share the machine with PostgreSQL.
    client_cpu_per_1000: f64,
    /// Transactions pgbench completed.
    transactions: f64,
    /// PostgreSQL's CPU (every server process) per 1,000 transactions.
    db_cpu_per_1000: f64,
}

/// pgbench's tps for `mode`'s SQL in `shape`. `protocol` is `prepared` (named statements
/// planned once: not allowed through a transaction pooler without pinning) or `extended`
/// (unnamed statements parsed and planned every time: the protocol a transaction-pooling
/// proxy allows, and the one the handler uses).
#[allow(clippy::too_many_arguments)]
fn pgbench(
    mode: Mode,
    shape: Shape,
    protocol: &str,
    pg: &Postgres,
    db: &str,
    clients: usize,
    threads: usize,
    seconds: u64,
    dir: &std::path::Path,
) -> Result<Ceiling, String> {
    let script = dir.join(format!(
        "{}_{shape:?}.sql",
        mode.name().split(' ').next().unwrap_or("x")
    ));
    std::fs::write(&script, pgbench_script(mode, shape)).map_err(|e| e.to_string())?;
    let port = pg.port;
    let cpu_before = children_cpu_ms();
    let output = claimonce_bench::pgbench_at(port)
        .args(["-M", protocol])
        .args([
            "-c",
            &clients.to_string(),
            "-j",
            &threads.to_string(),
            "-T",
            &seconds.to_string(),
            "-f",
        ])
        .arg(&script)
        .arg(db)
        .output()
        .map_err(|e| format!("pgbench: {e}"))?;
    let cpu = children_cpu_ms() - cpu_before;
    let text = String::from_utf8_lossy(&output.stdout);
    let field = |prefix: &str, index: usize| {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.split_whitespace().nth(index))
            .and_then(|v| v.split('/').next())
            .and_then(|v| v.parse::<f64>().ok())
    };
    let tps = field("tps = ", 2);
    let transactions = field("number of transactions actually processed: ", 5);
    match (tps, transactions) {
        (Some(tps), Some(n)) if n > 0.0 => Ok(Ceiling {
            tps,
            client_cpu_per_1000: cpu * 1000.0 / n,
            transactions: n,
            db_cpu_per_1000: 0.0,
        }),
        _ => Err(format!(
            "pgbench gave no tps: {text}{}",
            String::from_utf8_lossy(&output.stderr)
        )),
    }
}

// One thread, like one Lambda execution environment's runtime: the environments interleave
// on it, and PostgreSQL keeps the machine's other core.
#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let args = match args(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(stop) => return claimonce_bench::exit_with(stop),
    };
    let dir = claimonce_local::functions::workspace_root().join("target/claimonce-bench");
    let _ = std::fs::remove_dir_all(&dir);
    let options = Options {
        settings: vec![
            ("shared_buffers".into(), "256MB".into()),
            ("max_connections".into(), "300".into()),
        ],
        ..Options::default()
    };
    let pg_dir = dir.join("postgres");
    let pg = match tokio::task::spawn_blocking(move || Postgres::start(&pg_dir, &options)).await {
        Ok(Ok(pg)) => pg,
        other => {
            eprintln!("load: could not start PostgreSQL: {other:?}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let admin = connect(&pg.url("postgres")).await;
    admin
        .batch_execute("CREATE DATABASE bench_template")
        .await
        .expect("template");
    let mut tpl = connect(&pg.url("bench_template")).await;
    claimonce::migrate::apply(&mut tpl, claimonce_local::migrations::ALL)
        .await
        .expect("migrate");
    drop(tpl);
    let fsync = admin
        .query_one("SHOW fsync", &[])
        .await
        .map(|r| r.get::<_, String>(0))
        .unwrap_or_default();
    let sync = admin
        .query_one("SHOW synchronous_commit", &[])
        .await
        .map(|r| r.get::<_, String>(0))
        .unwrap_or_default();

    let mut table = String::new();
    let _ = writeln!(
        table,
        "| mode | clients | deliveries/s | pgbench, same statement, unnamed (tps) | ratio | pgbench, same statement, prepared (tps) | ratio | pgbench, old two flights (tps) | p50 ms | p99 ms | errors | handler CPU ms / 1000 (user + sys) | pgbench client CPU ms / 1000 (same statement) | DB CPU ms / 1000: handler | DB CPU: pgbench same statement | DB CPU: pgbench old two flights | invariant |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    let mut failed = false;
    let mut pgbench_failed = false;
    let mut ceilings: std::collections::HashMap<(&str, usize, Shape, &str, u32), Ceiling> =
        std::collections::HashMap::new();
    let mut rows = Vec::new();
    for repetition in 0..args.repeat {
        for &mode in &args.modes {
            for &clients in &args.clients {
                rows.push((repetition, mode, clients));
            }
        }
    }
    for (repetition, mode, clients) in rows {
        let run = format!(
            "{}_{clients}_{repetition}",
            mode.name()
                .split(' ')
                .next()
                .unwrap_or("x")
                .replace('-', "_")
        );
        let db = format!("bench_{run}");
        admin
            .batch_execute(&format!("CREATE DATABASE {db} TEMPLATE bench_template"))
            .await
            .expect("db");
        let url = pg.url(&db);
        let postmaster = postmaster_pid(&pg);
        let db_before = postgres_cpu_ms(postmaster);
        // At most one thread per client, the same number on both sides.
        let threads = args.threads.clamp(1, clients.max(1));
        let m = run_handlers(mode, &url, clients, threads, args.seconds, &run).await;
        settle(&admin, &db).await;
        let handler_db_cpu = postgres_cpu_ms(postmaster) - db_before;
        let check_client = connect(&url).await;
        let invariant = check(mode, &check_client, &m).await;
        drop(check_client);
        if invariant.is_err() {
            failed = true;
        }
        let ceiling_mode = match mode {
            Mode::Naive => Mode::Unique,
            Mode::DupApart => Mode::Dup,
            _ => mode,
        };
        let mut ceiling = [Ceiling::default(); 3];
        let shapes = [
            (Shape::Statement, "extended"),
            (Shape::Statement, "prepared"),
            (Shape::TwoFlights, "extended"),
        ];
        for (slot, (shape, protocol)) in shapes.into_iter().enumerate() {
            let key = (ceiling_mode.name(), clients, shape, protocol, repetition);
            let measured = match ceilings.get(&key) {
                Some(measured) => *measured,
                None => {
                    let pdb = format!("pgbench_{run}_{shape:?}_{protocol}").to_lowercase();
                    admin
                        .batch_execute(&format!("CREATE DATABASE {pdb} TEMPLATE bench_template"))
                        .await
                        .expect("db");
                    let db_before = postgres_cpu_ms(postmaster);
                    let mut measured = pgbench(
                        ceiling_mode,
                        shape,
                        protocol,
                        &pg,
                        &pdb,
                        clients,
                        threads,
                        args.seconds,
                        &dir,
                    )
                    .unwrap_or_else(|e| {
                        eprintln!("{e}");
                        pgbench_failed = true;
                        Ceiling::default()
                    });
                    settle(&admin, &pdb).await;
                    if measured.transactions > 0.0 {
                        measured.db_cpu_per_1000 = (postgres_cpu_ms(postmaster) - db_before)
                            * 1000.0
                            / measured.transactions;
                    }
                    ceilings.insert(key, measured);
                    measured
                }
            };
            if let Some(c) = ceiling.get_mut(slot) {
                *c = measured;
            }
        }
        let [unnamed, prepared, old] = ceiling;
        let rate = m.deliveries as f64 / m.seconds;
        let ratio = |ceiling: f64| {
            if ceiling > 0.0 {
                format!("{:.0}%", 100.0 * rate / ceiling)
            } else {
                "n/a".into()
            }
        };
        let per_1000 = |ms: f64| {
            if m.deliveries > 0 {
                ms * 1000.0 / m.deliveries as f64
            } else {
                0.0
            }
        };
        let (user, sys) = (per_1000(m.cpu_ms.0), per_1000(m.cpu_ms.1));
        let _ = writeln!(
            table,
            "| {} | {clients} | {rate:.0} | {:.0} | {} | {:.0} | {} | {:.0} | {:.2} | {:.2} | {} | {:.1} ({user:.1} + {sys:.1}) | {:.1} | {:.1} | {:.1} | {:.1} | {} |",
            mode.name(),
            unnamed.tps,
            ratio(unnamed.tps),
            prepared.tps,
            ratio(prepared.tps),
            old.tps,
            percentile(&m.latencies_us, 0.50),
            percentile(&m.latencies_us, 0.99),
            m.errors,
            user + sys,
            unnamed.client_cpu_per_1000,
            per_1000(handler_db_cpu),
            unnamed.db_cpu_per_1000,
            old.db_cpu_per_1000,
            match &invariant {
                Ok(()) => "ok".to_owned(),
                Err(e) => format!("BROKEN: {e}"),
            },
        );
        eprintln!(
            "{} x{clients}: {rate:.0}/s vs pgbench {:.0} (same statement) / {:.0} (prepared) / {:.0} (old two flights) tps",
            mode.name(),
            unnamed.tps,
            prepared.tps,
            old.tps
        );
    }
    println!(
        "PostgreSQL fsync={fsync}, synchronous_commit={sync}; {} s per run",
        args.seconds
    );
    println!("{table}");
    println!(
        "peak RSS of the benchmark process (all environments and the load generator): {} KiB",
        peak_rss_kib("self")
    );
    if failed {
        eprintln!("load: an invariant broke (see the table)");
        return std::process::ExitCode::FAILURE;
    }
    if pgbench_failed {
        eprintln!("load: a pgbench run failed (see above), so a ceiling is missing");
        return std::process::ExitCode::FAILURE;
    }
    std::process::ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Result<Args, (String, u8)> {
        args(line.split_whitespace().map(str::to_owned))
    }

    #[test]
    fn help_and_wrong_flags_answer_instead_of_starting_the_benchmark() {
        assert!(matches!(parse("--help"), Err((text, 0)) if text.starts_with("usage: load")));
        assert!(matches!(parse("--seconds 5 -h"), Err((_, 0))));
        for wrong in [
            "--bogus",
            "--seconds",
            "--seconds x",
            "--modes fast",
            "--clients 1,x",
            "--threads two",
            "extra",
        ] {
            assert!(matches!(parse(wrong), Err((_, 2))), "{wrong}");
        }
        let quick = parse("--quick --clients 2")
            .map_err(|e| e.0)
            .expect("valid");
        assert_eq!(
            (quick.seconds, quick.clients, quick.threads),
            (1, vec![2], 2)
        );
        let one = parse("--threads 1").map_err(|e| e.0).expect("valid");
        assert_eq!(one.threads, 1);
    }
}
