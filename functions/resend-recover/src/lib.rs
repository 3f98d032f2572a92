//! `resend-recover`: asks Resend to replay the webhook events whose delivery failed.
//!
//! Resend (Svix underneath) retries a failed delivery for about a day and then marks the event
//! `failed`; it does not try again by itself. Its API lists a webhook's events, most recent
//! first (`GET /webhooks/{webhook_id}/events`, `limit` 1 to 100, `after` the last id of the
//! page before, `has_more`), each with its `id`, `type`, `created_at` and `status` (`success`,
//! `pending`, `attempting` or `failed`), and replays one (`POST
//! /webhooks/{webhook_id}/events/{event_id}/replay`): one more delivery, queued at once, of the
//! same message under the same id, signed as always.
//!
//! Each run lists the events created in its window (`RECOVER_LOOKBACK_HOURS`, default 72: the
//! day of retries and two days' margin) to the window's start, at most `RECOVER_MAX_PAGES` pages,
//! and asks for a replay of every event whose status is `failed` (never one still `attempting`
//! or `pending`: Resend is still delivering it), oldest first, at most
//! `RECOVER_MAX_REPLAYS` per run (default 50). The replay comes back through the Resend
//! receiver, signed; the ledger (keyed by the message id) makes it a duplicate if the first
//! delivery did commit after all. A replayed event that reaches us is `success` at the next
//! run, so it is asked for once.
//!
//! The API key (`re_...`, with full access: Resend's sending-only keys cannot read webhooks)
//! comes from `RESEND_API_KEY` or the Secrets Manager secret `RESEND_API_KEY_ARN` names; the
//! webhook is `RESEND_WEBHOOK_ID`; the API is `RESEND_API_BASE` (default
//! `https://api.resend.com`). A rate limit (429) ends the run cleanly, and this environment
//! makes no request until it resets. It needs no database and no VPC. One line per run, with
//! the recovery metrics by `Provider`.

use std::time::{Duration, Instant};

use claimonce::config;
use claimonce::jobs::{self, Budget, JobFailed, Recovery};
use claimonce::log::Log;
use claimonce::prelude::ConfigError;
use claimonce::sender_api::{Api, ApiError, ApiKey, Quiet};
use claimonce::timestamp::unix_now;
use http::Method;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The binary's name.
pub const FUNCTION: &str = "resend-recover";
/// Resend's API.
pub const DEFAULT_API_BASE: &str = "https://api.resend.com";
/// Events per page, the most `limit` takes.
pub const PAGE_SIZE: u32 = 100;

/// What a run may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// How far back (hours).
    pub lookback_hours: u64,
    /// At most this many replays per run.
    pub max_replays: u64,
    /// At most this many pages per run.
    pub max_pages: u64,
}

impl Policy {
    /// From `RECOVER_LOOKBACK_HOURS` (default 72, 1 to 720), `RECOVER_MAX_REPLAYS` (default 50,
    /// 1 to 1000) and `RECOVER_MAX_PAGES` (default 100, 1 to 1000).
    pub fn from_env() -> Result<Self, ConfigError> {
        let policy = Self {
            lookback_hours: config::number("RECOVER_LOOKBACK_HOURS", 72)?,
            max_replays: config::number("RECOVER_MAX_REPLAYS", 50)?,
            max_pages: config::number("RECOVER_MAX_PAGES", 100)?,
        };
        if !(1..=720).contains(&policy.lookback_hours) {
            return Err(ConfigError::new(
                "RECOVER_LOOKBACK_HOURS must be between 1 and 720".into(),
            ));
        }
        if !(1..=1000).contains(&policy.max_replays) {
            return Err(ConfigError::new(
                "RECOVER_MAX_REPLAYS must be between 1 and 1000".into(),
            ));
        }
        if !(1..=1000).contains(&policy.max_pages) {
            return Err(ConfigError::new(
                "RECOVER_MAX_PAGES must be between 1 and 1000".into(),
            ));
        }
        Ok(policy)
    }
}

/// One item of the webhook's events, as far as a run reads it.
#[derive(Debug, Clone, Deserialize)]
pub struct Event {
    /// The event's id (the Svix message id, the receiver's ledger key).
    pub id: String,
    /// When the event was created.
    pub created_at: String,
    /// `success`, `pending`, `attempting` or `failed`.
    pub status: String,
    /// The event type, for the log.
    #[serde(default, rename = "type")]
    pub kind: String,
}

/// One page of the listing.
#[derive(Deserialize)]
struct Page {
    data: Vec<Event>,
    #[serde(default)]
    has_more: bool,
}

/// Unix seconds of a Resend timestamp: RFC 3339 (`2026-12-01T10:00:00.000Z`), or the
/// PostgreSQL text some of its objects carry (`2026-12-01 10:00:00.000000+00`).
pub fn unix_from_resend(at: &str) -> Option<i64> {
    let mut text = at.replacen(' ', "T", 1);
    let zone = text.len().checked_sub(3).and_then(|i| text.get(i..));
    if zone.is_some_and(|z| (z.starts_with('+') || z.starts_with('-')) && !z.contains(':')) {
        text.push_str(":00");
    }
    claimonce::timestamp::unix_from_rfc3339(&text)
}

/// True for an id that can go into a request path as it is: letters, digits, `-` and `_`
/// (Resend's webhook and event ids), nothing to escape.
fn path_safe(id: &str) -> bool {
    id.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// What one run saw and did: the invocation's answer and its line, but for the error.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Pages read.
    pub pages: u64,
    /// Events listed in the window.
    pub listed: u64,
    /// Events whose status is `failed`.
    pub failed: u64,
    /// Events Resend is still delivering (`attempting` or `pending`): left to it.
    pub in_flight: u64,
    /// Replays Resend accepted.
    pub replayed: u64,
    /// Failed events not asked for: the cap, the budget or a rate limit came first, or Resend
    /// refused the request.
    pub not_replayed: u64,
    /// Requests Resend refused (not a rate limit).
    pub refused: u64,
    /// The run stopped at a rate limit: no request for this many seconds.
    pub rate_limited_seconds: Option<u64>,
    /// The whole window was listed and every failed event asked for.
    pub finished: bool,
    /// Age of the oldest failed event (seconds), 0 when none; the window's age when the
    /// listing did not reach the window's start.
    pub oldest_failure_age_seconds: u64,
    /// Why the run failed (the key refused, Resend unreachable), data-free: in the line, and
    /// the invocation's error.
    #[serde(skip)]
    pub error: Option<String>,
}

/// The recover function in one execution environment.
#[derive(Debug)]
pub struct Recoverer {
    api: Api,
    key: ApiKey,
    webhook_id: String,
    policy: Policy,
    log: Log,
    /// No request before the last rate limit resets.
    quiet: Quiet,
}

impl Recoverer {
    /// Assembles one: Resend's API at `api` with `key`, for the webhook `webhook_id`. The id
    /// goes into request paths, so it is refused unless it is letters, digits, `-` and `_`.
    pub fn new(
        api: Api,
        key: ApiKey,
        webhook_id: String,
        policy: Policy,
        log: Log,
    ) -> Result<Self, ConfigError> {
        if webhook_id.is_empty() || !path_safe(&webhook_id) {
            return Err(ConfigError::new(
                "RESEND_WEBHOOK_ID is a webhook's id: letters, digits, - and _".into(),
            ));
        }
        Ok(Self {
            api,
            key,
            webhook_id,
            policy,
            log,
            quiet: Quiet::default(),
        })
    }

    /// One run within `budget`: list, choose, replay, log one line. A run Resend refused (the
    /// key) or could not be reached is an error, after its line is logged; a rate limit is not.
    pub async fn run(&self, budget: &Budget) -> Result<Report, JobFailed> {
        let started = Instant::now();
        let mut report = Report::default();
        match self.quiet.seconds_left() {
            Some(left) => report.rate_limited_seconds = Some(left),
            None => self.recover(budget, &mut report).await,
        }
        self.write(&report, started);
        match &report.error {
            Some(e) => Err(JobFailed {
                job: "resend-recover",
                reason: e.clone(),
            }),
            None => Ok(report),
        }
    }

    async fn recover(&self, budget: &Budget, report: &mut Report) {
        let now = i64::try_from(unix_now()).unwrap_or(i64::MAX);
        let since = now
            .saturating_sub(i64::try_from(self.policy.lookback_hours * 3600).unwrap_or(i64::MAX));
        let auth = match self.key.bearer() {
            Ok(header) => header,
            Err(why) => {
                report.error = Some(why);
                return;
            }
        };
        let Some((events, reached)) = self.list(budget, &auth, since, report).await else {
            return;
        };
        let mut failed: Vec<(i64, &Event)> = Vec::new();
        for (at, event) in &events {
            match event.status.as_str() {
                "failed" => failed.push((*at, event)),
                "attempting" | "pending" => report.in_flight += 1,
                _ => {}
            }
        }
        failed.sort_by(|a, b| (a.0, &a.1.id).cmp(&(b.0, &b.1.id)));
        report.failed = failed.len() as u64;
        report.oldest_failure_age_seconds = if reached {
            failed
                .first()
                .map_or(0, |(at, _)| u64::try_from(now - at).unwrap_or(0))
        } else {
            // A failure the listing did not reach may be as old as the window.
            u64::try_from(now - since).unwrap_or(0)
        };
        let mut stopped = report.rate_limited_seconds.is_some();
        for (_, event) in &failed {
            if stopped || report.replayed >= self.policy.max_replays || !budget.allows_more() {
                report.not_replayed += 1;
                stopped = true;
                continue;
            }
            // Ids go into the path: only what an id is made of.
            if !path_safe(&event.id) {
                report.refused += 1;
                report.not_replayed += 1;
                continue;
            }
            let path = format!("/webhooks/{}/events/{}/replay", self.webhook_id, event.id);
            match self
                .api
                .send(Method::POST, &path, std::slice::from_ref(&auth), None)
                .await
            {
                Ok(answer) if answer.status.is_success() => report.replayed += 1,
                Ok(answer) => {
                    report.refused += 1;
                    report.not_replayed += 1;
                    self.log.write(
                        claimonce::log::Level::Warn,
                        "Resend refused a replay",
                        claimonce::log::fields! {
                            event_id: event.id.as_str(),
                            event_type: event.kind.as_str(),
                            status: answer.status.as_u16(),
                        },
                    );
                }
                Err(e) => {
                    report.not_replayed += 1;
                    stopped = true;
                    self.stop(e, report);
                }
            }
        }
        report.finished = reached && !stopped && report.error.is_none();
    }

    /// The events back to `since`, newest first, with their creation time; `true` with them
    /// when the listing reached `since` or the end. `None` when the run failed.
    async fn list(
        &self,
        budget: &Budget,
        auth: &(http::HeaderName, http::HeaderValue),
        since: i64,
        report: &mut Report,
    ) -> Option<(Vec<(i64, Event)>, bool)> {
        let mut events = Vec::new();
        let mut after: Option<String> = None;
        loop {
            if !budget.allows_more() || report.pages >= self.policy.max_pages {
                return Some((events, false));
            }
            let mut path = format!("/webhooks/{}/events?limit={PAGE_SIZE}", self.webhook_id);
            if let Some(id) = &after {
                path.push_str("&after=");
                path.push_str(id);
            }
            let answer = match self
                .api
                .send(Method::GET, &path, std::slice::from_ref(auth), None)
                .await
            {
                Ok(answer) => answer,
                Err(e) => {
                    self.stop(e, report);
                    return report.error.is_none().then_some((events, false));
                }
            };
            if !answer.status.is_success() {
                report.error = Some(format!(
                    "listing events: HTTP {}{}",
                    answer.status.as_u16(),
                    match answer.status.as_u16() {
                        401 | 403 =>
                            " (the API key was refused: RESEND_API_KEY, a full-access key)",
                        404 => " (no such webhook: RESEND_WEBHOOK_ID)",
                        _ => "",
                    }
                ));
                return None;
            }
            let Ok(page) = serde_json::from_slice::<Page>(&answer.body) else {
                report.error = Some("listing events: the answer is not a list of events".into());
                return None;
            };
            report.pages += 1;
            if page.data.is_empty() && page.has_more {
                report.error =
                    Some("listing events: a page with no events says there are more".into());
                return None;
            }
            let last = page.data.last().map(|e| e.id.clone());
            let mut reached = false;
            for event in page.data {
                let Some(at) = unix_from_resend(&event.created_at) else {
                    report.error =
                        Some("listing events: an event whose time cannot be read".into());
                    return None;
                };
                if at < since {
                    reached = true;
                } else {
                    report.listed += 1;
                    events.push((at, event));
                }
            }
            match last {
                Some(last) if page.has_more && !reached => {
                    if !path_safe(&last) {
                        report.error =
                            Some("listing events: an event id that is not Resend's".into());
                        return None;
                    }
                    after = Some(last);
                }
                _ => return Some((events, true)),
            }
        }
    }

    /// Records why a request got no answer: a rate limit stops the run (and this environment's
    /// requests until it resets); anything else fails it.
    fn stop(&self, e: ApiError, report: &mut Report) {
        match e {
            ApiError::RateLimited { retry_after } => {
                report.rate_limited_seconds = Some(retry_after.as_secs());
                self.quiet.until(retry_after);
            }
            e => report.error = Some(format!("Resend: {e}")),
        }
    }

    fn write(&self, report: &Report, started: Instant) {
        let line = match serde_json::to_value(report).unwrap_or(Value::Null) {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        let counts = Recovery {
            recovered: report.replayed,
            duplicates: None,
            still_failing: report.not_replayed,
            oldest_failure_age_seconds: report.oldest_failure_age_seconds,
        };
        jobs::write_recovery_report(
            &self.log,
            "resend recovery",
            "resend",
            line,
            started,
            report.error.as_deref(),
            &counts,
        );
    }
}

impl claimonce::jobs::Job for Recoverer {
    type Report = Report;

    /// The margin kept before the invocation's deadline: one request, then the line.
    fn margin(&self) -> Duration {
        claimonce::sender_api::REQUEST_TIMEOUT + Duration::from_secs(2)
    }

    async fn run(&self, budget: Budget, _event: Value) -> Result<Report, JobFailed> {
        // Boxed: the run's future is deep (HTTP client, database driver) and its layout
        // otherwise overflows the compiler's query depth inside the runtime's service.
        Box::pin(Recoverer::run(self, &budget)).await
    }
}

/// The whole of the function's `main`: the key, the webhook, the API and the policy from the
/// environment (a bad value is one line naming the variable, and the process ends before any
/// invocation), then one run per invocation.
pub async fn run_from_env() -> Result<(), lambda_runtime::Error> {
    let log = Log::process();
    let built = async {
        let key = claimonce::secrets::WebhookSecrets::from_env("RESEND_API_KEY")
            .await?
            .read()
            .await?;
        let webhook_id = config::required("RESEND_WEBHOOK_ID")?;
        let api = Api::from_env("RESEND_API_BASE", DEFAULT_API_BASE)?;
        let policy = Policy::from_env()?;
        Recoverer::new(api, ApiKey::new(&key), webhook_id, policy, log.clone())
    }
    .await;
    claimonce::jobs::serve_job(built).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resend_s_timestamps_are_read_in_both_of_its_spellings() {
        let iso = unix_from_resend("2026-12-01T10:00:00.000Z");
        assert_eq!(iso, Some(1_796_119_200));
        assert_eq!(unix_from_resend("2026-12-01 10:00:00.000000+00"), iso);
        assert_eq!(unix_from_resend("2026-12-01 12:00:00+02:00"), iso);
        assert_eq!(unix_from_resend("yesterday"), None);
    }

    #[test]
    fn a_webhook_id_that_cannot_go_into_a_path_is_refused() {
        let api = Api::new("http://127.0.0.1:9").expect("a loopback API");
        let policy = Policy {
            lookback_hours: 48,
            max_replays: 1,
            max_pages: 1,
        };
        for bad in ["", "a/b", "../x", "id?x=1"] {
            assert!(
                Recoverer::new(
                    api.clone(),
                    ApiKey::new("re_x"),
                    bad.into(),
                    policy,
                    Log::stdout()
                )
                .is_err(),
                "{bad}"
            );
        }
        assert!(
            Recoverer::new(
                api,
                ApiKey::new("re_x"),
                "4dd369bc-aa82-4ff3-97de-514ae3000ee0".into(),
                policy,
                Log::stdout()
            )
            .is_ok()
        );
    }
}
