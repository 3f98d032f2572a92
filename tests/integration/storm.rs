//! The fault storm: deliveries through the real binaries with the sweep's faults drawn at
//! random at every fault point (`claimonce::fault`'s `storm:` arming): errors, panics, kills
//! (the environment restarted, as Lambda starts a new one), and delays past the delivery's
//! deadline. Each event is sent twice, as senders redeliver, through environments one
//! invocation at a time and environments of four at once on a pool of two connections, and
//! every delivery that is not answered 200 is retried until it is. Then every event must be
//! applied once: none lost, none doubled, none half-applied.
//!
//! The suite runs 2,000 deliveries; `CLAIMONCE_FAULT_STORM=N` runs N (`scripts/storm` runs
//! 50,000 and prints the figures RELIABILITY.md and BENCHMARKS.md report).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use claimonce_tests::TestDb;
use claimonce_tests::lambda::Scheduled;
use tokio::sync::Mutex;

use crate::sweep::{DELIVERY_MS, Mode, Queues, Sender, answered, environment};

/// Per 10,000 hits of a fault point: errors, panics, kills, delays.
const RATES: [u64; 4] = [40, 40, 8, 10];

/// How many tries a delivery gets before it counts as lost.
const TRIES: u32 = 30;

/// One environment of a sender's function, replaced when a kill ends it; the faults its
/// replaced ones fired, by kind.
struct Slot {
    sender: Sender,
    mode: Mode,
    url: String,
    faults: String,
    current: Mutex<(u64, Arc<Scheduled>)>,
    fired: std::sync::Mutex<BTreeMap<String, u64>>,
}

impl Slot {
    async fn start(sender: Sender, mode: Mode, url: String, seed: u64) -> Self {
        let [error, panic, kill, delay] = RATES;
        let faults = format!(
            "storm:{seed}:{error}:{panic}:{kill}:{delay}:{}",
            DELIVERY_MS + 500
        );
        let env = environment(sender, &url, mode, &faults, Queues::None).await;
        Self {
            sender,
            mode,
            url,
            faults,
            current: Mutex::new((0, Arc::new(env))),
            fired: std::sync::Mutex::default(),
        }
    }

    /// The environment now, and its generation.
    async fn now(&self) -> (u64, Arc<Scheduled>) {
        let current = self.current.lock().await;
        (current.0, Arc::clone(&current.1))
    }

    /// A new environment in place of generation `ended`, unless another delivery replaced it
    /// first; the ended one's faults counted.
    async fn restart(&self, ended: u64) {
        let mut current = self.current.lock().await;
        if current.0 != ended {
            return;
        }
        self.count(&current.1);
        let env = environment(
            self.sender,
            &self.url,
            self.mode,
            &self.faults,
            Queues::None,
        )
        .await;
        *current = (ended + 1, Arc::new(env));
    }

    /// Adds the faults `env` fired to the tally.
    fn count(&self, env: &Scheduled) {
        let mut fired = self.fired.lock().expect("tally");
        for line in env.lines("fault injected") {
            let kind = line["fault"].as_str().unwrap_or("?").to_owned();
            *fired.entry(kind).or_default() += 1;
        }
    }
}

/// What the storm did: deliveries made (first tries and retries), and events whose every try
/// failed.
#[derive(Default)]
struct Tally {
    deliveries: AtomicU64,
    lost: AtomicU64,
}

/// Delivers event `n` of `slot`'s sender until it is answered 200, restarting the environment
/// a kill ended; false when every try failed.
async fn deliver_until_answered(slot: &Slot, n: u64, tally: &Tally) -> bool {
    for _ in 0..TRIES {
        let (generation, env) = slot.now().await;
        let ran = env
            .try_run_within(&slot.sender.event(n), Duration::from_secs(10))
            .await;
        tally.deliveries.fetch_add(1, Ordering::Relaxed);
        match ran {
            Some(ran) if answered(&ran).starts_with("200 ") => return true,
            // Killed under this delivery, or before it reached the environment.
            Some(Err(e)) if e.contains("Runtime exited before answering") => {
                slot.restart(generation).await;
            }
            None => slot.restart(generation).await,
            Some(_) => {}
        }
    }
    false
}

/// How many events of `sender` among `events` were applied other than once, as their rows
/// show: (lost: nothing of it; doubled: its effect more than once; half-applied: a claim
/// without its effect or an effect without its claim, or for Shopify's Rust effect, one of its
/// two statements' rows without the other's).
async fn misapplied(db: &TestDb, sender: Sender, events: u64) -> (i64, i64, i64) {
    // Per event: how many times its effect shows (`applied`) and whether its claim or its
    // other statement's row does (`other`).
    let per_event = match sender {
        Sender::Stripe => {
            "SELECT n, coalesce(c.credit_balance_cents, 0) / 2000 AS applied, \
                    (p.event_id IS NOT NULL) AS other \
             FROM generate_series(0, $1::bigint - 1) AS n \
             LEFT JOIN customers c ON c.stripe_customer_id = 'cus_sweep_' || n \
             LEFT JOIN processed_events p \
                    ON p.provider = 'stripe' AND p.event_id = 'evt_sweep_' || n \
             WHERE n % 2 = 0"
        }
        Sender::Shopify => {
            "SELECT n, coalesce(e.rows, 0) AS applied, (o.order_id IS NOT NULL) AS other \
             FROM generate_series(0, $1::bigint - 1) AS n \
             LEFT JOIN (SELECT order_id, count(*) AS rows FROM shopify_order_events \
                        GROUP BY order_id) e ON e.order_id = n \
             LEFT JOIN shopify_orders o ON o.order_id = n \
             WHERE n % 2 = 1"
        }
    };
    let sql = format!(
        "SELECT count(*) FILTER (WHERE applied = 0 AND NOT other), \
                count(*) FILTER (WHERE applied > 1), \
                count(*) FILTER (WHERE (applied = 0) = other) \
         FROM ({per_event}) AS each_event"
    );
    let events = i64::try_from(events).expect("a count");
    let row = db
        .client()
        .await
        .query_one(&sql, &[&events])
        .await
        .expect("the events' rows");
    (row.get(0), row.get(1), row.get(2))
}

/// At least 2,000 deliveries (`CLAIMONCE_FAULT_STORM` for more), each event twice, with faults
/// at random at every point: every event applied once, and each kind of fault fired.
#[tokio::test]
async fn a_storm_of_faults_at_random_points_loses_doubles_and_half_applies_nothing() {
    let deliveries: u64 = std::env::var("CLAIMONCE_FAULT_STORM")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2_000);
    let events = deliveries.div_ceil(2);
    let db = TestDb::new().await;
    // Two environments one invocation at a time and one of four at once on two connections,
    // for each sender; event n is Stripe's when even, Shopify's when odd.
    let mut slots = Vec::new();
    for (seed, (sender, mode)) in [
        (Sender::Stripe, Mode::Classic),
        (Sender::Stripe, Mode::Classic),
        (Sender::Stripe, Mode::Concurrent),
        (Sender::Shopify, Mode::Classic),
        (Sender::Shopify, Mode::Classic),
        (Sender::Shopify, Mode::Concurrent),
    ]
    .into_iter()
    .enumerate()
    {
        let url = db.function_url_as(sender.provider());
        slots.push(Arc::new(
            Slot::start(sender, mode, url, seed as u64 + 1).await,
        ));
    }
    // Each slot's work: its sender's events, each copy on a different slot of that sender.
    let mut work: Vec<Vec<u64>> = vec![Vec::new(); slots.len()];
    for n in 0..events {
        let base = if n % 2 == 0 { 0 } else { 3 };
        for copy in 0..2 {
            work[base + ((n / 2 + copy) % 3) as usize].push(n);
        }
    }
    let tally = Arc::new(Tally::default());
    let started = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for (slot, work) in slots.iter().zip(work) {
        let work = Arc::new(work);
        let next = Arc::new(AtomicUsize::new(0));
        let concurrency = if slot.mode == Mode::Concurrent { 4 } else { 1 };
        for _ in 0..concurrency {
            let (slot, work, next, tally) = (
                Arc::clone(slot),
                Arc::clone(&work),
                Arc::clone(&next),
                Arc::clone(&tally),
            );
            workers.spawn(async move {
                while let Some(&n) = work.get(next.fetch_add(1, Ordering::Relaxed)) {
                    if !deliver_until_answered(&slot, n, &tally).await {
                        tally.lost.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    }
    workers.join_all().await;
    let took = started.elapsed();
    let mut fired: BTreeMap<String, u64> = BTreeMap::new();
    let mut restarts = 0;
    for slot in &slots {
        // The environment's generation counts its restarts.
        let (generation, env) = slot.now().await;
        slot.count(&env);
        restarts += generation;
        for (kind, n) in slot.fired.lock().expect("tally").iter() {
            *fired.entry(kind.clone()).or_default() += n;
        }
    }
    let (mut lost, mut doubled, mut half) = (0, 0, 0);
    for sender in [Sender::Stripe, Sender::Shopify] {
        let (l, d, h) = misapplied(&db, sender, events).await;
        (lost, doubled, half) = (lost + l, doubled + d, half + h);
    }
    let claims = db.count("SELECT count(*) FROM processed_events").await;
    let made = tally.deliveries.load(Ordering::Relaxed);
    let unanswered = tally.lost.load(Ordering::Relaxed);
    println!(
        "storm: {made} deliveries ({} sent, the rest retries) of {events} events in {:.0} s; \
         faults fired {fired:?}, {restarts} environments restarted; {unanswered} never \
         answered 200; lost {lost}, doubled {doubled}, half-applied {half}; {claims} claims",
        events * 2,
        took.as_secs_f64()
    );
    assert_eq!(unanswered, 0, "every delivery answered 200 in the end");
    assert_eq!(
        (lost, doubled, half),
        (0, 0, 0),
        "lost, doubled, half-applied"
    );
    assert_eq!(
        claims,
        i64::try_from(events).expect("a count"),
        "one claim each"
    );
    for kind in ["error", "panic", "kill", "delay"] {
        assert!(
            fired.get(kind).is_some_and(|n| *n > 0),
            "the storm fired a {kind}: {fired:?}"
        );
    }
    crate::sweep::until_no_transaction(&db)
        .await
        .expect("nothing left in a transaction");
}
