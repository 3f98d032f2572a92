//! The retention sweep: the only delete the claim ledger ever sees.
//!
//! A ledger row must outlive every redelivery of its event, or the redelivery would be applied
//! again. Stripe retries a failed delivery for up to 3 days and keeps events (which an
//! operator can resend) for 30 days; Resend (Svix) retries for about a day. Rows older than
//! `RETENTION_DAYS` (default 90, at least 31) are past all of that and are removed here,
//! together with outbox messages delivered longer ago than the same window.
//!
//! A provider may have a window of its own: its registry entry's `retention` (`never`, or a
//! number of days), compiled in, and `RETENTION_DAYS_<PROVIDER>` in the environment, which
//! overrides it. A signature that never expires (GitHub's: no timestamp is signed) stays valid
//! for a captured body forever, and only its ledger row makes a replay a duplicate, so GitHub's
//! entry says `never`: its rows are kept however the function is configured.
//!
//! Every batch is one short transaction in one round trip, running as `claimonce_sweeper`
//! (`SET LOCAL ROLE`), so the sweep never holds locks for long, can do nothing the sweeper
//! role may not, and can stop between batches when its time budget runs out. It does not lock
//! rows before deleting them (`FOR UPDATE SKIP LOCKED` would need UPDATE on the ledger, which
//! no role has): nothing but another sweep ever locks an old ledger row, the function's
//! reserved concurrency of 1 rules that out, and `lock_timeout` bounds the wait if it happens.

use std::time::{Duration, Instant};

use claimonce::config;
use claimonce::db::{Settings, Timeouts};
use claimonce::fault::Point;
use claimonce::jobs::{self, Budget, JobFailed, Metric};
use claimonce::log::Log;
use claimonce::prelude::ConfigError;
use serde::Serialize;
use serde_json::Value;
use tokio_postgres::{Client, SimpleQueryMessage};

mod registered {
    include!(concat!(env!("OUT_DIR"), "/registered.rs"));
}

/// The binary's name, the `Function` dimension's value outside Lambda.
pub const FUNCTION: &str = "retention-sweep";

/// How much to remove per run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Rows older than this many days go, for every provider without a window of its own.
    pub retention_days: u32,
    /// Rows removed per batch (one transaction).
    pub batch_size: u32,
    /// Providers with a window of their own: `None` keeps their rows for good.
    pub per_provider: Vec<(String, Option<u32>)>,
}

/// A window as written: `never` (`Some(None)`), a number of days, or nothing valid (`None`).
fn window(value: &str) -> Option<Option<u32>> {
    match value.trim() {
        "never" => Some(None),
        n => n.parse::<u32>().ok().map(Some),
    }
}

/// The prefix of a provider's own window: `RETENTION_DAYS_GITHUB=never`.
pub const PROVIDER_WINDOW_PREFIX: &str = "RETENTION_DAYS_";

/// The smallest retention accepted: Stripe keeps events for 30 days and an operator may resend
/// any of them (Dashboard, CLI, API); a shorter window would apply such a resend twice.
pub const MIN_RETENTION_DAYS: u32 = 31;

impl Policy {
    /// From `RETENTION_DAYS` (default 90, at least [`MIN_RETENTION_DAYS`]) and
    /// `SWEEP_BATCH_SIZE` (default 5000, 1 to 100000), with the registry's windows
    /// ([`Policy::with_registry`]) and `RETENTION_DAYS_<PROVIDER>` over them.
    pub fn from_env() -> Result<Self, ConfigError> {
        let days = config::number("RETENTION_DAYS", 90)?;
        let batch = config::number("SWEEP_BATCH_SIZE", 5000)?;
        let mut policy = Self::new(
            u32::try_from(days).unwrap_or(u32::MAX),
            u32::try_from(batch).unwrap_or(u32::MAX),
        )?
        .with_registry()?;
        let mut own: Vec<(String, String)> = std::env::vars()
            .filter_map(|(name, value)| {
                let provider = name.strip_prefix(PROVIDER_WINDOW_PREFIX)?;
                Some((provider.to_ascii_lowercase(), value))
            })
            .collect();
        own.sort();
        for (provider, value) in own {
            let days = window(&value).ok_or_else(|| {
                ConfigError::new(format!(
                    "{PROVIDER_WINDOW_PREFIX}{}: a number of days or never",
                    provider.to_ascii_uppercase()
                ))
            })?;
            policy = policy.with_provider(&provider, days)?;
        }
        Ok(policy)
    }

    /// Gives each provider whose registry entry has a `retention` that window: the built-in
    /// default, so that a provider whose claims must be kept (`never`) is never swept for want
    /// of a variable.
    pub fn with_registry(mut self) -> Result<Self, ConfigError> {
        for (provider, value) in registered::REGISTERED {
            let days = window(value).ok_or_else(|| {
                ConfigError::new(format!(
                    "{provider}'s registry entry: retention is a number of days or never"
                ))
            })?;
            self = self.with_provider(provider, days)?;
        }
        Ok(self)
    }

    /// Gives `provider` (its ledger name) a window of its own: `days`, or `None` to keep its
    /// rows for good.
    pub fn with_provider(mut self, provider: &str, days: Option<u32>) -> Result<Self, ConfigError> {
        let valid = !provider.is_empty()
            && provider.len() <= 32
            && provider
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !valid {
            return Err(ConfigError::new(format!(
                "{PROVIDER_WINDOW_PREFIX}{}: not a provider's ledger name (a-z, 0-9, _)",
                provider.to_ascii_uppercase()
            )));
        }
        if let Some(days) = days {
            check_days(days)?;
        }
        self.per_provider.retain(|(p, _)| p != provider);
        self.per_provider.push((provider.to_owned(), days));
        Ok(self)
    }

    /// Checks the bounds.
    pub fn new(retention_days: u32, batch_size: u32) -> Result<Self, ConfigError> {
        check_days(retention_days)?;
        if !(1..=100_000).contains(&batch_size) {
            return Err(ConfigError::new(
                "SWEEP_BATCH_SIZE must be between 1 and 100000".into(),
            ));
        }
        Ok(Self {
            retention_days,
            batch_size,
            per_provider: Vec::new(),
        })
    }

    /// Each ledger delete the policy makes: (the providers it covers, as an SQL condition,
    /// and its window in days). Provider names are checked to be `[a-z0-9_]`, so inlining them
    /// is safe.
    fn ledger_windows(&self) -> Vec<(String, u32)> {
        let quoted = |p: &str| format!("'{p}'");
        let mut windows = Vec::new();
        let others: Vec<String> = self.per_provider.iter().map(|(p, _)| quoted(p)).collect();
        windows.push((
            if others.is_empty() {
                "true".to_owned()
            } else {
                format!("provider NOT IN ({})", others.join(", "))
            },
            self.retention_days,
        ));
        for (provider, days) in &self.per_provider {
            if let Some(days) = days {
                windows.push((format!("provider = {}", quoted(provider)), *days));
            }
        }
        windows
    }
}

fn check_days(days: u32) -> Result<(), ConfigError> {
    if (MIN_RETENTION_DAYS..=36_500).contains(&days) {
        Ok(())
    } else {
        Err(ConfigError::new(format!(
            "RETENTION_DAYS must be between {MIN_RETENTION_DAYS} and 36500: a shorter window \
             would forget events their senders may still redeliver (Stripe keeps events for \
             30 days)"
        )))
    }
}

/// What one run did: the invocation's answer, but for the error.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Report {
    /// Ledger rows removed.
    pub removed: u64,
    /// Delivered outbox rows removed.
    pub outbox_removed: u64,
    /// Transactions run.
    pub batches: u32,
    /// True when nothing older than the window is left; false when the budget ran out (or a
    /// batch failed) first, and the next run goes on.
    pub finished: bool,
    /// Why the run stopped early, data-free (category and SQLSTATE).
    #[serde(skip)]
    pub error: Option<String>,
}

/// The tables the sweep prunes, in order: the ledger for the providers a condition names.
#[derive(Debug, Clone)]
enum Table {
    Ledger(String),
    Outbox,
}

impl Table {
    /// One batch's statement. The values are integers we computed and provider names checked
    /// to be `[a-z0-9_]`, so inlining them is safe; the whole batch then goes out as one simple
    /// query: one round trip, no prepared statement.
    fn delete(&self, cutoff_unix: u64, limit: u32) -> String {
        match self {
            Table::Ledger(providers) => format!(
                "WITH gone AS (DELETE FROM processed_events WHERE id IN (\
                 SELECT id FROM processed_events WHERE received_at < to_timestamp({cutoff_unix}) \
                 AND {providers} ORDER BY received_at LIMIT {limit}) RETURNING 1) \
                 SELECT count(*) FROM gone"
            ),
            Table::Outbox => format!(
                "WITH gone AS (DELETE FROM outbox WHERE id IN (\
                 SELECT id FROM outbox WHERE dispatched_at < to_timestamp({cutoff_unix}) \
                 ORDER BY dispatched_at LIMIT {limit}) RETURNING 1) SELECT count(*) FROM gone"
            ),
        }
    }
}

/// A data-free description of a database error: SQLSTATE (and constraint), never the
/// server's message, which can quote values.
fn summary(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!("sqlstate {}", db.code().code()),
        None if error.is_closed() => "connection closed".into(),
        None => "connection error".into(),
    }
}

/// Runs one batch: `BEGIN` with the timeouts, the sweeper role, the delete, `COMMIT`.
async fn batch(client: &Client, timeouts: &Timeouts, sql: &str) -> Result<u64, String> {
    let text = format!(
        "{}; SET LOCAL ROLE claimonce_sweeper; {sql}; COMMIT",
        timeouts.job_begin()
    );
    let outcome = tokio::time::timeout(timeouts.delivery, client.simple_query(&text)).await;
    match outcome {
        Err(_) => Err("batch timed out".into()),
        Ok(Err(e)) => {
            // The error skipped the rest of the query, COMMIT included: end the transaction
            // so the connection is clean (if it is gone, the server rolled back anyway).
            let _ = client.batch_execute("ROLLBACK").await;
            Err(summary(&e))
        }
        Ok(Ok(messages)) => {
            first_number(&messages).ok_or_else(|| "the delete returned no count".into())
        }
    }
}

/// The database's time now, in Unix seconds: one statement.
async fn database_now(client: &Client, timeouts: &Timeouts) -> Result<u64, String> {
    let read = client.simple_query("SELECT floor(extract(epoch FROM now()))::bigint");
    match tokio::time::timeout(timeouts.delivery, read).await {
        Err(_) => Err("reading the database's clock timed out".into()),
        Ok(Err(e)) => Err(summary(&e)),
        Ok(Ok(messages)) => {
            first_number(&messages).ok_or_else(|| "the database's clock returned nothing".into())
        }
    }
}

/// The first column of a simple query's first row, as a number.
fn first_number(messages: &[SimpleQueryMessage]) -> Option<u64> {
    messages.iter().find_map(|m| match m {
        SimpleQueryMessage::Row(row) => row.get(0).and_then(|v| v.parse().ok()),
        _ => None,
    })
}

/// What decides, before each batch, whether the run may start another.
pub trait Allowance {
    /// True when one more batch may start, `done` batches into the run.
    fn allows_another(&self, done: u32) -> bool;
}

/// The invocation's time budget: the function's own limit.
impl Allowance for Budget {
    fn allows_another(&self, _done: u32) -> bool {
        self.allows_more()
    }
}

/// At most this many batches in the run (a test's exact stop; an operator's bounded run).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaxBatches(pub u32);

impl Allowance for MaxBatches {
    fn allows_another(&self, done: u32) -> bool {
        done < self.0
    }
}

/// Removes, batch by batch, ledger rows received before the database's `now() -
/// retention_days`, then outbox rows dispatched before it, while `budget` allows another
/// batch. The cutoff is fixed at the start, so a run's work is finite however busy the
/// receivers are.
pub async fn sweep<A: Allowance + ?Sized>(
    client: &Client,
    timeouts: &Timeouts,
    policy: &Policy,
    budget: &A,
) -> Report {
    // The database's clock, which stamped every row: a function's clock that runs ahead of it
    // would remove rows still inside their window.
    let now = match database_now(client, timeouts).await {
        Ok(now) => now,
        Err(e) => {
            return Report {
                error: Some(e),
                ..Report::default()
            };
        }
    };
    let cutoff = |days: u32| now.saturating_sub(u64::from(days) * 86_400);
    let mut jobs: Vec<(Table, u64)> = policy
        .ledger_windows()
        .into_iter()
        .map(|(providers, days)| (Table::Ledger(providers), cutoff(days)))
        .collect();
    jobs.push((Table::Outbox, cutoff(policy.retention_days)));
    let mut report = Report::default();
    let point = |batches: u32| match batches {
        0 => Point::RetentionClock,
        _ => Point::RetentionBatch,
    };
    for (table, cutoff) in jobs {
        let sql = table.delete(cutoff, policy.batch_size);
        loop {
            if !budget.allows_another(report.batches) {
                return report;
            }
            if let Err(injected) = claimonce::fault::hit(point(report.batches)).await {
                report.error = Some(injected.to_string());
                return report;
            }
            let removed = match batch(client, timeouts, &sql).await {
                Ok(n) => n,
                Err(e) => {
                    report.error = Some(e);
                    return report;
                }
            };
            report.batches += 1;
            match table {
                Table::Ledger(_) => report.removed += removed,
                Table::Outbox => report.outbox_removed += removed,
            }
            // A short batch means nothing older than the cutoff is left in this table.
            if removed < u64::from(policy.batch_size) {
                break;
            }
        }
    }
    report.finished = true;
    report
}

/// The sweep as a Lambda function: its database settings, policy and log.
#[derive(Debug)]
pub struct Sweeper {
    settings: Settings,
    policy: Policy,
    log: Log,
    function: String,
}

impl Sweeper {
    /// Assembles a sweeper. `function` is the `Function` metric dimension.
    pub fn new(settings: Settings, policy: Policy, log: Log, function: String) -> Self {
        Self {
            settings,
            policy,
            log,
            function,
        }
    }

    /// One run: connect, sweep within `budget`, log one JSON line (with the `SweptRows`
    /// metric) and return the report. A run that could not connect or whose batch failed is
    /// an error, after its line is logged.
    pub async fn run<A: Allowance + ?Sized>(&self, budget: &A) -> Result<Report, JobFailed> {
        let started = Instant::now();
        let report = match self.settings.connect().await {
            Ok(client) => sweep(&client, self.settings.timeouts(), &self.policy, budget).await,
            Err(e) => Report {
                error: Some(e.to_string()),
                ..Report::default()
            },
        };
        self.write(&report, started);
        match &report.error {
            Some(e) => Err(JobFailed {
                job: "retention sweep",
                reason: e.clone(),
            }),
            None => Ok(report),
        }
    }

    fn write(&self, report: &Report, started: Instant) {
        // Counts fit an f64 exactly far beyond any realistic ledger.
        let metrics = [
            Metric {
                name: "SweptRows",
                unit: "Count",
                value: report.removed as f64,
            },
            Metric {
                name: "SweptOutboxRows",
                unit: "Count",
                value: report.outbox_removed as f64,
            },
        ];
        let line = claimonce::log::fields! {
            removed: report.removed,
            outbox_removed: report.outbox_removed,
            batches: report.batches,
            finished: report.finished,
            retention_days: self.policy.retention_days,
            batch_size: self.policy.batch_size;
            ..jobs::report_end(started, report.error.as_deref(), &self.function, &metrics)
        };
        let level = if report.error.is_some() {
            claimonce::log::Level::Error
        } else {
            claimonce::log::Level::Info
        };
        self.log.write(level, "retention sweep", line);
    }
}

impl claimonce::jobs::Job for Sweeper {
    type Report = Report;

    /// The margin kept before the invocation's deadline: one batch can take up to the
    /// delivery timeout, then the report is written.
    fn margin(&self) -> Duration {
        self.settings.timeouts().delivery + Duration::from_secs(2)
    }

    async fn run(&self, budget: Budget, _event: Value) -> Result<Report, JobFailed> {
        Sweeper::run(self, &budget).await
    }
}

/// The whole of the function's `main`: settings and policy from the environment (a bad value
/// is one logged line naming the variable, and the process ends before any invocation), then
/// one sweep per invocation, budgeted by the invocation's deadline.
pub async fn run_from_env() -> Result<(), lambda_runtime::Error> {
    let log = Log::process();
    let built = async {
        let policy = Policy::from_env()?;
        let settings = Settings::from_env().await?;
        Ok::<_, ConfigError>(Sweeper::new(
            settings,
            policy,
            log.clone(),
            jobs::function_name(FUNCTION),
        ))
    }
    .await;
    claimonce::jobs::serve_job(built).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No spilled message outlives the shortest ledger retention: the drain's bound on a
    /// signed time (the spill queues' 14 days and the largest tolerance) is well inside it, so a
    /// replay through the drain is refused before its claim could be swept.
    #[test]
    fn the_drain_s_signature_bound_is_well_inside_the_shortest_retention() {
        let shortest = u64::from(MIN_RETENTION_DAYS) * 86_400;
        assert!(
            claimonce::jobs::SPILLED_SIGNATURE_MAX_AGE * 2 < shortest,
            "{} s against {shortest} s",
            claimonce::jobs::SPILLED_SIGNATURE_MAX_AGE
        );
    }

    #[test]
    fn the_registry_s_windows_are_the_built_in_default() {
        let policy = Policy::new(90, 5000)
            .and_then(Policy::with_registry)
            .expect("a policy");
        assert!(
            policy.per_provider.contains(&("github".to_owned(), None)),
            "GitHub's entry says never: {:?}",
            policy.per_provider
        );
        // The environment may still set a window of its own over it.
        let over = policy.with_provider("github", Some(400)).expect("a window");
        assert!(
            over.per_provider
                .contains(&("github".to_owned(), Some(400)))
        );
        assert!(!over.per_provider.contains(&("github".to_owned(), None)));
    }

    #[test]
    fn the_policy_refuses_a_window_shorter_than_the_senders_resend() {
        assert_eq!(
            Policy::new(90, 5000),
            Ok(Policy {
                retention_days: 90,
                batch_size: 5000,
                per_provider: Vec::new(),
            })
        );
        assert!(Policy::new(3, 5000).is_err());
        // Stripe keeps events for 30 days, and an operator may resend any of them.
        assert!(Policy::new(30, 5000).is_err());
        assert!(Policy::new(31, 5000).is_ok());
        assert!(Policy::new(90, 0).is_err());
        assert!(Policy::new(90, 1_000_000).is_err());
    }

    #[test]
    fn a_provider_kept_for_good_is_left_out_of_the_default_window_and_gets_none() {
        let policy = Policy::new(90, 10)
            .and_then(|p| p.with_provider("github", None))
            .and_then(|p| p.with_provider("resend", Some(40)))
            .expect("policy");
        assert_eq!(
            policy.ledger_windows(),
            [
                ("provider NOT IN ('github', 'resend')".to_owned(), 90),
                ("provider = 'resend'".to_owned(), 40),
            ]
        );
    }
}
