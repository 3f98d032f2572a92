//! The outbox relay: hands the messages that webhook effects wrote to `outbox` (in their
//! claim transaction) on to another system, each once, with an idempotency key: the row id, or
//! for a forwarded event the event's own identity (`<provider>:<event id>`).
//!
//! Two kinds of message. A forwarded event (a row with `body`, migration V12) is sent as the
//! bytes its sender signed, exactly, with the signature header beside it, so a consumer can
//! verify it as a receiver would. Any other row is sent as a JSON envelope around its payload.
//!
//! One run claims a batch of undispatched rows with `SELECT … FOR UPDATE SKIP LOCKED` in a
//! transaction, gives each row to a [`Dispatch`], marks the sent ones `dispatched_at = now()`,
//! counts an attempt (and keeps a data-free error) on the failed ones, and commits; then the
//! next batch, while the time budget allows. Several relays at once never take the same row:
//! a row locked by one is skipped by the others, and once committed it is no longer
//! undispatched.
//!
//! Delivery is at least once, not exactly once: a relay that dies after a send and before
//! its commit sends that row again on the next run. So the key travels with every message
//! (SQS FIFO deduplicates on it for five minutes; consumers must too, for ever).
//!
//! The transaction is held open across the sends, against the project's rule for deliveries,
//! deliberately: it locks only the claimed outbox rows, which nothing else waits on (the
//! receivers only insert new rows), and its lifetime is bounded by the time budget.

pub mod sqs;

use std::future::Future;
use std::time::{Duration, Instant};

use claimonce::config;
use claimonce::db::{Settings, Timeouts};
use claimonce::fault::Point;
use claimonce::jobs::{self, Budget, JobFailed, Metric};
use claimonce::log::Log;
use claimonce::prelude::ConfigError;
use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;
use tokio_postgres::types::Type;
use tokio_postgres::{Client, SimpleQueryMessage};

/// The binary's name, the `Function` dimension's value outside Lambda.
pub const FUNCTION: &str = "outbox-relay";

/// One outbox message, as the relay hands it on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxRow {
    /// The row id: the message's idempotency key.
    pub id: i64,
    /// What the message is (`email.welcome`, ...).
    pub topic: String,
    /// The payload, as JSON text.
    pub payload: String,
    /// When the effect wrote it (RFC 3339, UTC).
    pub created_at: String,
    /// Send attempts before this one.
    pub attempts: i32,
    /// The webhook provider whose event wrote it, if any.
    pub provider: Option<String>,
    /// That event's id, if any.
    pub event_id: Option<String>,
    /// True when `payload` is a forwarded event's signed body, exactly as it arrived.
    pub signed_body: bool,
    /// The header that signed it and its value (`X-Hub-Signature-256`, `sha256=...`).
    pub signature: Option<(String, String)>,
}

#[derive(Serialize)]
struct Envelope<'a> {
    id: String,
    topic: &'a str,
    created_at: &'a str,
    provider: Option<&'a str>,
    event_id: Option<&'a str>,
    payload: &'a RawValue,
}

impl OutboxRow {
    /// The idempotency key consumers deduplicate on. A forwarded event's is its ledger identity,
    /// `<provider>:<event id>`: the same for every copy of that event, however it came (a
    /// GitHub body replayed under another `X-GitHub-Event` after its ledger row was swept
    /// carries the key of its first forward). Any other row's is its id, in decimal.
    pub fn idempotency_key(&self) -> String {
        match (self.signed_body, &self.provider, &self.event_id) {
            (true, Some(provider), Some(event_id)) => format!("{provider}:{event_id}"),
            _ => self.id.to_string(),
        }
    }

    /// The message attributes sent beside the body: its key and topic; for a forwarded event
    /// also its provider, event id, when it was written and the signature header.
    pub fn attributes(&self) -> Vec<(&'static str, String)> {
        let mut attributes = vec![
            ("idempotency-key", self.idempotency_key()),
            ("topic", self.topic.clone()),
        ];
        if self.signed_body {
            attributes.extend(self.provider.clone().map(|p| ("provider", p)));
            attributes.extend(self.event_id.clone().map(|e| ("event-id", e)));
            attributes.push(("created-at", self.created_at.clone()));
            if let Some((header, value)) = &self.signature {
                attributes.push(("signature-header", header.clone()));
                attributes.push(("signature", value.clone()));
            }
        }
        if self
            .text()
            .is_some_and(|text| !claimonce::sqs::body::is_text(text.as_bytes()))
        {
            attributes.push((
                claimonce::sqs::body::ENCODING_ATTRIBUTE,
                "base64".to_owned(),
            ));
        }
        attributes
    }

    /// The message's size as SQS counts it against its limit: the body, and each attribute's
    /// name, data type (`String`) and value.
    pub fn message_size(&self) -> Option<usize> {
        let attributes: usize = self
            .attributes()
            .iter()
            .map(|(name, value)| name.len() + "String".len() + value.len())
            .sum();
        Some(self.message_body()?.len() + attributes)
    }

    /// The message body as sent: [`OutboxRow::text`], or its base64 when it holds a character
    /// SQS refuses (the `claimonce-body-encoding` attribute then says `base64`:
    /// [`claimonce::sqs::body`]).
    pub fn message_body(&self) -> Option<String> {
        Some(claimonce::sqs::body::encode(self.text()?.as_bytes()).0)
    }

    /// The message. A forwarded event: its signed body, verbatim. Any other row:
    /// `{"id", "topic", "created_at", "provider", "event_id", "payload"}`, the payload
    /// verbatim. `None` only if an envelope's payload is not JSON, which `jsonb` rules out.
    pub fn text(&self) -> Option<String> {
        if self.signed_body {
            return Some(self.payload.clone());
        }
        let payload: &RawValue = serde_json::from_str(&self.payload).ok()?;
        serde_json::to_string(&Envelope {
            id: self.idempotency_key(),
            topic: &self.topic,
            created_at: &self.created_at,
            provider: self.provider.as_deref(),
            event_id: self.event_id.as_deref(),
            payload,
        })
        .ok()
    }
}

/// Where messages go. Implementations must be safe to call again with the same row (the
/// relay delivers at least once) and should pass [`OutboxRow::idempotency_key`] along.
pub trait Dispatch: Send + Sync {
    /// A failure; its `Display` is stored in `outbox.last_error` and must hold no payload
    /// data and no secret.
    type Error: std::fmt::Display;

    /// Hands one row on; `Ok` means the receiving system has it.
    fn send(&self, row: &OutboxRow) -> impl Future<Output = Result<(), Self::Error>> + Send;
}

/// How a run works.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Rows claimed per transaction (`OUTBOX_BATCH_SIZE`, default 25).
    pub batch_size: u32,
    /// Longest wait for one send (`OUTBOX_SEND_TIMEOUT_MS`, default 5000).
    pub send_timeout: Duration,
    /// Attempts before a row is set aside (`OUTBOX_MAX_ATTEMPTS`, default 10).
    pub max_attempts: u32,
    /// The wait after a row's first failed attempt, doubling after each (`OUTBOX_RETRY_BASE_MS`,
    /// default 30000), up to an hour: about three hours from the first attempt to the tenth.
    pub retry_base: Duration,
}

/// The longest wait between two attempts of a row.
pub const RETRY_CAP: Duration = Duration::from_secs(3600);

impl Options {
    /// From the environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        let batch = config::number("OUTBOX_BATCH_SIZE", 25)?;
        let send_ms = config::number("OUTBOX_SEND_TIMEOUT_MS", 5000)?;
        let attempts = config::number("OUTBOX_MAX_ATTEMPTS", 10)?;
        let base_ms = config::number("OUTBOX_RETRY_BASE_MS", 30_000)?;
        if !(1..=1000).contains(&batch) || send_ms == 0 {
            return Err(ConfigError::new(
                "OUTBOX_BATCH_SIZE must be between 1 and 1000 and OUTBOX_SEND_TIMEOUT_MS above 0"
                    .into(),
            ));
        }
        if !(1..=100).contains(&attempts) || base_ms > 3_600_000 {
            return Err(ConfigError::new(
                "OUTBOX_MAX_ATTEMPTS must be between 1 and 100 and OUTBOX_RETRY_BASE_MS at most \
                 3600000"
                    .into(),
            ));
        }
        Ok(Self {
            batch_size: u32::try_from(batch).unwrap_or(25),
            send_timeout: Duration::from_millis(send_ms),
            max_attempts: u32::try_from(attempts).unwrap_or(10),
            retry_base: Duration::from_millis(base_ms),
        })
    }
}

impl Default for Options {
    fn default() -> Self {
        Self {
            batch_size: 25,
            send_timeout: Duration::from_secs(5),
            max_attempts: 10,
            retry_base: Duration::from_secs(30),
        }
    }
}

/// What one run did: the invocation's answer, but for the error.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Report {
    /// Rows sent and marked.
    pub dispatched: u64,
    /// Rows whose send failed (left undispatched, attempt counted).
    pub failed: u64,
    /// Transactions committed.
    pub batches: u32,
    /// True when the run reached the end of the queue (rows other relays held excepted).
    pub finished: bool,
    /// Age in seconds of the oldest row still undispatched after the run, set-aside rows
    /// left out (0 when none).
    pub oldest_pending_seconds: f64,
    /// Rows set aside after their last allowed attempt and not requeued, after the run.
    pub set_aside: u64,
    /// Why the run stopped early (database trouble), data-free.
    #[serde(skip)]
    pub error: Option<String>,
}

// Rows after the run's cursor, in id order, skipping any another relay holds, any set aside,
// and any whose backoff has not passed. The cursor makes a run visit each row at most once, and
// the backoff keeps a failing row from being tried first by every run, ahead of the rest.
const CLAIM: &str = "SELECT id, topic, COALESCE(body, payload::text), \
     to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'), \
     attempts, provider, event_id, body IS NOT NULL, signature_header, signature \
     FROM outbox WHERE dispatched_at IS NULL AND dead_at IS NULL \
     AND (next_attempt_at IS NULL OR next_attempt_at <= now()) AND id > $1 ORDER BY id LIMIT $2 \
     FOR UPDATE SKIP LOCKED";
const MARK_SENT: &str = "UPDATE outbox SET dispatched_at = now(), attempts = attempts + 1, \
     last_attempt_at = now(), last_error = NULL WHERE id = ANY($1)";
// A failed row waits $3 ms after its first attempt, doubling, at most $4 ms; at its $5th
// attempt it is set aside instead.
const MARK_FAILED: &str = "UPDATE outbox AS o SET attempts = o.attempts + 1, \
     last_attempt_at = now(), last_error = f.error, \
     next_attempt_at = now() + make_interval(secs => \
         least($4::float8, $3::float8 * power(2, least(o.attempts, 30))) / 1000), \
     dead_at = CASE WHEN o.attempts + 1 >= $5 THEN now() END \
     FROM unnest($1::bigint[], $2::text[]) AS f(id, error) WHERE o.id = f.id";
const OLDEST_PENDING: &str = "BEGIN; SET LOCAL ROLE claimonce_relay; \
     SELECT COALESCE(EXTRACT(EPOCH FROM now() - min(created_at)), 0)::float8::text, \
     (SELECT count(*) FROM outbox WHERE dispatched_at IS NULL AND dead_at IS NOT NULL)::text \
     FROM (SELECT created_at FROM outbox WHERE dispatched_at IS NULL AND dead_at IS NULL \
     ORDER BY id LIMIT 1) AS o; \
     COMMIT";

/// Longest `last_error` kept: enough for an error code and a sentence.
const MAX_ERROR_LEN: usize = 500;

fn summary(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!("sqlstate {}", db.code().code()),
        None if error.is_closed() => "connection closed".into(),
        None => "connection error".into(),
    }
}

fn truncate(mut text: String) -> String {
    if text.len() > MAX_ERROR_LEN {
        let mut end = MAX_ERROR_LEN;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

/// One batch's outcome.
struct Batch {
    claimed: usize,
    last_id: Option<i64>,
    sent: Vec<i64>,
    failed: Vec<(i64, String)>,
    out_of_time: bool,
}

/// One batch: its rows claimed, sent and marked in one transaction. An error is the
/// database's, data-free ([`summary`]), or a fault a test injected.
async fn run_batch<D: Dispatch>(
    client: &Client,
    timeouts: &Timeouts,
    options: &Options,
    dispatch: &D,
    budget: &Budget,
    after: i64,
) -> Result<Batch, String> {
    let db = |e: tokio_postgres::Error| summary(&e);
    // The session may sit idle in this transaction while it sends: allow that for as long as
    // the budget (plus one send) lasts, and no longer.
    let idle = budget.remaining() + options.send_timeout + Duration::from_secs(2);
    let begin = format!(
        "{}; SET LOCAL ROLE claimonce_relay; SET LOCAL idle_in_transaction_session_timeout = {}",
        timeouts.job_begin(),
        idle.as_millis()
    );
    let limit = i64::from(options.batch_size);
    // BEGIN and the claim go out together, as in a delivery's first flight.
    let (begun, claimed) = futures_util::future::join(
        client.batch_execute(&begin),
        client.query_typed(CLAIM, &[(&after, Type::INT8), (&limit, Type::INT8)]),
    )
    .await;
    let rows = begun.and(claimed).map_err(db)?;
    let mut batch = Batch {
        claimed: rows.len(),
        last_id: None,
        sent: Vec::new(),
        failed: Vec::new(),
        out_of_time: false,
    };
    for row in &rows {
        let row = outbox_row(row).map_err(db)?;
        if !budget.allows_more() {
            // Unsent rows are released at COMMIT, untouched, for the next run.
            batch.out_of_time = true;
            break;
        }
        batch.last_id = Some(row.id);
        if let Err(injected) = claimonce::fault::hit(Point::RelaySend).await {
            batch.failed.push((row.id, injected.to_string()));
            continue;
        }
        match tokio::time::timeout(options.send_timeout, dispatch.send(&row)).await {
            Ok(Ok(())) => batch.sent.push(row.id),
            Ok(Err(e)) => batch.failed.push((row.id, truncate(e.to_string()))),
            Err(_) => batch.failed.push((row.id, "send timed out".into())),
        }
    }
    claimonce::fault::hit(Point::RelayMark)
        .await
        .map_err(|injected| injected.to_string())?;
    if !batch.sent.is_empty() {
        client
            .execute_typed(MARK_SENT, &[(&batch.sent, Type::INT8_ARRAY)])
            .await
            .map_err(db)?;
    }
    if !batch.failed.is_empty() {
        let (ids, errors): (Vec<i64>, Vec<String>) = batch.failed.iter().cloned().unzip();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let (base, cap) = (ms(options.retry_base), ms(RETRY_CAP));
        let max_attempts = i32::try_from(options.max_attempts).unwrap_or(i32::MAX);
        client
            .execute_typed(
                MARK_FAILED,
                &[
                    (&ids, Type::INT8_ARRAY),
                    (&errors, Type::TEXT_ARRAY),
                    (&base, Type::FLOAT8),
                    (&cap, Type::FLOAT8),
                    (&max_attempts, Type::INT4),
                ],
            )
            .await
            .map_err(db)?;
    }
    client.batch_execute("COMMIT").await.map_err(db)?;
    Ok(batch)
}

/// A claimed row as the relay reads it.
fn outbox_row(row: &tokio_postgres::Row) -> Result<OutboxRow, tokio_postgres::Error> {
    Ok(OutboxRow {
        id: row.try_get(0)?,
        topic: row.try_get(1)?,
        payload: row.try_get(2)?,
        created_at: row.try_get(3)?,
        attempts: row.try_get(4)?,
        provider: row.try_get(5)?,
        event_id: row.try_get(6)?,
        signed_body: row.try_get(7)?,
        signature: row
            .try_get::<_, Option<String>>(8)?
            .zip(row.try_get::<_, Option<String>>(9)?),
    })
}

/// Relays undispatched rows, batch by batch, while `budget` allows.
pub async fn relay<D: Dispatch>(
    client: &Client,
    timeouts: &Timeouts,
    options: &Options,
    dispatch: &D,
    budget: &Budget,
) -> Report {
    let mut report = Report::default();
    let mut after = 0_i64;
    loop {
        if !budget.allows_more() {
            break;
        }
        let outcome = tokio::time::timeout(
            budget.remaining() + options.send_timeout + timeouts.delivery,
            run_batch(client, timeouts, options, dispatch, budget, after),
        )
        .await;
        let batch = match outcome {
            Ok(Ok(batch)) => batch,
            Ok(Err(e)) => {
                // The sends of this batch may have happened; their rows stay undispatched
                // and go out again (the idempotency key makes that harmless).
                let _ = client.batch_execute("ROLLBACK").await;
                report.error = Some(e);
                break;
            }
            Err(_) => {
                report.error = Some("batch timed out".into());
                break;
            }
        };
        report.batches += 1;
        report.dispatched += batch.sent.len() as u64;
        report.failed += batch.failed.len() as u64;
        if batch.out_of_time {
            break;
        }
        if batch.claimed < options.batch_size as usize {
            report.finished = true;
            break;
        }
        match batch.last_id {
            Some(id) => after = id,
            None => break,
        }
    }
    if report.error.is_none() {
        match oldest_pending(client, timeouts).await {
            Ok((age, set_aside)) => {
                report.oldest_pending_seconds = age;
                report.set_aside = set_aside;
            }
            Err(e) => report.error = Some(e),
        }
    }
    report
}

/// Age in seconds of the oldest undispatched row that is still tried (0 when there is none),
/// and how many rows are set aside.
pub async fn oldest_pending(client: &Client, timeouts: &Timeouts) -> Result<(f64, u64), String> {
    let answer = tokio::time::timeout(timeouts.delivery, client.simple_query(OLDEST_PENDING))
        .await
        .map_err(|_| "backlog query timed out".to_owned())?;
    let messages = match answer {
        Ok(messages) => messages,
        Err(e) => {
            let _ = client.batch_execute("ROLLBACK").await;
            return Err(summary(&e));
        }
    };
    messages
        .iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(row) => Some((
                row.get(0).and_then(|v| v.parse().ok())?,
                row.get(1).and_then(|v| v.parse().ok())?,
            )),
            _ => None,
        })
        .ok_or_else(|| "backlog query returned nothing".to_owned())
}

/// The relay as a Lambda function.
#[derive(Debug)]
pub struct Relay<D> {
    settings: Settings,
    options: Options,
    dispatch: D,
    log: Log,
    function: String,
}

impl<D: Dispatch> Relay<D> {
    /// Assembles a relay. `function` is the `Function` metric dimension.
    pub fn new(
        settings: Settings,
        options: Options,
        dispatch: D,
        log: Log,
        function: String,
    ) -> Self {
        Self {
            settings,
            options,
            dispatch,
            log,
            function,
        }
    }

    /// One run: connect, relay within `budget`, log one JSON line with the metrics, return
    /// the report. Database trouble is an error, after the line is logged; failed sends are
    /// not (they are counted, kept and retried).
    pub async fn run(&self, budget: &Budget) -> Result<Report, JobFailed> {
        let started = Instant::now();
        let report = match self.settings.connect().await {
            Ok(client) => {
                relay(
                    &client,
                    self.settings.timeouts(),
                    &self.options,
                    &self.dispatch,
                    budget,
                )
                .await
            }
            Err(e) => Report {
                error: Some(e.to_string()),
                ..Report::default()
            },
        };
        self.write(&report, started);
        match &report.error {
            Some(e) => Err(JobFailed {
                job: "outbox relay",
                reason: e.clone(),
            }),
            None => Ok(report),
        }
    }

    fn write(&self, report: &Report, started: Instant) {
        let mut metrics = vec![
            Metric {
                name: "OutboxDispatched",
                unit: "Count",
                value: report.dispatched as f64,
            },
            Metric {
                name: "OutboxFailed",
                unit: "Count",
                value: report.failed as f64,
            },
            Metric {
                name: "OutboxSetAside",
                unit: "Count",
                value: report.set_aside as f64,
            },
        ];
        // Measured only by a run that reached the end: a failed run reports no age, so the
        // backlog alarm sees missing data (breaching) instead of a 0 that hides the backlog.
        let oldest_pending_seconds = report
            .error
            .is_none()
            .then_some(report.oldest_pending_seconds);
        if let Some(value) = oldest_pending_seconds {
            metrics.push(Metric {
                name: "OutboxOldestPendingSeconds",
                unit: "Seconds",
                value,
            });
        }
        let line = claimonce::log::fields! {
            dispatched: report.dispatched,
            failed: report.failed,
            batches: report.batches,
            finished: report.finished,
            set_aside: report.set_aside,
            oldest_pending_seconds: oldest_pending_seconds;
            ..jobs::report_end(started, report.error.as_deref(), &self.function, &metrics)
        };
        let level = if report.error.is_some() {
            claimonce::log::Level::Error
        } else if report.failed > 0 || report.set_aside > 0 {
            claimonce::log::Level::Warn
        } else {
            claimonce::log::Level::Info
        };
        self.log.write(level, "outbox relay", line);
    }
}

impl<D: Dispatch + Sync> claimonce::jobs::Job for Relay<D> {
    type Report = Report;

    /// Kept before the invocation's deadline: one send, one database step and the report.
    fn margin(&self) -> Duration {
        self.options.send_timeout + self.settings.timeouts().delivery + Duration::from_secs(1)
    }

    async fn run(&self, budget: Budget, _event: Value) -> Result<Report, JobFailed> {
        Relay::run(self, &budget).await
    }
}

/// The whole of the function's `main`: settings, options and the SQS dispatcher from the
/// environment (a bad value is one logged line naming the variable), then one relay run per
/// invocation, budgeted by the invocation's deadline.
pub async fn run_from_env() -> Result<(), lambda_runtime::Error> {
    let log = Log::process();
    let built = async {
        let options = Options::from_env()?;
        let dispatch = sqs::Sqs::from_env().await?;
        let settings = Settings::from_env().await?;
        Ok::<_, ConfigError>(Relay::new(
            settings,
            options,
            dispatch,
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

    fn row(payload: &str) -> OutboxRow {
        OutboxRow {
            id: 42,
            topic: "email.welcome".into(),
            payload: payload.into(),
            created_at: "2026-11-29T10:00:00.000000Z".into(),
            attempts: 0,
            provider: Some("stripe".into()),
            event_id: Some("evt_1".into()),
            signed_body: false,
            signature: None,
        }
    }

    #[test]
    fn a_forwarded_event_is_its_signed_bytes_keyed_by_its_identity() {
        let signed = r#"{"b":1,  "a":[2,2], "a":3}
"#;
        let forwarded = OutboxRow {
            topic: "github.issues".into(),
            provider: Some("github".into()),
            event_id: Some("ab".repeat(32)),
            signed_body: true,
            signature: Some(("X-Hub-Signature-256".into(), "sha256=00".into())),
            ..row(signed)
        };
        assert_eq!(forwarded.message_body().as_deref(), Some(signed));
        // A body with characters SQS refuses goes base64, named by an attribute.
        let refused = OutboxRow {
            payload: "{\"title\":\"\u{FFFF}\u{FFFE}\"}".into(),
            ..forwarded.clone()
        };
        assert_eq!(
            refused.message_body().as_deref(),
            Some(
                claimonce::sqs::body::encode(refused.payload.as_bytes())
                    .0
                    .as_str()
            )
        );
        assert!(
            refused
                .attributes()
                .contains(&("claimonce-body-encoding", "base64".to_owned()))
        );
        assert!(
            !forwarded
                .attributes()
                .iter()
                .any(|a| a.0 == "claimonce-body-encoding")
        );
        assert_eq!(
            forwarded.idempotency_key(),
            format!("github:{}", "ab".repeat(32))
        );
        let names: Vec<&str> = forwarded.attributes().iter().map(|a| a.0).collect();
        assert_eq!(
            names,
            [
                "idempotency-key",
                "topic",
                "provider",
                "event-id",
                "created-at",
                "signature-header",
                "signature"
            ]
        );
        assert_eq!(row("{}").idempotency_key(), "42");
    }

    #[test]
    fn the_largest_forward_a_receiver_accepts_fits_one_sqs_message() {
        use claimonce::jobs::{FORWARD_BODY_LIMIT, SQS_MESSAGE_LIMIT};
        // Every attribute at the longest the receivers and migration V12 let through.
        let largest = OutboxRow {
            topic: "t".repeat(128),
            provider: Some("p".repeat(claimonce::MAX_EVENT_ID_LEN)),
            event_id: Some("e".repeat(claimonce::MAX_EVENT_ID_LEN)),
            signed_body: true,
            signature: Some(("h".repeat(64), "s".repeat(256))),
            ..row(&"x".repeat(FORWARD_BODY_LIMIT))
        };
        let size = largest.message_size().expect("a body");
        assert!(size <= SQS_MESSAGE_LIMIT, "{size} > {SQS_MESSAGE_LIMIT}");
    }

    #[test]
    fn the_message_carries_its_key_and_the_payload_verbatim() {
        let body = row(r#"{"email": "a@example.com", "n": 1.50}"#)
            .message_body()
            .expect("body");
        assert_eq!(
            body,
            r#"{"id":"42","topic":"email.welcome","created_at":"2026-11-29T10:00:00.000000Z","provider":"stripe","event_id":"evt_1","payload":{"email": "a@example.com", "n": 1.50}}"#
        );
        assert_eq!(row("not json").message_body(), None);
    }

    #[test]
    fn stored_errors_are_bounded() {
        assert_eq!(truncate("é".repeat(400)).len(), 500);
        assert_eq!(truncate("short".into()), "short");
    }
}
