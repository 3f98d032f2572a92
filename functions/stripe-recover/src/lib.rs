//! `stripe-recover`: the Stripe events whose webhooks did not succeed, read from Stripe's own
//! record and applied through the webhook's claim and effect.
//!
//! Stripe retries a failed delivery for 3 days (live mode) and keeps every event listable for
//! 30. `GET /v1/events?delivery_success=false` lists the events whose delivery to some endpoint
//! has not succeeded (failed, or still being retried) at any of the account's endpoints. Each
//! run lists those created in its window (from `RECOVER_LOOKBACK_HOURS` ago, default 96: the
//! 3 days of retries and a day's margin, at most 720, to `RECOVER_GRACE_SECONDS` ago, default
//! 600, so a first delivery still in flight is left to its webhook), newest first as Stripe
//! pages them, all the way to the window's start, within half its budget. Each page's ids are
//! checked against the ledger ([`claimonce::Receiver::claimed`]): what a webhook or an earlier
//! run applied is counted as a duplicate and dropped, so Stripe's list, which never learns
//! of a recovery, does not fill the run. Of the rest, the oldest `RECOVER_MAX_EVENTS` are
//! handed to [`claimonce::Receiver::recover`] oldest first: successive runs work through the
//! whole window from its old end, whatever the cap.
//!
//! A run stops between events when its budget ends, at a rate limit (429), or when the
//! database is unavailable; the next run lists again and carries on. The oldest failure it
//! reports is the oldest event it listed and did not apply, or, when the listing did not reach
//! the window's start, the window's own age: an event it could not see may be that old. It
//! writes one line with what it saw and did, and the recovery metrics by `Provider`
//! ([`claimonce::scheduled::Recovery`]).
//!
//! The key is a restricted key with read access to events only (`rk_...`), from
//! `STRIPE_API_KEY` or the Secrets Manager secret `STRIPE_API_KEY_ARN` names; the API is
//! `STRIPE_API_BASE` (default `https://api.stripe.com`).

use std::time::{Duration, Instant};

use claimonce::config::{self, ConfigError};
use claimonce::db::{Database, Settings};
use claimonce::log::Log;
use claimonce::scheduled::{self, Budget, JobFailed, Recovery};
use claimonce::sender_api::{Api, ApiError, ApiKey};
use claimonce::timestamp::unix_now;
use claimonce::{Disposition, Limits, Receiver};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use stripe_webhook::Stripe;

/// The binary's name.
pub const FUNCTION: &str = "stripe-recover";
/// Stripe's API.
pub const DEFAULT_API_BASE: &str = "https://api.stripe.com";
/// The look-back by default: Stripe's 3 days of retries and a day's margin.
pub const DEFAULT_LOOKBACK_HOURS: u64 = 96;
/// The longest look-back: Stripe lists events for 30 days.
pub const MAX_LOOKBACK_HOURS: u64 = 30 * 24;
/// Events per page, the most Stripe's `limit` takes.
pub const PAGE_SIZE: u32 = 100;

/// Which events a run looks at, and how many it may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// How far back (hours).
    pub lookback_hours: u64,
    /// Events younger than this (seconds) are left to their webhook.
    pub grace_seconds: u64,
    /// At most this many events still to apply are tried per run (those already in the ledger
    /// are not counted).
    pub max_events: u64,
}

impl Window {
    /// From `RECOVER_LOOKBACK_HOURS` (default 96, 1 to 720), `RECOVER_GRACE_SECONDS` (default
    /// 600, at most a day) and `RECOVER_MAX_EVENTS` (default 2000, 1 to 100000).
    pub fn from_env() -> Result<Self, ConfigError> {
        let window = Self {
            lookback_hours: config::number("RECOVER_LOOKBACK_HOURS", DEFAULT_LOOKBACK_HOURS)?,
            grace_seconds: config::number("RECOVER_GRACE_SECONDS", 600)?,
            max_events: config::number("RECOVER_MAX_EVENTS", 2000)?,
        };
        window.check().map_err(ConfigError::new)
    }

    fn check(self) -> Result<Self, String> {
        if !(1..=MAX_LOOKBACK_HOURS).contains(&self.lookback_hours) {
            return Err(format!(
                "the look-back is {} hours; Stripe lists events for 30 days: 1 to \
                 {MAX_LOOKBACK_HOURS}",
                self.lookback_hours
            ));
        }
        if self.grace_seconds > 86_400 {
            return Err("RECOVER_GRACE_SECONDS is at most 86400".into());
        }
        if !(1..=100_000).contains(&self.max_events) {
            return Err("RECOVER_MAX_EVENTS must be between 1 and 100000".into());
        }
        Ok(self)
    }

    /// This window with the look-back an invocation asks for (`{"lookback_hours": N}`), if it
    /// asks; anything else in the event (a schedule's) is ignored.
    pub fn for_invocation(self, event: &Value) -> Result<Self, String> {
        match event.get("lookback_hours") {
            None | Some(Value::Null) => Ok(self),
            Some(hours) => {
                let hours = hours
                    .as_u64()
                    .ok_or("lookback_hours is a whole number of hours")?;
                Self {
                    lookback_hours: hours,
                    ..self
                }
                .check()
            }
        }
    }
}

/// What one run saw and did: the invocation's answer and its line, but for the error.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Pages read.
    pub pages: u64,
    /// Events listed (`delivery_success=false`, in the window).
    pub listed: u64,
    /// Listed and still to apply, but newer than the run's cap reached: the next run's.
    pub left_for_next_run: u64,
    /// Applied: processed, or claimed with no effect (ignored).
    pub applied: u64,
    /// Already applied: the webhook did arrive, or an earlier run applied it (found in the
    /// ledger when listed, or by the claim).
    pub duplicates: u64,
    /// Could not be applied: the effect failed, or the event does not parse.
    pub failed: u64,
    /// Listed but not tried: the budget ended or the database was unavailable.
    pub not_tried: u64,
    /// The run stopped at a rate limit: come back after this many seconds.
    pub rate_limited_seconds: Option<u64>,
    /// Everything in the window was listed and tried.
    pub finished: bool,
    /// Age of the oldest event listed and not applied (failed, not tried, left for the next
    /// run), or the window's age when the listing did not reach its start (seconds); 0 when
    /// none.
    pub oldest_failure_age_seconds: u64,
    /// Why the run failed (listing refused, the database unavailable), data-free: in the
    /// line, and the invocation's error.
    #[serde(skip)]
    pub error: Option<String>,
}

impl Report {
    /// The invocation's answer.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// One page of `GET /v1/events`: each event kept as the bytes Stripe sent.
#[derive(Deserialize)]
struct Page {
    data: Vec<Box<RawValue>>,
    has_more: bool,
}

/// What the run reads of an event before handing it on.
#[derive(Deserialize)]
struct Head {
    id: String,
    created: u64,
}

/// What a listing keeps for the run to apply.
struct ToApply {
    /// Events not in the ledger, newest first, at most the cap.
    events: std::collections::VecDeque<Listed>,
    /// The oldest of those over the cap (left for the next run), when any.
    oldest_left: Option<u64>,
    /// The listing reached the window's start.
    reached: bool,
    /// The window's start (Unix seconds).
    from: u64,
}

/// One listed event.
struct Listed {
    id: String,
    created: u64,
    raw: Box<RawValue>,
}

/// The recover function in one execution environment.
#[derive(Debug)]
pub struct Recoverer {
    api: Api,
    key: ApiKey,
    receiver: Receiver<Stripe>,
    window: Window,
    log: Log,
    margin: Duration,
}

impl Recoverer {
    /// Assembles one: Stripe's API at `api` with `key`, the database `settings` (a user with
    /// the Stripe receiver's role), `window`.
    pub fn new(api: Api, key: String, settings: Settings, window: Window, log: Log) -> Self {
        // One event may take a delivery's deadline, one page a request's; then the line.
        let margin = settings
            .timeouts()
            .delivery
            .max(claimonce::sender_api::REQUEST_TIMEOUT)
            + Duration::from_secs(2);
        let receiver = Receiver::new(
            Stripe::without_webhooks(),
            Database::new(settings),
            Limits::default(),
            log.clone(),
        );
        Self {
            api,
            key: ApiKey::new(&key),
            receiver,
            window,
            log,
            margin,
        }
    }

    /// The margin kept before the invocation's deadline.
    pub fn margin(&self) -> Duration {
        self.margin
    }

    /// One run over `window`, within `budget`: list, apply oldest first, log one line, and
    /// return what it did. A run that could not list (other than a rate limit) or found the
    /// database unavailable is an error, after its line is logged.
    pub async fn run(&self, budget: &Budget, window: Window) -> Result<Report, JobFailed> {
        let started = Instant::now();
        let now = unix_now();
        let mut report = Report::default();
        let listed = self.list(budget, window, now, &mut report).await;
        self.apply(budget, listed, now, &mut report).await;
        self.write(&report, window, started);
        match &report.error {
            Some(e) => Err(JobFailed {
                job: "stripe-recover",
                reason: e.clone(),
            }),
            None => Ok(report),
        }
    }

    /// Every page of the window, newest first as Stripe pages them, until the last page, half
    /// the budget, a rate limit or an error; each page's events already in the ledger counted
    /// and dropped, and of the others only the oldest `max_events` kept.
    async fn list(
        &self,
        budget: &Budget,
        window: Window,
        now: u64,
        report: &mut Report,
    ) -> ToApply {
        let mut kept = ToApply {
            events: std::collections::VecDeque::new(),
            oldest_left: None,
            reached: false,
            from: now.saturating_sub(window.lookback_hours * 3600),
        };
        let events = &mut kept.events;
        let cap = usize::try_from(window.max_events).unwrap_or(usize::MAX);
        // The other half is for applying what was listed.
        let listing = Budget::until(std::time::Instant::now() + budget.remaining() / 2);
        let from = now.saturating_sub(window.lookback_hours * 3600);
        let to = now.saturating_sub(window.grace_seconds);
        let auth = match self.key.bearer() {
            Ok(header) => header,
            Err(why) => {
                report.error = Some(why);
                return kept;
            }
        };
        let mut after: Option<String> = None;
        loop {
            if !listing.allows_more() {
                return kept;
            }
            let mut path = format!(
                "/v1/events?delivery_success=false&limit={PAGE_SIZE}&created%5Bgte%5D={from}\
                 &created%5Blte%5D={to}"
            );
            if let Some(id) = &after {
                path.push_str("&starting_after=");
                path.push_str(id);
            }
            let answer = match self
                .api
                .send(http::Method::GET, &path, std::slice::from_ref(&auth), None)
                .await
            {
                Ok(answer) => answer,
                Err(ApiError::RateLimited { retry_after }) => {
                    report.rate_limited_seconds = Some(retry_after.as_secs());
                    return kept;
                }
                Err(e) => {
                    report.error = Some(format!("listing events: {e}"));
                    return kept;
                }
            };
            if !answer.status.is_success() {
                report.error = Some(format!(
                    "listing events: HTTP {}: {}",
                    answer.status.as_u16(),
                    stripe_error(&answer.body)
                ));
                return kept;
            }
            let Ok(page) = serde_json::from_slice::<Page>(&answer.body) else {
                report.error = Some("listing events: the answer is not a list of events".into());
                return kept;
            };
            report.pages += 1;
            if page.data.is_empty() && page.has_more {
                // Paging on would ask for the same page again, until the budget ends.
                report.error =
                    Some("listing events: a page with no events says there are more".into());
                return kept;
            }
            let mut listed = Vec::with_capacity(page.data.len());
            for raw in page.data {
                let Ok(head) = serde_json::from_str::<Head>(raw.get()) else {
                    report.error = Some("listing events: an event without id or created".into());
                    return kept;
                };
                listed.push(Listed {
                    id: head.id,
                    created: head.created,
                    raw,
                });
            }
            report.listed += listed.len() as u64;
            let ids: Vec<&str> = listed.iter().map(|e| e.id.as_str()).collect();
            let claimed = match self.receiver.claimed(&ids).await {
                Ok(claimed) => claimed,
                Err(e) => {
                    report.error = Some(match e.unavailable() {
                        Some(reason) => format!("the database is unavailable ({reason})"),
                        None => format!("looking up the listed events: {}", e.summary()),
                    });
                    return kept;
                }
            };
            // Stripe's ids are letters, digits and `_`: nothing to escape, and anything else
            // is not an id to page from.
            let last = listed.last().map(|e| e.id.clone());
            for event in listed {
                if claimed.contains(&event.id) {
                    report.duplicates += 1;
                } else {
                    events.push_back(event);
                }
            }
            // Newest first: what is over the cap is the newest, left for the next run.
            while events.len() > cap {
                if let Some(newest) = events.pop_front() {
                    report.left_for_next_run += 1;
                    kept.oldest_left = Some(
                        kept.oldest_left
                            .map_or(newest.created, |t: u64| t.min(newest.created)),
                    );
                }
            }
            if !page.has_more {
                kept.reached = true;
                return kept;
            }
            let Some(last) = last else {
                return kept;
            };
            if !last.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                report.error = Some("listing events: an event id that is not Stripe's".into());
                return kept;
            }
            after = Some(last);
        }
    }

    /// Applies the events kept, oldest first, while the budget lasts.
    async fn apply(&self, budget: &Budget, listed: ToApply, now: u64, report: &mut Report) {
        let mut events: Vec<Listed> = listed.events.into();
        events.sort_by(|a, b| (a.created, &a.id).cmp(&(b.created, &b.id)));
        let mut oldest_failure: Option<u64> = listed.oldest_left;
        let mut unavailable = None;
        for event in &events {
            if unavailable.is_some() || !budget.allows_more() {
                report.not_tried += 1;
                oldest_failure =
                    Some(oldest_failure.map_or(event.created, |t| t.min(event.created)));
                continue;
            }
            let recovered = self.receiver.recover(event.raw.get().as_bytes()).await;
            match recovered.disposition {
                Disposition::Processed | Disposition::Ignored => report.applied += 1,
                Disposition::Duplicate => report.duplicates += 1,
                _ => {
                    report.failed += 1;
                    oldest_failure =
                        Some(oldest_failure.map_or(event.created, |t| t.min(event.created)));
                    if let Some(reason) = recovered.unavailable {
                        unavailable = Some(reason);
                    }
                }
            }
        }
        if let Some(reason) = unavailable {
            report
                .error
                .get_or_insert(format!("the database is unavailable ({reason})"));
        }
        if !listed.reached {
            // An event the listing did not reach may be as old as the window.
            oldest_failure = Some(listed.from);
        }
        report.oldest_failure_age_seconds = oldest_failure.map_or(0, |t| now.saturating_sub(t));
        report.finished = listed.reached
            && report.not_tried == 0
            && report.left_for_next_run == 0
            && report.rate_limited_seconds.is_none()
            && report.error.is_none();
    }

    fn write(&self, report: &Report, window: Window, started: Instant) {
        let mut line = match report.to_json() {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        line.insert("lookback_hours".into(), window.lookback_hours.into());
        let counts = Recovery {
            recovered: report.applied,
            duplicates: Some(report.duplicates),
            still_failing: report.failed + report.not_tried + report.left_for_next_run,
            oldest_failure_age_seconds: report.oldest_failure_age_seconds,
        };
        scheduled::write_recovery_report(
            &self.log,
            "stripe recovery",
            "stripe",
            line,
            started,
            report.error.as_deref(),
            &counts,
        );
    }
}

/// Stripe's error `type` and `code` from an error answer (its `message` may quote the request,
/// so it is left out).
fn stripe_error(body: &[u8]) -> String {
    #[derive(Deserialize)]
    struct Answer {
        error: Error,
    }
    #[derive(Deserialize)]
    struct Error {
        #[serde(rename = "type")]
        kind: Option<String>,
        code: Option<String>,
    }
    match serde_json::from_slice::<Answer>(body) {
        Ok(Answer { error }) => format!(
            "{} {}",
            error.kind.as_deref().unwrap_or("-"),
            error.code.as_deref().unwrap_or("-")
        ),
        Err(_) => "not a Stripe error".into(),
    }
}

/// The whole of the function's `main`: the key, the API, the window and the database from the
/// environment (a bad value is one line naming the variable, and the process ends before any
/// invocation), then one run per invocation.
pub async fn run_from_env() -> Result<(), lambda_runtime::Error> {
    let log = Log::process();
    let built = async {
        let key = claimonce::secrets::WebhookSecrets::from_env("STRIPE_API_KEY")
            .await?
            .read()
            .await?;
        let api = Api::from_env("STRIPE_API_BASE", DEFAULT_API_BASE)?;
        let window = Window::from_env()?;
        let settings = Settings::from_env().await?;
        Ok::<_, ConfigError>(Recoverer::new(api, key, settings, window, log.clone()))
    }
    .await;
    let recoverer = log.config(built)?;
    let recoverer = &recoverer;
    scheduled::serve(recoverer.margin(), move |budget, event| async move {
        let window = recoverer.window.for_invocation(&event)?;
        // Boxed: the run's future is deep (HTTP client, database driver) and its layout
        // otherwise overflows the compiler's query depth inside the runtime's service.
        Ok(Box::pin(recoverer.run(&budget, window)).await?.to_json())
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_window_is_stripe_s_retries_and_a_margin_and_at_most_its_30_days() {
        let window = Window {
            lookback_hours: DEFAULT_LOOKBACK_HOURS,
            grace_seconds: 600,
            max_events: 2000,
        };
        assert_eq!(window.check(), Ok(window));
        let asked = window
            .for_invocation(&json!({"lookback_hours": 720}))
            .expect("30 days");
        assert_eq!(asked.lookback_hours, 720);
        assert_eq!(window.for_invocation(&json!({"version": "0"})), Ok(window));
        for bad in [json!({"lookback_hours": 721}), json!({"lookback_hours": 0})] {
            assert!(window.for_invocation(&bad).is_err(), "{bad}");
        }
        assert!(
            window
                .for_invocation(&json!({"lookback_hours": "a week"}))
                .is_err()
        );
    }

    #[test]
    fn an_error_answer_is_named_by_type_and_code_only() {
        let body = br#"{"error":{"type":"invalid_request_error","code":"api_key_expired","message":"Expired API Key provided: rk_live_123"}}"#;
        let text = stripe_error(body);
        assert_eq!(text, "invalid_request_error api_key_expired");
        assert!(!text.contains("rk_live"));
    }
}
