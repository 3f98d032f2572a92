//! The two effect forms side by side, on the same order events through the real receiver
//! (`lambda::handle_event`) as Shopify's own login (so the Rust path pays its row-level
//! security): the SQL effect (`shopify_keep_order_v1`, one statement with the claim), the
//! same upsert as a Rust effect, and the shipped Rust effect (the upsert and a timeline row).
//! Per 1,000 deliveries: round trips (counted by the wire proxy on a first pass), handler CPU
//! and database CPU (on a second, direct pass), with the invariant checked after each.
//!
//! ```text
//! cargo run --release -p claimonce-bench --bin effects -- [--deliveries 20000] [--clients 8]
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use claimonce::db::{Database, Settings, Timeouts};
use claimonce::log::Log;
use claimonce::prelude::{
    Effect, EffectError, Param, Parsed, Plan, Provider, Rejection, RustEffect, Signed, Tx, Type,
    Unsigned,
};
use claimonce::prelude::{Scheme, Sign};
use claimonce::verify::body_hmac::{BodyHmac, Encoding};
use claimonce::{Limits, Receiver};
use claimonce_bench::{api_gateway_event, cpu_ms, postgres_cpu_ms, postmaster_pid, settle};
use claimonce_local::postgres::{Options, Postgres, provider_login_sql};
use serde_json::json;
use shopify_webhook::{Shopify, ShopifyEvent};

const SECRET: &str = "bench-shopify-secret";

/// How an order event is applied.
#[derive(Clone, Copy, Debug)]
enum Form {
    /// `shopify_keep_order_v1` under `CASE WHEN c.won`: one statement.
    Sql,
    /// The same upsert, as a Rust effect.
    RustUpsert,
    /// Shopify's shipped Rust effect: the upsert and a timeline row.
    RustShipped,
}

impl Form {
    fn name(self) -> &'static str {
        match self {
            Form::Sql => "SQL effect (one statement)",
            Form::RustUpsert => "Rust effect, the same upsert",
            Form::RustShipped => "Rust effect, upsert + timeline row (shipped)",
        }
    }
}

/// Shopify's verifier and parser, with the effect in the form under test.
struct Orders(Shopify, Form);

impl Provider for Orders {
    type Event = ShopifyEvent;
    type Rust<'e> = InRust<'e>;
    const MANIFEST: &'static str = <Shopify as Provider>::MANIFEST;
    fn verifier(&self) -> Option<&dyn Scheme> {
        self.0.verifier()
    }
    fn parse(&self, s: &Signed<'_>, u: &Unsigned<'_>) -> Result<Parsed<ShopifyEvent>, Rejection> {
        self.0.parse(s, u)
    }
    fn plan<'e>(&'e self, event: &'e Parsed<ShopifyEvent>) -> Plan<InRust<'e>> {
        let ShopifyEvent::Order(o) = &event.event else {
            return Plan::Nothing;
        };
        match self.1 {
            Form::Sql => Plan::Call(Effect::call(
                "shopify_keep_order_v1",
                vec![
                    Param::new(o.id, Type::INT8),
                    Param::new(o.state.to_owned(), Type::TEXT),
                    Param::new(o.updated_at.clone(), Type::TEXT),
                    Param::new(o.rank, Type::INT2),
                    Param::new(o.email.clone(), Type::TEXT),
                    Param::new(o.financial_status.clone(), Type::TEXT),
                    Param::new(o.total_price.clone(), Type::TEXT),
                    Param::new(o.currency.clone(), Type::TEXT),
                ],
            )),
            Form::RustUpsert => Plan::Rust(InRust(None, o)),
            Form::RustShipped => Plan::Rust(InRust(Some(event), o)),
        }
    }
}

/// The Rust forms: the upsert alone, or (with the event) Shopify's shipped effect.
struct InRust<'e>(Option<&'e Parsed<ShopifyEvent>>, &'e shopify_webhook::Order);

impl RustEffect for InRust<'_> {
    async fn apply<'a>(&'a self, tx: &'a Tx<'a>) -> Result<(), EffectError> {
        match self.0 {
            Some(event) => {
                shopify_webhook::keep_order(tx, &event.event_id, &event.event_type, self.1).await
            }
            None => shopify_webhook::keep_order_state(tx, self.1).await,
        }
    }
}

/// Delivery `n`: an update of order `n`, signed, as API Gateway sends it.
fn event(signer: &BodyHmac, n: u64) -> String {
    let body = json!({
        "id": n, "email": "jon@example.com", "updated_at": "2026-11-30T10:00:00Z",
        "cancelled_at": null, "financial_status": "paid", "total_price": "199.65",
        "currency": "USD", "line_items": [{"id": 1, "quantity": 1, "title": "IPod Nano - 8GB"}],
    })
    .to_string();
    let mut headers = serde_json::Map::new();
    for (name, value) in signer.sign(body.as_bytes(), 0, "") {
        headers.insert(name, value.into());
    }
    headers.insert("x-shopify-topic".into(), "orders/updated".into());
    headers.insert("content-type".into(), "application/json".into());
    api_gateway_event("/webhooks/shopify", headers.into(), body.as_bytes())
}

/// Delivers `events` over `clients` environments (each its own receiver and connection) on
/// this thread; returns how many were processed.
async fn deliver(form: Form, url: &str, events: Arc<Vec<String>>, clients: usize) -> u64 {
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let settings = Settings::from_url(
            url,
            None,
            Timeouts::new(Duration::from_secs(5), Duration::from_secs(10)),
        )
        .expect("settings");
        let provider = Orders(Shopify::new(&[SECRET]).expect("secret"), form);
        let receiver = Receiver::new(
            provider,
            Database::new(settings),
            Limits::default(),
            Log::discard(),
        );
        let (events, next) = (Arc::clone(&events), Arc::clone(&next));
        tasks.push(tokio::spawn(async move {
            receiver.warm_up().await;
            let mut processed = 0;
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                let Some(raw) = events.get(usize::try_from(n).unwrap_or(usize::MAX)) else {
                    break processed;
                };
                let payload = claimonce::lambda::handle_event(&receiver, raw).await;
                if &payload.response().body()[..] == br#"{"disposition":"processed"}"# {
                    processed += 1;
                }
            }
        }));
    }
    let mut processed = 0;
    for task in tasks {
        processed += task.await.expect("environment");
    }
    processed
}

fn number(args: &[String], flag: &str, default: u64) -> u64 {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("usage: effects [--deliveries 20000] [--clients 8]");
        return std::process::ExitCode::SUCCESS;
    }
    let deliveries = number(&args, "--deliveries", 20_000);
    let clients = usize::try_from(number(&args, "--clients", 8)).unwrap_or(8);
    let dir = claimonce_local::functions::workspace_root().join("target/claimonce-bench-effects");
    let _ = std::fs::remove_dir_all(&dir);
    let pg_dir = dir.join("postgres");
    let pg =
        match tokio::task::spawn_blocking(move || Postgres::start(&pg_dir, &Options::default()))
            .await
        {
            Ok(Ok(pg)) => pg,
            other => {
                eprintln!("effects: could not start PostgreSQL: {other:?}");
                return std::process::ExitCode::FAILURE;
            }
        };
    let connect = |url: String| async move {
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .expect("connect");
        tokio::spawn(connection);
        client
    };
    let admin = connect(pg.url("postgres")).await;
    admin
        .batch_execute("CREATE DATABASE bench_template")
        .await
        .expect("template");
    let mut template = connect(pg.url("bench_template")).await;
    claimonce::migrate::apply(&mut template, claimonce_local::migrations::ALL)
        .await
        .expect("migrate");
    // Shopify's login, as a deployment has it (its role exists once the migrations ran).
    template
        .batch_execute(&provider_login_sql("bench_shopify", "shopify"))
        .await
        .expect("login");
    drop(template);
    let signer =
        BodyHmac::new("x-shopify-hmac-sha256", "", Encoding::Base64, &[SECRET]).expect("secret");
    let events: Arc<Vec<String>> = Arc::new((0..deliveries).map(|n| event(&signer, n)).collect());
    let sample: Arc<Vec<String>> = Arc::new(events.iter().take(1000).cloned().collect());
    println!(
        "{deliveries} order deliveries (each a new event), {clients} environments on one thread, \
         as Shopify's login; round trips from a first pass of 1,000 through the wire proxy:\n"
    );
    println!(
        "| effect | round trips / delivery | deliveries/s | handler CPU ms / 1000 | DB CPU ms / 1000 | invariant |"
    );
    println!("|---|---|---|---|---|---|");
    let mut failed = false;
    for (i, form) in [Form::Sql, Form::RustUpsert, Form::RustShipped]
        .into_iter()
        .enumerate()
    {
        let db = format!("bench_effects_{i}");
        admin
            .batch_execute(&format!("CREATE DATABASE {db} TEMPLATE bench_template"))
            .await
            .expect("db");
        let url = pg.url(&db).replacen("postgres@", "bench_shopify@", 1);
        // Round trips, through the proxy, on a database of their own.
        let counted = format!("{db}_counted");
        admin
            .batch_execute(&format!(
                "CREATE DATABASE {counted} TEMPLATE bench_template"
            ))
            .await
            .expect("db");
        let direct = pg.url(&counted).replacen("postgres@", "bench_shopify@", 1);
        let (proxy, through) = claimonce_tests::proxy::WireProxy::in_front_of(&direct).await;
        let warmed = proxy.flights();
        deliver(form, &through, Arc::clone(&sample), 1).await;
        // One connection's startup and cold-start read are not the deliveries'.
        let flights = proxy.flights().saturating_sub(warmed + 2) as f64 / sample.len() as f64;
        drop(proxy);
        let postmaster = postmaster_pid(&pg);
        let (db_before, cpu_before) = (postgres_cpu_ms(postmaster), cpu_ms());
        let started = Instant::now();
        let processed = deliver(form, &url, Arc::clone(&events), clients).await;
        let seconds = started.elapsed().as_secs_f64();
        let cpu = cpu_ms();
        settle(&admin, &db).await;
        let db_cpu = postgres_cpu_ms(postmaster) - db_before;
        let handler = (cpu.0 - cpu_before.0) + (cpu.1 - cpu_before.1);
        let check = connect(pg.url(&db)).await;
        let count = |sql: &'static str| {
            let check = &check;
            async move {
                check
                    .query_one(sql, &[])
                    .await
                    .map_or(-1, |r| r.get::<_, i64>(0))
            }
        };
        let (ledger, orders, timeline) = (
            count("SELECT count(*) FROM processed_events").await,
            count("SELECT count(*) FROM shopify_orders").await,
            count("SELECT count(*) FROM shopify_order_events").await,
        );
        let n = i64::try_from(deliveries).unwrap_or(-1);
        let expected_timeline = if matches!(form, Form::RustShipped) {
            n
        } else {
            0
        };
        let ok =
            processed == deliveries && ledger == n && orders == n && timeline == expected_timeline;
        failed |= !ok;
        let per = 1000.0 / deliveries as f64;
        println!(
            "| {} | {flights:.2} | {:.0} | {:.0} | {:.0} | {} |",
            form.name(),
            deliveries as f64 / seconds,
            handler * per,
            db_cpu * per,
            if ok {
                "ok".to_owned()
            } else {
                format!(
                    "FAILED: {processed} processed, ledger {ledger}, orders {orders}, timeline {timeline}"
                )
            }
        );
    }
    if failed {
        std::process::ExitCode::FAILURE
    } else {
        std::process::ExitCode::SUCCESS
    }
}
