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
//! ([`claimonce::jobs::Recovery`]).
//!
//! With `RECOVER_THIN_EVENTS=true` a run also reads Stripe's thin events:
//! `GET /v2/core/events?delivery_success=false` over the same window (`created_gte`,
//! `created_lte` in RFC 3339, paged by `next_page_url`), checked against the ledger and capped
//! with the snapshot events, each completed from the API as its webhook would be (the related
//! object read now, or its `snapshot_event`) before its claim.
//!
//! A Connect platform's connected accounts' events are their accounts': Stripe lists and serves
//! them only to a request made in the account's context (`Stripe-Context`), so a list without
//! one holds the key's own account's events only. `RECOVER_CONTEXTS` (comma-separated account
//! ids, `acct_…`, or organization paths of them) names the accounts whose events a run lists
//! too: each list is read once for the key's own account and once in each context, and each
//! event listed in a context is completed in it (its `context`, or a snapshot's `account`).
//!
//! The key is a restricted key with read access to events (`rk_...`), or with thin events a
//! secret key (`sk_...`: Stripe's `/v2` API takes no other), from `STRIPE_API_KEY` or the
//! Secrets Manager secret `STRIPE_API_KEY_ARN` names; the API is `STRIPE_API_BASE` (default
//! `https://api.stripe.com`).

use std::time::{Duration, Instant};

use claimonce::complete::{self, SenderApi};
use claimonce::config;
use claimonce::db::{Database, Settings};
use claimonce::jobs::Batch;
use claimonce::jobs::{self, Budget, JobFailed, Recovery};
use claimonce::log::Log;
use claimonce::prelude::ConfigError;
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
/// Thin events per page: the API description gives `GET /v2/core/events`'s `limit` no maximum,
/// and 20 is within any that Stripe's v2 lists take.
pub const THIN_PAGE_SIZE: u32 = 20;
/// The variable that turns on the thin events' listing.
pub const THIN_VAR: &str = "RECOVER_THIN_EVENTS";

/// The variable that names the connected accounts whose events are listed too.
pub const CONTEXTS_VAR: &str = "RECOVER_CONTEXTS";
/// At most this many contexts: each is a listing of its own, every run.
pub const MAX_CONTEXTS: usize = 100;

/// The contexts `RECOVER_CONTEXTS` names (none when unset or empty): each an account id or an
/// organization's path of them (letters, digits and `_`, joined by `/`), as Stripe writes a
/// thin event's `context`; anything else stops the function at start, naming the variable.
pub fn contexts_from_env() -> Result<Vec<String>, ConfigError> {
    parse_contexts(config::optional(CONTEXTS_VAR).as_deref().unwrap_or(""))
        .map_err(|why| ConfigError::new(format!("{CONTEXTS_VAR}: {why}")))
}

fn parse_contexts(value: &str) -> Result<Vec<String>, String> {
    let id = |part: &str| {
        !part.is_empty()
            && part.len() <= 255
            && part.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    };
    let mut contexts: Vec<String> = Vec::new();
    for context in value.split(',').map(str::trim).filter(|c| !c.is_empty()) {
        if context.len() > 255 || !context.split('/').all(id) {
            return Err("each entry is an account id (acct_...) or a path of them".into());
        }
        if !contexts.iter().any(|c| c == context) {
            contexts.push(context.to_owned());
        }
    }
    if contexts.len() > MAX_CONTEXTS {
        return Err(format!("at most {MAX_CONTEXTS} accounts"));
    }
    Ok(contexts)
}

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
    /// Thin events are listed too (`GET /v2/core/events`).
    pub thin: bool,
}

impl Window {
    /// From `RECOVER_LOOKBACK_HOURS` (default 96, 1 to 720), `RECOVER_GRACE_SECONDS` (default
    /// 600, at most a day), `RECOVER_MAX_EVENTS` (default 2000, 1 to 100000) and
    /// `RECOVER_THIN_EVENTS` (`true` or `false`, the default).
    pub fn from_env() -> Result<Self, ConfigError> {
        let window = Self {
            lookback_hours: config::number("RECOVER_LOOKBACK_HOURS", DEFAULT_LOOKBACK_HOURS)?,
            grace_seconds: config::number("RECOVER_GRACE_SECONDS", 600)?,
            max_events: config::number("RECOVER_MAX_EVENTS", 2000)?,
            thin: match config::optional(THIN_VAR).as_deref() {
                None | Some("false") => false,
                Some("true") => true,
                Some(_) => {
                    return Err(ConfigError::new(format!("{THIN_VAR} is true or false")));
                }
            },
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
    /// Events listed (`delivery_success=false`, in the window), thin ones included.
    pub listed: u64,
    /// Of those, thin events (`GET /v2/core/events`).
    pub thin_listed: u64,
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

/// Which of Stripe's lists of events a listing reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// `GET /v1/events`: snapshot events, `created` in Unix seconds, paged by `starting_after`.
    Snapshot,
    /// `GET /v2/core/events`: thin events, `created` in RFC 3339, paged by `next_page_url`.
    Thin,
}

/// One page of either list: each event kept as the bytes Stripe sent, and the path of the next
/// page when there is one.
struct Page {
    data: Vec<Box<RawValue>>,
    next: Option<String>,
}

impl Source {
    /// The first page's path: undelivered events created from `from` to `to` (Unix seconds).
    fn first_page(self, from: u64, to: u64) -> Result<String, String> {
        match self {
            Self::Snapshot => Ok(format!(
                "/v1/events?delivery_success=false&limit={PAGE_SIZE}&created%5Bgte%5D={from}\
                 &created%5Blte%5D={to}"
            )),
            Self::Thin => {
                let rfc3339 = |t: u64| {
                    i64::try_from(t)
                        .ok()
                        .and_then(claimonce::timestamp::rfc3339_from_unix)
                        .ok_or("the window is not a date Stripe takes")
                };
                Ok(format!(
                    "/v2/core/events?delivery_success=false&limit={THIN_PAGE_SIZE}&created_gte={}\
                     &created_lte={}",
                    rfc3339(from)?,
                    rfc3339(to)?
                ))
            }
        }
    }

    /// A page of this list, with the path of the next one (`first` is this listing's first
    /// page's path, which a snapshot page continues with `starting_after`).
    fn page(self, body: &[u8], first: &str) -> Result<Page, &'static str> {
        #[derive(Deserialize)]
        struct V1 {
            data: Vec<Box<RawValue>>,
            has_more: bool,
        }
        #[derive(Deserialize)]
        struct V2 {
            data: Vec<Box<RawValue>>,
            next_page_url: Option<String>,
        }
        const NOT_A_LIST: &str = "the answer is not a list of events";
        match self {
            Self::Snapshot => {
                let page: V1 = serde_json::from_slice(body).map_err(|_| NOT_A_LIST)?;
                let next = match (page.has_more, page.data.last()) {
                    (false, _) | (true, None) => None,
                    (true, Some(last)) => {
                        let (id, _) = self.head(last).ok_or("an event without id or created")?;
                        // Stripe's ids are letters, digits and `_`: nothing to escape, and
                        // anything else is not an id to page from.
                        if !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                            return Err("an event id that is not Stripe's");
                        }
                        Some(format!("{first}&starting_after={id}"))
                    }
                };
                if page.data.is_empty() && page.has_more {
                    // Paging on would ask for the same page again, until the budget ends.
                    return Err("a page with no events says there are more");
                }
                Ok(Page {
                    data: page.data,
                    next,
                })
            }
            Self::Thin => {
                let page: V2 = serde_json::from_slice(body).map_err(|_| NOT_A_LIST)?;
                let next = page.next_page_url.filter(|url| !url.is_empty());
                if let Some(url) = &next {
                    // The key goes only where this list is: a path of the same API.
                    if !url.starts_with("/v2/core/events?")
                        || !url.bytes().all(|b| b.is_ascii_graphic())
                    {
                        return Err("a next page that is not this list's");
                    }
                }
                if page.data.is_empty() && next.is_some() {
                    return Err("a page with no events says there are more");
                }
                Ok(Page {
                    data: page.data,
                    next,
                })
            }
        }
    }

    /// An event's id and creation time (Unix seconds).
    fn head(self, raw: &RawValue) -> Option<(String, u64)> {
        #[derive(Deserialize)]
        struct Head<T> {
            id: String,
            created: T,
        }
        match self {
            Self::Snapshot => serde_json::from_str::<Head<u64>>(raw.get())
                .ok()
                .map(|h| (h.id, h.created)),
            Self::Thin => {
                let head = serde_json::from_str::<Head<String>>(raw.get()).ok()?;
                let created = claimonce::timestamp::unix_from_rfc3339(&head.created)?;
                Some((head.id, u64::try_from(created).ok()?))
            }
        }
    }
}

/// What a listing keeps for the run to apply.
struct ToApply {
    /// Events not in the ledger, at most the cap: the oldest of those listed.
    events: std::collections::BinaryHeap<Listed>,
    /// The oldest of those over the cap (left for the next run), when any.
    oldest_left: Option<u64>,
    /// Every listing reached the window's start.
    reached: bool,
    /// The window's start (Unix seconds).
    from: u64,
}

/// One listed event, ordered by when it was created (then its id): the heap's top is the
/// newest.
struct Listed {
    id: String,
    created: u64,
    raw: Box<RawValue>,
}

impl PartialEq for Listed {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == std::cmp::Ordering::Equal
    }
}

impl Eq for Listed {}

impl PartialOrd for Listed {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Listed {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.created, &self.id).cmp(&(other.created, &other.id))
    }
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
    /// The connected accounts listed besides the key's own.
    contexts: Vec<String>,
}

impl Recoverer {
    /// Assembles one: Stripe's API at `api` with `key`, the database `settings` (a user with
    /// the Stripe receiver's role), `window`. With thin events, each is completed through the
    /// same client and key, every GET bounded by `fetch_timeout`.
    pub fn new(
        api: Api,
        key: String,
        settings: Settings,
        window: Window,
        fetch_timeout: Duration,
        log: Log,
    ) -> Self {
        let completion = window
            .thin
            .then(|| SenderApi::new(api.clone(), &key, fetch_timeout));
        // One event may take a delivery's deadline (and a thin one its completion's GET), one
        // page a request's; then the line.
        let event = settings.timeouts().delivery
            + if window.thin {
                fetch_timeout
            } else {
                Duration::ZERO
            };
        let margin = event.max(claimonce::sender_api::REQUEST_TIMEOUT) + Duration::from_secs(2);
        let receiver = Receiver::new(
            Stripe::without_webhooks(),
            Database::new(settings),
            Limits::default(),
            log.clone(),
        )
        .with_sender_api(completion);
        Self {
            api,
            key: ApiKey::new(&key),
            receiver,
            window,
            log,
            margin,
            contexts: Vec::new(),
        }
    }

    /// This recoverer, listing the events of each of `contexts` too (connected accounts).
    #[must_use]
    pub fn with_contexts(self, contexts: Vec<String>) -> Self {
        Self { contexts, ..self }
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

    /// Every page of the window in each list the run reads (snapshot events, then thin ones),
    /// newest first as Stripe pages them, until the last page, half the budget, a rate limit or
    /// an error; each page's events already in the ledger counted and dropped, and of the
    /// others only the oldest `max_events` kept.
    async fn list(
        &self,
        budget: &Budget,
        window: Window,
        now: u64,
        report: &mut Report,
    ) -> ToApply {
        let from = now.saturating_sub(window.lookback_hours * 3600);
        let mut kept = ToApply {
            events: std::collections::BinaryHeap::new(),
            oldest_left: None,
            reached: false,
            from,
        };
        // The other half is for applying what was listed.
        let listing = Budget::until(std::time::Instant::now() + budget.remaining() / 2);
        let to = now.saturating_sub(window.grace_seconds);
        let sources: &[Source] = if window.thin {
            &[Source::Snapshot, Source::Thin]
        } else {
            &[Source::Snapshot]
        };
        // The key's own account, then each connected account in its context.
        let contexts: Vec<Option<&str>> = std::iter::once(None)
            .chain(self.contexts.iter().map(|c| Some(c.as_str())))
            .collect();
        for &source in sources {
            for &context in &contexts {
                kept.reached = false;
                match self
                    .list_one(
                        (source, context),
                        &listing,
                        (from, to),
                        window,
                        &mut kept,
                        report,
                    )
                    .await
                {
                    Ok(reached) => kept.reached = reached,
                    Err(why) => {
                        report.error = Some(why);
                        return kept;
                    }
                }
                if !kept.reached {
                    return kept;
                }
            }
        }
        kept
    }

    /// One list's pages, read in `context` (`None`: the key's own account), into `kept`:
    /// whether the listing reached the window's start, or why it failed (data-free).
    async fn list_one(
        &self,
        (source, context): (Source, Option<&str>),
        listing: &Budget,
        (from, to): (u64, u64),
        window: Window,
        kept: &mut ToApply,
        report: &mut Report,
    ) -> Result<bool, String> {
        let cap = usize::try_from(window.max_events).unwrap_or(usize::MAX);
        let mut headers = vec![self.key.bearer()?];
        if let Some(context) = context {
            // Checked at start: letters, digits, `_` and `/` only.
            let value = http::HeaderValue::from_str(context)
                .map_err(|_| format!("{CONTEXTS_VAR}: a context that cannot be sent"))?;
            headers.push((http::HeaderName::from_static("stripe-context"), value));
        }
        // A failure names the account it was listed for (an id, no secret).
        let listing_events = match context {
            None => "listing events".to_owned(),
            Some(context) => format!("listing events in context {context}"),
        };
        let first = source.first_page(from, to)?;
        let mut path = first.clone();
        loop {
            if !listing.allows_more() {
                return Ok(false);
            }
            let answer = match self
                .api
                .send(http::Method::GET, &path, &headers, None)
                .await
            {
                Ok(answer) => answer,
                Err(ApiError::RateLimited { retry_after }) => {
                    report.rate_limited_seconds = Some(retry_after.as_secs());
                    return Ok(false);
                }
                Err(e) => return Err(format!("{listing_events}: {e}")),
            };
            if !answer.status.is_success() {
                return Err(format!(
                    "{listing_events}: HTTP {}: {}",
                    answer.status.as_u16(),
                    stripe_error(&answer.body)
                ));
            }
            let page = source
                .page(&answer.body, &first)
                .map_err(|why| format!("{listing_events}: {why}"))?;
            report.pages += 1;
            let mut listed = Vec::with_capacity(page.data.len());
            for raw in page.data {
                let (id, created) = source
                    .head(&raw)
                    .ok_or_else(|| format!("{listing_events}: an event without id or created"))?;
                listed.push(Listed { id, created, raw });
            }
            report.listed += listed.len() as u64;
            if source == Source::Thin {
                report.thin_listed += listed.len() as u64;
            }
            let ids: Vec<&str> = listed.iter().map(|e| e.id.as_str()).collect();
            let claimed = self
                .receiver
                .claimed(&ids)
                .await
                .map_err(|e| match e.unavailable() {
                    Some(reason) => format!("the database is unavailable ({reason})"),
                    None => format!("looking up the listed events: {}", e.summary()),
                })?;
            for event in listed {
                if claimed.contains(&event.id) {
                    report.duplicates += 1;
                } else {
                    kept.events.push(event);
                }
            }
            // What is over the cap is the newest, left for the next run.
            while kept.events.len() > cap {
                if let Some(newest) = kept.events.pop() {
                    report.left_for_next_run += 1;
                    kept.oldest_left = Some(
                        kept.oldest_left
                            .map_or(newest.created, |t: u64| t.min(newest.created)),
                    );
                }
            }
            match page.next {
                Some(next) => path = next,
                None => return Ok(true),
            }
        }
    }

    /// Applies the events kept, oldest first, while the budget lasts.
    async fn apply(&self, budget: &Budget, listed: ToApply, now: u64, report: &mut Report) {
        let events = listed.events.into_sorted_vec();
        let mut oldest_failure: Option<u64> = listed.oldest_left;
        let mut batch = Batch::within(None);
        for event in &events {
            if batch.unavailable().is_some() || !budget.allows_more() {
                report.not_tried += 1;
                oldest_failure =
                    Some(oldest_failure.map_or(event.created, |t| t.min(event.created)));
                continue;
            }
            // A fault a test injected here fails the event as a failed claim would.
            let injected = claimonce::fault::hit(claimonce::fault::Point::RecoverApply).await;
            let recovered = match injected {
                Ok(()) => {
                    self.receiver
                        .recover(event.raw.get().as_bytes(), &mut batch)
                        .await
                        .disposition
                }
                Err(_) => Disposition::Error,
            };
            match recovered {
                Disposition::Processed | Disposition::Ignored => report.applied += 1,
                Disposition::Duplicate => report.duplicates += 1,
                _ => {
                    report.failed += 1;
                    oldest_failure =
                        Some(oldest_failure.map_or(event.created, |t| t.min(event.created)));
                }
            }
        }
        if let Some(reason) = batch.unavailable() {
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
        // The line is the invocation's answer, and the window it looked back over.
        let answer = match serde_json::to_value(report).unwrap_or(Value::Null) {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        let line = claimonce::log::fields! { lookback_hours: window.lookback_hours; ..answer };
        let counts = Recovery {
            recovered: report.applied,
            duplicates: Some(report.duplicates),
            still_failing: report.failed + report.not_tried + report.left_for_next_run,
            oldest_failure_age_seconds: report.oldest_failure_age_seconds,
        };
        jobs::write_recovery_report(
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

impl claimonce::jobs::Job for Recoverer {
    type Report = Report;

    /// The margin kept before the invocation's deadline.
    fn margin(&self) -> Duration {
        self.margin
    }

    /// An operator's event may name its own look-back (`lookback_hours`).
    async fn run(&self, budget: Budget, event: Value) -> Result<Report, JobFailed> {
        let window = self
            .window
            .for_invocation(&event)
            .map_err(|reason| JobFailed {
                job: "stripe-recover",
                reason,
            })?;
        // Boxed: the run's future is deep (HTTP client, database driver) and its layout
        // otherwise overflows the compiler's query depth inside the runtime's service.
        Box::pin(Recoverer::run(self, &budget, window)).await
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
        let fetch_timeout = complete::timeout_from_env()?;
        let settings = Settings::from_env().await?;
        let contexts = contexts_from_env()?;
        Ok::<_, ConfigError>(
            Recoverer::new(api, key, settings, window, fetch_timeout, log.clone())
                .with_contexts(contexts),
        )
    }
    .await;
    claimonce::jobs::serve_job(built).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_contexts_are_account_paths_and_nothing_else() {
        assert_eq!(parse_contexts(""), Ok(vec![]));
        assert_eq!(
            parse_contexts(" acct_1A, org_1B/acct_1C ,acct_1A,"),
            Ok(vec!["acct_1A".to_owned(), "org_1B/acct_1C".to_owned()])
        );
        for bad in [
            "acct_1\r\nx: 1",
            "acct_1//acct_2",
            "acct 1",
            "acct_1/",
            "../x",
        ] {
            assert!(parse_contexts(bad).is_err(), "{bad}");
        }
        let many: Vec<String> = (0..=MAX_CONTEXTS).map(|i| format!("acct_{i}")).collect();
        assert!(parse_contexts(&many.join(",")).is_err());
    }

    #[test]
    fn the_window_is_stripe_s_retries_and_a_margin_and_at_most_its_30_days() {
        let window = Window {
            lookback_hours: DEFAULT_LOOKBACK_HOURS,
            grace_seconds: 600,
            max_events: 2000,
            thin: false,
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
    fn a_thin_page_is_paged_by_its_next_page_url_and_only_within_this_list() {
        let event = r#"{"id":"evt_test_65R","object":"v2.core.event","type":"v1.invoice.paid","created":"2026-12-02T10:00:00.000Z"}"#;
        let body = format!(
            r#"{{"data":[{event}],"next_page_url":"/v2/core/events?page=p_2","previous_page_url":null}}"#
        );
        let page = Source::Thin
            .page(body.as_bytes(), "/v2/core/events?limit=100")
            .expect("a page");
        assert_eq!(page.next.as_deref(), Some("/v2/core/events?page=p_2"));
        let head = page.data.first().and_then(|raw| Source::Thin.head(raw));
        assert_eq!(head, Some(("evt_test_65R".to_owned(), 1_796_205_600)));
        let last = br#"{"data":[],"next_page_url":null}"#;
        assert!(
            Source::Thin
                .page(last, "")
                .expect("the last page")
                .next
                .is_none()
        );
        for refused in [
            r#"{"data":[],"next_page_url":"/v2/core/events?page=p_3"}"#.to_owned(),
            format!(
                r#"{{"data":[{event}],"next_page_url":"https://elsewhere.example/v2/core/events?page=p"}}"#
            ),
            format!(r#"{{"data":[{event}],"next_page_url":"/v1/customers?limit=100"}}"#),
            format!(r#"{{"data":[{event}],"next_page_url":"/v2/core/events?page=a b"}}"#),
        ] {
            assert!(
                Source::Thin.page(refused.as_bytes(), "").is_err(),
                "{refused}"
            );
        }
        assert_eq!(
            Source::Thin
                .first_page(1_796_205_600, 1_796_209_200)
                .as_deref(),
            Ok("/v2/core/events?delivery_success=false&limit=20\
                &created_gte=2026-12-02T10:00:00Z&created_lte=2026-12-02T11:00:00Z")
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
