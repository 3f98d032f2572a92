//! Exactly-once under faults: a function killed inside its transaction, a lost
//! acknowledgement, a database that goes away and comes back, a slow twin, and a storm of
//! duplicates and failures. Each test checks the end state: one ledger row and one effect per
//! event, nothing lost.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use claimonce::Receiver;
use claimonce::db::{Settings, Timeouts};
use claimonce::jobs::CLAIM_FUNCTION;
use claimonce_local::postgres::{Options, Postgres};
use claimonce_local::runtime_api::{EXIT_ERROR_TYPE, Outcome, RuntimeApi};
use claimonce_local::sign::resign;
use claimonce_tests::TestDb;
use claimonce_tests::apigw::{outcome, payload_outcome, post_stripe, v2_event};
use claimonce_tests::db::{pooled_receiver, receiver_with, released_together};
use claimonce_tests::faults::{XorShift, at_the_gate};
use claimonce_tests::lambda::{binaries, function};
use claimonce_tests::sign::{checkout_completed, invoice_paid, now, stripe};
use serde_json::Value;
use stripe_webhook::Stripe;
use tokio::sync::Mutex;

/// How many times the loops run: `CLAIMONCE_FAULT_ITERATIONS`, default `default`.
fn iterations(default: u64) -> u64 {
    std::env::var("CLAIMONCE_FAULT_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A gate inside a delivery's statement: a trigger on a table waits for an advisory lock that
/// the test holds while the gate is closed. The functions' lock_timeout is raised in this
/// database so that nothing but the test ends the wait.
struct Hold {
    holder: tokio_postgres::Client,
}

const GATE: i64 = 4242;

impl Hold {
    /// Installs the gate on `table`, closed.
    async fn install(db: &TestDb, table: &str) -> Self {
        db.client()
            .await
            .batch_execute(&format!(
                "CREATE FUNCTION hold_here() RETURNS trigger LANGUAGE plpgsql AS $$
                 BEGIN PERFORM pg_advisory_xact_lock_shared({GATE}); RETURN NEW; END $$;
                 CREATE TRIGGER hold_here BEFORE INSERT OR UPDATE ON {table}
                     FOR EACH ROW EXECUTE FUNCTION hold_here();
                 ALTER FUNCTION {CLAIM_FUNCTION}(text, text, text, bytea) SET lock_timeout = '60s';
                 ALTER FUNCTION stripe_credit_v1(text, text, bigint) SET lock_timeout = '60s';"
            ))
            .await
            .expect("install the gate");
        let hold = Self {
            holder: db.client().await,
        };
        hold.close().await;
        hold
    }

    async fn close(&self) {
        self.holder
            .batch_execute(&format!("SELECT pg_advisory_lock({GATE})"))
            .await
            .expect("close the gate");
    }

    async fn open(&self) {
        self.holder
            .batch_execute(&format!("SELECT pg_advisory_unlock({GATE})"))
            .await
            .expect("open the gate");
    }
}

async fn wait_gone(db: &TestDb, pid: i32) {
    let admin = db.client().await;
    let started = Instant::now();
    while admin
        .query_opt("SELECT 1 FROM pg_stat_activity WHERE pid = $1", &[&pid])
        .await
        .expect("activity")
        .is_some()
    {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "backend {pid} outlived its client"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn signed_event(body: &[u8]) -> Value {
    let mut event = v2_event(
        "POST",
        "/webhooks/stripe",
        &[("content-type", "application/json")],
        body,
        false,
    );
    resign(&mut event, now()).expect("sign");
    event
}

async fn invoke(api: &RuntimeApi, event: &Value) -> (u16, String) {
    match api
        .invoke(event.to_string(), Duration::from_secs(30))
        .await
        .expect("answer")
    {
        Outcome::Response(p) => payload_outcome(&serde_json::from_slice(&p).expect("json")),
        Outcome::Error(e) => panic!("function error: {}", String::from_utf8_lossy(&e)),
    }
}

async fn ledger(db: &TestDb, id: &str) -> i64 {
    db.count(&format!(
        "SELECT count(*) FROM processed_events WHERE event_id = '{id}'"
    ))
    .await
}

/// How long an invocation in the crash loop may wait for its outcome: far longer than the test
/// takes, so that only the emulator's answer for a dead instance can end the killed one's.
const NEVER: Duration = Duration::from_secs(300);

/// Kills the real binary with SIGKILL while its delivery's statement waits at a gate inside
/// `table`'s insert, then opens the gate and redelivers to a fresh instance, `rounds` times.
/// The invocation the killed instance held is answered at once with Lambda's
/// `Runtime.ExitError` (not left to time out). The statement was whole on the server before
/// the kill, so the server finishes and commits it without its client; the retry must answer
/// duplicate and the effect exist once. Returns everything the killed processes printed.
async fn crash_loop(table: &str, rounds: u64) -> String {
    let db = TestDb::new().await;
    let hold = Hold::install(&db, table).await;
    let f = function("stripe");
    let binary = binaries().await.join(f.binary);
    let env = [
        ("DATABASE_URL", db.function_url()),
        (f.secret_var, f.dev_secret),
    ];
    let mut output = String::new();
    for round in 0..rounds {
        let id = format!("evt_crash_{round}");
        let event = signed_event(&invoice_paid(&id, "cus_crash", 100));
        if round > 0 {
            hold.close().await;
        }
        let api = Arc::new(RuntimeApi::start(f.binary).await.expect("api"));
        // The command is dropped with this statement: the instance's lifeline is then held by
        // the process alone.
        let mut victim = api
            .command(&binary, &env)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn");
        let pending = {
            let (api, event) = (Arc::clone(&api), event.clone());
            tokio::spawn(async move { api.invoke(event.to_string(), NEVER).await })
        };
        let pid = at_the_gate(&db, 1).await;
        // Held at the gate, it cannot have answered.
        assert!(
            !pending.is_finished(),
            "round {round}: answered from the gate"
        );
        victim.start_kill().expect("SIGKILL");
        let killed = victim.wait_with_output().await.expect("reaped");
        output.push_str(&String::from_utf8_lossy(&killed.stdout));
        output.push_str(&String::from_utf8_lossy(&killed.stderr));
        // The emulator answers what the dead instance held, as Lambda does, without waiting
        // out the invocation's timeout: the error only an exited runtime gets.
        match pending.await.expect("invoke task") {
            Ok(Outcome::Error(error)) => {
                let error: Value = serde_json::from_slice(&error).expect("JSON error");
                assert_eq!(
                    error["errorType"], EXIT_ERROR_TYPE,
                    "round {round}: {error}"
                );
            }
            other => panic!("round {round}: the killed invocation ended with {other:?}"),
        }
        assert_eq!(ledger(&db, &id).await, 0, "round {round}: held at the gate");
        hold.open().await;
        wait_gone(&db, pid).await;
        assert_eq!(
            ledger(&db, &id).await,
            1,
            "round {round}: the statement committed without its client"
        );
        // The sender's retry reaches another (fresh) execution environment of the same
        // function: the endpoint serves on past the death of one of its instances.
        let _instance = api
            .command(&binary, &env)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("spawn");
        assert_eq!(
            invoke(&api, &event).await,
            (200, "duplicate".into()),
            "round {round}"
        );
        assert_eq!(ledger(&db, &id).await, 1, "round {round}");
        let credited = db
            .count("SELECT coalesce(sum(credit_balance_cents), 0)::bigint FROM customers")
            .await;
        assert_eq!(
            credited,
            100 * i64::try_from(round + 1).expect("n"),
            "round {round}: credited once"
        );
    }
    output
}

/// Nothing a killed process printed carries the secret or a signature.
fn assert_no_leak(output: &str) {
    assert!(!output.contains(function("stripe").dev_secret));
    assert!(!output.contains("v1="), "a signature in the output");
}

#[tokio::test]
async fn a_function_killed_inside_its_claim_has_its_statement_applied_once() {
    let output = crash_loop("processed_events", iterations(3)).await;
    assert_no_leak(&output);
}

#[tokio::test]
async fn a_function_killed_inside_its_effect_has_its_statement_applied_once() {
    let output = crash_loop("customers", iterations(3)).await;
    assert_no_leak(&output);
}

// A lost acknowledgement (the server committed, the answer never arrived) is pinned at that
// exact point by round_trips::a_connection_lost_after_the_commit_is_retried_and_answered_duplicate.

#[tokio::test]
async fn a_database_that_goes_down_answers_500_in_bounded_time_and_the_warm_process_recovers() {
    let dir = std::env::temp_dir().join(format!("claimonce-downtime-{}", std::process::id()));
    let options = Options {
        keep: true,
        settings: vec![("fsync".into(), "off".into())],
        port: None,
    };
    let opts = options.clone();
    let dir2 = dir.clone();
    let pg = tokio::task::spawn_blocking(move || Postgres::start(&dir2, &opts))
        .await
        .expect("task")
        .expect("start");
    let url = pg.url("postgres");
    let mut admin = Settings::from_url(&url, None, claimonce_tests::db::test_timeouts())
        .expect("s")
        .connect()
        .await
        .expect("c");
    claimonce::migrate::apply(&mut admin, claimonce_local::migrations::ALL)
        .await
        .expect("migrate");
    drop(admin);
    let timeouts = Timeouts::new(Duration::from_millis(500), Duration::from_millis(1500));
    let settings = Settings::from_url(&url, None, timeouts).expect("settings");
    let receiver = receiver_with(settings, stripe()).0;
    let send = |id: String| {
        let receiver = &receiver;
        async move { post_stripe(receiver, &invoice_paid(&id, "cus_down", 10)).await }
    };
    assert_eq!(send("evt_up_0".into()).await.status().as_u16(), 200);

    let port = pg.port;
    tokio::task::spawn_blocking(move || pg.stop())
        .await
        .expect("task")
        .expect("stop");
    let mut failed = Vec::new();
    for i in 0..5 {
        let id = format!("evt_down_{i}");
        let started = Instant::now();
        let status = send(id.clone()).await.status().as_u16();
        let took = started.elapsed();
        assert_eq!(status, 500, "{id}");
        assert!(took < Duration::from_secs(4), "{id} took {took:?}");
        failed.push(id);
    }

    let restart = Options {
        port: Some(port),
        ..options
    };
    let dir3 = dir.clone();
    let pg = tokio::task::spawn_blocking(move || Postgres::start(&dir3, &restart))
        .await
        .expect("task")
        .expect("restart");
    // The same warm receiver: its dead connection is replaced on the next delivery.
    assert_eq!(send("evt_up_1".into()).await.status().as_u16(), 200);
    // The sender retries what failed; all of it lands, once.
    for id in &failed {
        assert_eq!(send(id.clone()).await.status().as_u16(), 200, "{id}");
    }
    let check = Settings::from_url(&url, None, claimonce_tests::db::test_timeouts())
        .expect("s")
        .connect()
        .await
        .expect("c");
    let rows: i64 = check
        .query_one("SELECT count(*) FROM processed_events", &[])
        .await
        .expect("q")
        .get(0);
    let credit: i64 = check
        .query_one("SELECT credit_balance_cents FROM customers", &[])
        .await
        .expect("q")
        .get(0);
    assert_eq!((rows, credit), (7, 70));
    drop(check);
    tokio::task::spawn_blocking(move || pg.stop())
        .await
        .expect("task")
        .expect("stop");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A delivery held at the gate inside its effect (so it holds its claim's row lock), and a
/// twin of it in another execution environment whose claim waits on that lock. Returns the
/// twin's answer; `release_first` opens the gate while the twin waits.
/// What the twin answered, its delivery's log lines, and how long it waited for its answer.
async fn slow_twin(
    lock_timeout: &str,
    release_first: bool,
) -> ((u16, String), Vec<String>, Duration) {
    let db = TestDb::new().await;
    let hold = Hold::install(&db, "customers").await;
    // The claim's lock wait is bounded inside the claim function, not on the wire.
    db.client()
        .await
        .batch_execute(&format!(
            "ALTER FUNCTION {CLAIM_FUNCTION}(text, text, text, bytea) SET lock_timeout = '{lock_timeout}'"
        ))
        .await
        .expect("lock_timeout");
    let timeouts = Timeouts::new(Duration::from_secs(2), Duration::from_secs(30));
    let environment = || {
        let settings =
            Settings::from_url(db.function_url(), None, timeouts.clone()).expect("settings");
        let (receiver, lines) = receiver_with(settings, stripe());
        (Arc::new(receiver), lines)
    };
    let ((first, _), (twin, twin_lines)) = (environment(), environment());
    twin.warm_up().await;
    let body = Arc::new(invoice_paid("evt_twin", "cus_twin", 42));
    let deliver = |r: Arc<Receiver<Stripe>>, body: Arc<Vec<u8>>| async move {
        outcome(&post_stripe(&r, &body).await)
    };
    let slow = tokio::spawn(deliver(Arc::clone(&first), Arc::clone(&body)));
    at_the_gate(&db, 1).await;
    let twin_sent = std::time::Instant::now();
    let twin_pending = tokio::spawn(deliver(Arc::clone(&twin), Arc::clone(&body)));
    let twin_answer = if release_first {
        // Both wait: the first at the gate, the twin on the first's claim.
        at_the_gate(&db, 2).await;
        hold.open().await;
        twin_pending.await.expect("task")
    } else {
        let answer = twin_pending.await.expect("task");
        hold.open().await;
        answer
    };
    let twin_waited = twin_sent.elapsed();
    let twin_log = twin_lines
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    assert_eq!(slow.await.expect("task"), (200, "processed".into()));
    // Whatever the twin answered, a redelivery settles it and the effect happened once.
    let retry = deliver(twin, body).await;
    assert_eq!(retry, (200, "duplicate".into()));
    assert_eq!(ledger(&db, "evt_twin").await, 1);
    assert_eq!(
        db.count("SELECT credit_balance_cents FROM customers").await,
        42
    );
    (twin_answer, twin_log, twin_waited)
}

#[tokio::test]
async fn a_twin_of_a_held_delivery_waits_at_most_the_claims_lock_timeout() {
    // The first delivery is held until the twin has answered: only lock_timeout ends the
    // twin's wait, with a 500 the sender retries. The client's deadline (30 s here) would
    // answer 500 too, so the test reads why: the server's lock timeout, 55P03, after at least
    // the 200 ms the claim function allows.
    let (answer, log, waited) = slow_twin("200ms", false).await;
    assert_eq!(answer, (500, "about:blank".into()));
    assert!(
        log.iter().any(|line| line.contains("sqlstate 55P03")),
        "the twin's delivery ended on the claim's lock timeout: {log:?}"
    );
    assert!(waited >= Duration::from_millis(200), "{waited:?}");
}

#[tokio::test]
async fn a_twin_waits_for_the_first_delivery_and_answers_duplicate() {
    let (answer, _, _) = slow_twin("60s", true).await;
    assert_eq!(answer, (200, "duplicate".into()));
}

/// How many 500s one event may get before the storm gives up on it: an injected failure
/// happens once per event, so only a persistent failure reaches this, and it fails the test
/// instead of looping forever.
const STORM_MAX_FAILURES: u64 = 6;

#[tokio::test]
async fn a_storm_of_duplicates_and_failures_applies_every_event_exactly_once() {
    let events = std::env::var("CLAIMONCE_STORM_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_u64);
    let db = TestDb::new().await;
    let mut environments = Vec::new();
    for _ in 0..32 {
        let environment = db.receiver(stripe()).0;
        environment.warm_up().await;
        environments.push(Arc::new(environment));
    }
    storm(&db, events, environments).await;
}

/// The storm through one execution environment serving 32 deliveries at once on at most 8
/// connections of its own (Lambda Managed Instances): every event exactly once, and the
/// environment never held more than its 8 connections (counted on the server, so straight to
/// it in the pooled pass too, where PgBouncer would hold the connections instead).
#[tokio::test]
async fn a_storm_through_one_concurrent_environment_applies_every_event_exactly_once() {
    let events = std::env::var("CLAIMONCE_STORM_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_u64)
        / 4;
    let db = TestDb::new().await;
    let url = claimonce_tests::roles::url_as(
        db.direct_url("counts the environment's own connections on the server"),
        &claimonce_tests::roles::login_name(&db.name, "stripe"),
    );
    let settings = Settings::from_url(&url, None, claimonce_tests::db::test_timeouts())
        .expect("valid test URL");
    let (environment, _) = pooled_receiver(settings, stripe(), 8);
    environment.warm_up().await;
    let environment = Arc::new(environment);
    let peak = Arc::new(AtomicU64::new(0));
    let watching = {
        let (admin, peak) = (db.client().await, Arc::clone(&peak));
        let login = claimonce_tests::roles::login_name(&db.name, "stripe");
        tokio::spawn(async move {
            loop {
                let Ok(row) = admin
                    .query_one(
                        "SELECT count(*) FROM pg_stat_activity WHERE usename = $1",
                        &[&login],
                    )
                    .await
                else {
                    break;
                };
                let now = u64::try_from(row.get::<_, i64>(0)).unwrap_or(0);
                peak.fetch_max(now, Ordering::Relaxed);
                tokio::task::yield_now().await;
            }
        })
    };
    storm(&db, events, vec![environment; 32]).await;
    watching.abort();
    let peak = peak.load(Ordering::Relaxed);
    assert!(peak <= 8, "at most 8 connections, saw {peak}");
    assert!(
        peak >= 2,
        "the deliveries ran at once, on {peak} connections"
    );
}

/// `events` events, each delivered 1 to 4 times, about 5% failing their first commit, through
/// `workers` (one task each, all released together): each applied exactly once in the end.
async fn storm(db: &TestDb, events: u64, workers: Vec<Arc<Receiver<Stripe>>>) {
    let environments = workers.len();
    // About 5% of events, chosen by a seeded generator, fail their first commit (as a deadlock
    // or a failover would): a deferred trigger raises at commit, after the claim and the whole
    // effect ran, for an event listed in `storm_failures`. The test takes the event off the
    // list when it sees its 500, so each planned failure happens once and the sender's retry
    // heals it.
    db.client()
        .await
        .batch_execute(
            "CREATE TABLE storm_failures (event_id text PRIMARY KEY);
             CREATE FUNCTION storm_fail() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 IF EXISTS (SELECT 1 FROM storm_failures WHERE event_id = NEW.event_id) THEN
                     RAISE EXCEPTION 'injected failure';
                 END IF;
                 RETURN NEW;
             END $$;
             CREATE CONSTRAINT TRIGGER storm_fail AFTER INSERT ON processed_events
                 DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION storm_fail();
             -- A deferred trigger fires at commit, as the session's own login.
             GRANT SELECT ON storm_failures TO claimonce_stripe;",
        )
        .await
        .expect("failure trigger");
    let mut rng = XorShift(0x5eed_cafe_f00d_d00d);
    let mut failures = XorShift(0xfa11_0000_5eed_0001);
    let mut expected_credit = 0_i64;
    let mut bodies = Vec::new();
    let mut planned = Vec::new();
    for i in 0..events {
        // Invoices credit a small set of hot customers; checkouts provision new ones.
        if i % 3 == 0 {
            bodies.push(checkout_completed(
                &format!("evt_s{i}"),
                &format!("cus_new_{i}"),
                "x@example.com",
            ));
        } else {
            let amount = i64::try_from(1 + rng.below(1000)).expect("amount");
            expected_credit += amount;
            bodies.push(invoice_paid(
                &format!("evt_s{i}"),
                &format!("cus_hot_{}", rng.below(8)),
                amount,
            ));
        }
        if failures.below(20) == 0 {
            planned.push(format!("evt_s{i}"));
        }
    }
    db.client()
        .await
        .execute(
            "INSERT INTO storm_failures SELECT unnest($1::text[])",
            &[&planned],
        )
        .await
        .expect("plan the failures");
    // Every event is delivered 1 to 4 times; copies land close together.
    let mut queue = VecDeque::new();
    for (i, _) in bodies.iter().enumerate() {
        for _ in 0..=rng.below(4) {
            queue.push_back(i);
        }
    }
    let mut shuffled: Vec<usize> = queue.into_iter().collect();
    rng.shuffle(&mut shuffled);
    let deliveries = shuffled.len();
    let queue = Arc::new(Mutex::new(VecDeque::from(shuffled)));
    let bodies = Arc::new(bodies);
    // 500s per event, to bound the retries and to name the events that failed.
    let failed: Arc<Vec<AtomicU64>> = Arc::new((0..events).map(|_| AtomicU64::new(0)).collect());
    let admin = Arc::new(db.client().await);
    let counts = Arc::new([
        AtomicU64::new(0),
        AtomicU64::new(0),
        AtomicU64::new(0),
        AtomicU64::new(0),
    ]);
    let started = Instant::now();
    released_together(workers, |r| {
        let (queue, bodies, counts, failed, admin) = (
            Arc::clone(&queue),
            Arc::clone(&bodies),
            Arc::clone(&counts),
            Arc::clone(&failed),
            Arc::clone(&admin),
        );
        async move {
            loop {
                let Some(i) = queue.lock().await.pop_front() else {
                    break;
                };
                let body = &bodies[i];
                let slot = match outcome(&post_stripe(&r, body).await) {
                    (200, name) if name == "processed" => 0,
                    (200, _) => 1,
                    (500, _) => {
                        admin
                            .execute(
                                "DELETE FROM storm_failures WHERE event_id = $1",
                                &[&format!("evt_s{i}")],
                            )
                            .await
                            .expect("the failure happened");
                        // The sender retries a 500 later, a bounded number of times.
                        if failed[i].fetch_add(1, Ordering::Relaxed) + 1 < STORM_MAX_FAILURES {
                            queue.lock().await.push_back(i);
                        }
                        2
                    }
                    _ => 3,
                };
                counts[slot].fetch_add(1, Ordering::Relaxed);
            }
        }
    })
    .await;
    let elapsed = started.elapsed();
    let [processed, duplicate, retried, other] = counts
        .as_ref()
        .each_ref()
        .map(|c| c.load(Ordering::Relaxed));
    eprintln!(
        "storm: {events} events, {deliveries} deliveries + {retried} retries after {} injected \
         failures, {environments} environments, {elapsed:?}: processed {processed}, duplicate \
         {duplicate}",
        planned.len()
    );
    let gave_up: Vec<usize> = (0..failed.len())
        .filter(|&i| failed[i].load(Ordering::Relaxed) >= STORM_MAX_FAILURES)
        .collect();
    assert!(gave_up.is_empty(), "persistent failures: {gave_up:?}");
    assert_eq!(other, 0, "no request was rejected");
    // Exactly the planned events failed, each at least once; no other delivery did.
    let failed_events: Vec<String> = (0..failed.len())
        .filter(|&i| failed[i].load(Ordering::Relaxed) > 0)
        .map(|i| format!("evt_s{i}"))
        .collect();
    assert!(!planned.is_empty(), "the plan injects failures");
    assert_eq!(failed_events, planned, "the failures are the planned ones");
    assert_eq!(processed, events, "each event processed exactly once");
    assert_eq!(
        processed + duplicate,
        u64::try_from(deliveries).expect("n"),
        "every delivery answered 200 in the end"
    );
    let events = i64::try_from(events).expect("n");
    assert_eq!(
        db.count("SELECT count(*) FROM processed_events").await,
        events
    );
    assert_eq!(
        db.count("SELECT count(DISTINCT event_id) FROM processed_events")
            .await,
        events
    );
    assert_eq!(
        db.count("SELECT coalesce(sum(credit_balance_cents), 0)::bigint FROM customers")
            .await,
        expected_credit
    );
    let checkouts = (events + 2) / 3;
    assert_eq!(
        db.count("SELECT count(*) FROM customers WHERE stripe_customer_id LIKE 'cus_new_%'")
            .await,
        checkouts
    );
    // One welcome per new customer, none lost with a failed attempt, none twice.
    assert_eq!(
        db.count(
            "SELECT count(*) FROM outbox WHERE topic = 'email.welcome' \
             AND dedup_key LIKE 'cus_new_%'"
        )
        .await,
        checkouts
    );
    assert_eq!(
        db.count("SELECT count(DISTINCT dedup_key) FROM outbox")
            .await,
        checkouts
    );
    assert_eq!(db.count("SELECT count(*) FROM outbox").await, checkouts);
}
