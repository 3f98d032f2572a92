//! The retention sweep: only rows past the window go, in bounded batches within the run's
//! budget (time, or a number of batches), as the sweeper role, and the real binary does it
//! under the Runtime API.

use std::process::Stdio;
use std::time::{Duration, Instant};

use claimonce::jobs::Budget;
use claimonce_local::runtime_api::{Outcome, RuntimeApi};
use claimonce_tests::lambda::binaries;
use claimonce_tests::{TestDb, claim_call};
use retention_sweep::{Allowance, MaxBatches, Policy, Report, sweep};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_postgres::Client;

fn plenty() -> Budget {
    Budget::until(Instant::now() + Duration::from_secs(60))
}

async fn run(db: &TestDb, policy: Policy, budget: &impl Allowance) -> Report {
    let settings = db.settings();
    let client = settings.connect().await.expect("connect");
    sweep(&client, settings.timeouts(), &policy, budget).await
}

/// Ledger rows `count` of them, received `days` ago, ids `<prefix>-<n>`.
async fn ledger_rows(client: &Client, prefix: &str, count: i64, days: i32) {
    client
        .execute(
            "INSERT INTO processed_events (provider, event_id, event_type, received_at) \
             SELECT 'stripe', $1 || '-' || n, 'invoice.paid', now() - make_interval(days => $2) \
             FROM generate_series(1, $3::bigint) AS n",
            &[&prefix, &days, &count],
        )
        .await
        .expect("insert ledger rows");
}

async fn event_ids(db: &TestDb) -> Vec<String> {
    db.client()
        .await
        .query(
            "SELECT event_id FROM processed_events ORDER BY event_id",
            &[],
        )
        .await
        .expect("ledger")
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[tokio::test]
async fn a_provider_with_a_window_of_its_own_is_swept_by_it_or_never() {
    let db = TestDb::new().await;
    let client = db.client().await;
    for (provider, days) in [
        ("stripe", 100),
        ("github", 100),
        ("github", 400),
        ("resend", 100),
    ] {
        client
            .execute(
                "INSERT INTO processed_events (provider, event_id, event_type, received_at) \
                 VALUES ($1, $1 || '-' || $2::int, 't', now() - make_interval(days => $2::int))",
                &[&provider, &days],
            )
            .await
            .expect("a claim");
    }
    // GitHub kept for good: only the others' rows past 90 days go.
    let never = Policy::new(90, 5000)
        .and_then(|p| p.with_provider("github", None))
        .expect("policy");
    let report = run(&db, never, &plenty()).await;
    assert_eq!(report.removed, 2, "{report:?}");
    assert_eq!(event_ids(&db).await, ["github-100", "github-400"]);
    // A window of GitHub's own (an operator who accepts the replay risk): 365 days.
    let year = Policy::new(90, 5000)
        .and_then(|p| p.with_provider("github", Some(365)))
        .expect("policy");
    let report = run(&db, year, &plenty()).await;
    assert_eq!(report.removed, 1, "{report:?}");
    assert_eq!(event_ids(&db).await, ["github-100"]);
    // Names that are not ledger names, and windows below the floor, are refused.
    for (provider, days) in [
        ("GitHub", None),
        ("git hub", None),
        ("", None),
        ("github", Some(7)),
    ] {
        assert!(
            Policy::new(90, 5000)
                .and_then(|p| p.with_provider(provider, days))
                .is_err(),
            "{provider:?} {days:?}"
        );
    }
}

#[tokio::test]
async fn only_rows_older_than_the_window_are_removed_and_a_rerun_removes_nothing() {
    let db = TestDb::new().await;
    let client = db.client().await;
    ledger_rows(&client, "evt_200d", 1, 200).await;
    ledger_rows(&client, "evt_100d", 1, 100).await;
    ledger_rows(&client, "evt_10d", 1, 10).await;
    // Outbox: delivered long ago (goes), delivered recently (stays), and an old message
    // never delivered (stays: the sweep never drops a pending message).
    client
        .batch_execute(
            "INSERT INTO outbox (topic, payload, created_at, dispatched_at) VALUES \
             ('t', '{}', now() - interval '200 days', now() - interval '199 days'), \
             ('t', '{}', now() - interval '10 days', now() - interval '10 days'), \
             ('t', '{}', now() - interval '200 days', NULL)",
        )
        .await
        .expect("outbox rows");

    let policy = Policy::new(90, 5000).expect("policy");
    let first = run(&db, policy.clone(), &plenty()).await;
    assert_eq!(
        first,
        Report {
            removed: 2,
            outbox_removed: 1,
            batches: 2,
            finished: true,
            error: None
        }
    );
    assert_eq!(event_ids(&db).await, ["evt_10d-1"]);
    assert_eq!(
        db.count("SELECT count(*) FROM outbox WHERE dispatched_at IS NULL OR dispatched_at > now() - interval '11 days'")
            .await,
        2
    );
    assert_eq!(db.count("SELECT count(*) FROM outbox").await, 2);

    let again = run(&db, policy, &plenty()).await;
    assert_eq!(
        (again.removed, again.outbox_removed, again.finished),
        (0, 0, true)
    );
    assert_eq!(event_ids(&db).await, ["evt_10d-1"]);
}

#[tokio::test]
async fn a_backlog_is_removed_in_several_batches_within_one_budget() {
    let db = TestDb::new().await;
    let client = db.client().await;
    ledger_rows(&client, "old", 20_000, 100).await;
    ledger_rows(&client, "new", 50, 1).await;

    let report = run(&db, Policy::new(90, 1500).expect("policy"), &plenty()).await;
    // 13 full batches and one of 500 for the ledger, one (empty) for the outbox.
    assert_eq!(
        report,
        Report {
            removed: 20_000,
            outbox_removed: 0,
            batches: 15,
            finished: true,
            error: None
        }
    );
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 50);
    assert_eq!(
        db.count("SELECT count(*) FROM processed_events WHERE event_id LIKE 'old-%'")
            .await,
        0
    );
}

#[tokio::test]
async fn a_budget_too_small_stops_between_batches_and_the_next_run_finishes() {
    let db = TestDb::new().await;
    let client = db.client().await;
    ledger_rows(&client, "old", 20_000, 100).await;

    // An already spent budget starts nothing.
    let spent = run(
        &db,
        Policy::new(90, 5).expect("policy"),
        &Budget::until(Instant::now()),
    )
    .await;
    assert_eq!(spent, Report::default());

    // A budget of 7 batches: the run stops after exactly 7, between batches, each of which
    // committed whole, and leaves the rest of the backlog to the next run.
    let partial = run(&db, Policy::new(90, 5).expect("policy"), &MaxBatches(7)).await;
    assert_eq!(
        partial,
        Report {
            removed: 35,
            outbox_removed: 0,
            batches: 7,
            finished: false,
            error: None
        }
    );
    assert_eq!(
        db.count("SELECT count(*) FROM processed_events").await,
        20_000 - 35
    );

    let rest = run(&db, Policy::new(90, 5000).expect("policy"), &plenty()).await;
    assert!(rest.finished, "{rest:?}");
    assert_eq!(rest.removed, 20_000 - 35);
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 0);
}

/// Runs `sql` as `role` on a superuser connection, returning the SQLSTATE of a failure.
async fn as_role(client: &Client, role: &str, sql: &str) -> Result<u64, String> {
    client.batch_execute("BEGIN").await.expect("begin");
    client
        .batch_execute(&format!("SET LOCAL ROLE {role}"))
        .await
        .expect("set role");
    let outcome = client.execute(sql, &[]).await;
    client.batch_execute("ROLLBACK").await.expect("rollback");
    outcome.map_err(|e| {
        e.code()
            .map_or_else(|| e.to_string(), |c| c.code().to_owned())
    })
}

#[tokio::test]
async fn only_the_sweeper_role_may_delete_from_the_ledger_and_no_role_may_rewrite_it() {
    let db = TestDb::new().await;
    db.direct_because("checks each role's privileges with SET ROLE; nothing under test runs");
    let client = db.client().await;
    ledger_rows(&client, "evt", 3, 100).await;
    let denied = Err("42501".to_owned());

    let delete = "DELETE FROM processed_events";
    let update = "UPDATE processed_events SET event_type = 'forged'";
    // The transitional handler role and every provider's role, from the registry.
    let roles: Vec<String> = std::iter::once("claimonce_handler".to_owned())
        .chain(
            claimonce_local::functions::all()
                .expect("the registry")
                .iter()
                .map(|f| format!("claimonce_{}", f.provider)),
        )
        .collect();
    assert!(roles.len() >= 5, "{roles:?}");
    for role in &roles {
        assert_eq!(as_role(&client, role, delete).await, denied, "{role}");
        assert_eq!(as_role(&client, role, update).await, denied, "{role}");
    }
    assert_eq!(as_role(&client, "claimonce_relay", delete).await, denied);
    assert_eq!(as_role(&client, "claimonce_sweeper", delete).await, Ok(3));
    assert_eq!(as_role(&client, "claimonce_sweeper", update).await, denied);
    // The handler still claims, through the claim function only (V9).
    assert_eq!(
        as_role(
            &client,
            "claimonce_stripe",
            &claim_call("stripe", "evt_new", "t")
        )
        .await,
        Ok(1)
    );
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 3);
}

#[tokio::test]
async fn the_sweep_has_only_the_sweeper_roles_rights_even_on_a_superuser_connection() {
    let db = TestDb::new().await;
    let client = db.client().await;
    ledger_rows(&client, "old", 10, 100).await;
    // In this database only, take DELETE away from the sweeper: a sweep that used the
    // connection's own (superuser) rights would not notice.
    client
        .batch_execute("REVOKE DELETE ON processed_events FROM claimonce_sweeper")
        .await
        .expect("revoke");
    let report = run(&db, Policy::new(90, 5000).expect("policy"), &plenty()).await;
    assert_eq!(
        report.error.as_deref(),
        Some("sqlstate 42501"),
        "{report:?}"
    );
    assert!(!report.finished);
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 10);
    // The failed batch left the connection usable and nothing locked.
    let settings = db.settings();
    let fresh = settings.connect().await.expect("connect");
    fresh.batch_execute("SELECT 1").await.expect("usable");
}

#[tokio::test]
async fn a_login_granted_the_sweeper_role_can_run_the_sweep() {
    let db = TestDb::new().await;
    ledger_rows(&db.client().await, "old", 4, 100).await;
    let url = claimonce_tests::roles::login_with(&db, "claimonce_sweeper").await;
    let settings =
        claimonce::db::Settings::from_url(&url, None, claimonce_tests::db::test_timeouts())
            .expect("settings");
    let client = settings.connect().await.expect("connect as the sweeper");
    let report = sweep(
        &client,
        settings.timeouts(),
        &Policy::new(90, 3).expect("policy"),
        &plenty(),
    )
    .await;
    assert_eq!(
        (report.removed, report.batches, report.finished),
        (4, 3, true),
        "{report:?}"
    );
}

#[tokio::test]
async fn the_retention_sweep_binary_sweeps_under_the_runtime_api_and_logs_its_metric() {
    let db = TestDb::new().await;
    let client = db.client().await;
    ledger_rows(&client, "old", 5, 120).await;
    ledger_rows(&client, "new", 1, 1).await;
    // GitHub's claims, as old: its registry entry's `retention = "never"` keeps them, with no
    // RETENTION_DAYS_GITHUB in the function's environment.
    client
        .batch_execute(
            "INSERT INTO processed_events (provider, event_id, event_type, received_at) \
             VALUES ('github', 'body-old', 'issues.opened', now() - interval '120 days')",
        )
        .await
        .expect("a GitHub claim");

    let api = RuntimeApi::start("retention-sweep").await.expect("api");
    let mut command = api.command(
        &binaries().await.join("retention-sweep"),
        &[
            ("DATABASE_URL", db.function_url()),
            ("RETENTION_DAYS", "90"),
            ("SWEEP_BATCH_SIZE", "2"),
        ],
    );
    command.stdout(Stdio::piped());
    let mut child = command.spawn().expect("spawn retention-sweep");
    let stdout = child.stdout.take().expect("stdout");

    // An EventBridge Scheduler invocation carries no payload of interest; any JSON will do.
    let event = json!({"source": "aws.scheduler", "detail-type": "Scheduled Event", "detail": {}});
    let outcome = api
        .invoke(event.to_string(), Duration::from_secs(30))
        .await
        .expect("the sweep answers");
    let Outcome::Response(payload) = outcome else {
        panic!("the sweep failed: {outcome:?}");
    };
    let result: Value = serde_json::from_slice(&payload).expect("JSON result");
    assert_eq!(
        result,
        json!({"removed": 5, "outbox_removed": 0, "batches": 4, "finished": true})
    );
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 2);
    assert_eq!(
        db.count("SELECT count(*) FROM processed_events WHERE provider = 'github'")
            .await,
        1
    );

    // Its one line is CloudWatch Embedded Metric Format with the SweptRows metric.
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(line) = lines.next_line().await.expect("read stdout") {
            if line.contains("\"retention sweep\"") {
                return line;
            }
        }
        panic!("no sweep line");
    })
    .await
    .expect("the sweep logs its line");
    let line: Value = serde_json::from_str(&line).expect("JSON line");
    assert_eq!(line["removed"], 5);
    assert_eq!(line["finished"], true);
    assert_eq!(line["SweptRows"], 5.0);
    assert_eq!(line["Function"], "retention-sweep");
    let directive = &line["_aws"]["CloudWatchMetrics"][0];
    assert_eq!(directive["Namespace"], "claimonce");
    assert_eq!(directive["Dimensions"], json!([["Function"]]));
    assert!(
        directive["Metrics"]
            .as_array()
            .expect("metrics")
            .contains(&json!({"Name": "SweptRows", "Unit": "Count"})),
        "{directive}"
    );
    assert!(!line.to_string().contains("postgres://"), "{line}");
}
