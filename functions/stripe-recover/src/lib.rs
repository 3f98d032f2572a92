//! `stripe-recover`: the Stripe events whose webhooks did not succeed, read from Stripe's own
//! record and applied through the webhook's claim and effect.
//!
//! Stripe retries a failed delivery for 3 days (live mode) and keeps every event listable for
//! 30. `GET /v1/events?delivery_success=false` lists the events whose delivery to some endpoint
//! has not succeeded (failed, or still being retried). Each run lists those created in its
//! window (from `RECOVER_LOOKBACK_HOURS` ago, default 96: the 3 days of retries and a day's
//! margin, at most 720, to `RECOVER_GRACE_SECONDS` ago, default 600, so a first delivery still
//! in flight is left to its webhook), oldest first, and hands each to
//! [`claimonce::Receiver::recover`]: an event that did arrive is a duplicate, one that did
//! not is applied once. Stripe never learns of it, so an event stays in the list (a duplicate at
//! every run) until it leaves the window.
//!
//! A run stops between events when its budget ends, at a rate limit (429), or when the
//! database is unavailable; the next run lists again and carries on, the events already applied
//! now duplicates. It writes one line with what it saw and did, and the recovery metrics by
//! `Provider` ([`claimonce::scheduled::Recovery`]).
//!
//! The key is a restricted key with read access to events only (`rk_...`), from
//! `STRIPE_API_KEY` or the Secrets Manager secret `STRIPE_API_KEY_ARN` names; the API is
//! `STRIPE_API_BASE` (default `https://api.stripe.com`).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use claimonce::config::{self, ConfigError};
use claimonce::db::{Database, Settings};
use claimonce::log::Log;
use claimonce::scheduled::{self, Budget, JobFailed, Recovery};
use claimonce::sender_api::{Api, ApiError, secret_header};
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
    /// At most this many events are listed per run.
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
    /// Applied: processed, or claimed with no effect (ignored).
    pub applied: u64,
    /// Already applied: the webhook did arrive, or an earlier run applied it.
    pub duplicates: u64,
    /// Could not be applied: the effect failed, or the event does not parse.
    pub failed: u64,
    /// Listed but not tried: the budget ended or the database was unavailable.
    pub not_tried: u64,
    /// The run stopped at a rate limit: come back after this many seconds.
    pub rate_limited_seconds: Option<u64>,
    /// Everything in the window was listed and tried.
    pub finished: bool,
    /// Age of the oldest event failed or not tried (seconds), 0 when none.
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

/// The restricted key; never shown.
struct ApiKey(String);

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey([redacted])")
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
            key: ApiKey(key),
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
        let events = self.list(budget, window, now, &mut report).await;
        self.apply(budget, events, now, &mut report).await;
        self.write(&report, window, started);
        match &report.error {
            Some(e) => Err(JobFailed {
                job: "stripe-recover",
                reason: e.clone(),
            }),
            None => Ok(report),
        }
    }

    /// Every page of the window, newest first as Stripe pages them, until the last page, the
    /// cap, the budget, a rate limit or an error.
    async fn list(
        &self,
        budget: &Budget,
        window: Window,
        now: u64,
        report: &mut Report,
    ) -> Vec<Listed> {
        let from = now.saturating_sub(window.lookback_hours * 3600);
        let to = now.saturating_sub(window.grace_seconds);
        let auth = match secret_header(
            http::header::AUTHORIZATION,
            &format!("Bearer {}", self.key.0),
        ) {
            Ok(header) => header,
            Err(why) => {
                report.error = Some(why);
                return Vec::new();
            }
        };
        let mut events: Vec<Listed> = Vec::new();
        let mut after: Option<String> = None;
        loop {
            if !budget.allows_more() {
                return events;
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
                    return events;
                }
                Err(e) => {
                    report.error = Some(format!("listing events: {e}"));
                    return events;
                }
            };
            if !answer.status.is_success() {
                report.error = Some(format!(
                    "listing events: HTTP {}: {}",
                    answer.status.as_u16(),
                    stripe_error(&answer.body)
                ));
                return events;
            }
            let Ok(page) = serde_json::from_slice::<Page>(&answer.body) else {
                report.error = Some("listing events: the answer is not a list of events".into());
                return events;
            };
            report.pages += 1;
            if page.data.is_empty() && page.has_more {
                // Paging on would ask for the same page again, until the budget ends.
                report.error =
                    Some("listing events: a page with no events says there are more".into());
                return events;
            }
            for raw in page.data {
                let Ok(head) = serde_json::from_str::<Head>(raw.get()) else {
                    report.error = Some("listing events: an event without id or created".into());
                    return events;
                };
                events.push(Listed {
                    id: head.id,
                    created: head.created,
                    raw,
                });
            }
            report.listed = events.len() as u64;
            if !page.has_more || events.len() as u64 >= window.max_events {
                report.finished = !page.has_more;
                return events;
            }
            // Stripe's ids are letters, digits and `_`: nothing to escape, and anything else
            // is not an id to page from.
            let Some(last) = events.last().map(|e| e.id.clone()) else {
                return events;
            };
            if !last.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                report.error = Some("listing events: an event id that is not Stripe's".into());
                return events;
            }
            after = Some(last);
        }
    }

    /// Applies the listed events, oldest first, while the budget lasts.
    async fn apply(&self, budget: &Budget, mut events: Vec<Listed>, now: u64, report: &mut Report) {
        events.sort_by(|a, b| (a.created, &a.id).cmp(&(b.created, &b.id)));
        let mut oldest_failure: Option<u64> = None;
        let mut unavailable = None;
        for event in &events {
            if unavailable.is_some() || !budget.allows_more() {
                report.not_tried += 1;
                report.finished = false;
                oldest_failure.get_or_insert(event.created);
                continue;
            }
            let recovered = self.receiver.recover(event.raw.get().as_bytes()).await;
            match recovered.disposition {
                Disposition::Processed | Disposition::Ignored => report.applied += 1,
                Disposition::Duplicate => report.duplicates += 1,
                _ => {
                    report.failed += 1;
                    oldest_failure.get_or_insert(event.created);
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
        report.oldest_failure_age_seconds = oldest_failure.map_or(0, |t| now.saturating_sub(t));
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
            still_failing: report.failed + report.not_tried,
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

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
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
