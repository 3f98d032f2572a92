//! `github-recover`: asks GitHub to redeliver the App's webhook deliveries that failed.
//!
//! GitHub does not retry a failed delivery. It keeps an App's deliveries for a few days (3 on
//! github.com, `GITHUB_REDELIVERY_WINDOW_HOURS`, default 72) and lets the App list them
//! (`GET /app/hook/deliveries`, newest first, cursor paging in the `Link` header) and ask for a
//! redelivery (`POST /app/hook/deliveries/{delivery_id}/attempts`, 202). A delivery is one
//! `guid` (the `X-GitHub-Delivery` header) and one or more attempts; each redelivery is a new
//! attempt with the same guid.
//!
//! Each run lists the deliveries back to the start of the window less a margin (an hour:
//! one asked for just before the window closes might not be redelivered in time), at most
//! `RECOVER_MAX_PAGES` pages. When that listing stops short of the window's start (a busy App),
//! the failed attempts alone are listed too (`status=failure`: a status of 400 to 599), as far
//! back as the window, so a failure older than the full listing reaches is still seen. The
//! attempts are grouped by guid, and a redelivery is asked for of every guid none of whose seen
//! attempts succeeded (a status of 200 to 399, what GitHub's `status=success` filter counts):
//! those with a 5xx, a timeout or no answer first, then those whose every attempt was a 4xx
//! (a 413 for a body over the limit, a 400: likely to fail again), each group oldest first,
//! at most `RECOVER_MAX_REDELIVERIES` per run (default 50), and only when its latest attempt is
//! older than `RECOVER_GRACE_SECONDS` (default 600): an attempt asked for by the last run, or a
//! delivery still being answered, is left alone. A guid whose success is older than the full
//! listing reached is redelivered once more; the ledger makes that a duplicate. The redelivery
//! comes back through the receiver, signed as always; the ledger makes it a duplicate if the
//! first attempt did commit after all.
//!
//! The oldest failure it reports is the oldest failed guid it saw, or, when neither listing
//! reached the window's start, the window's own age: a failure it could not see may be that
//! old, and the window alarm must not stay quiet about it.
//!
//! It authenticates as the App: a JWT signed RS256 with the App's private key (`iss` the App
//! id `GITHUB_APP_ID`, `iat` a minute in the past for clock drift, `exp` nine minutes ahead,
//! under GitHub's ten), the PEM key from `GITHUB_APP_PRIVATE_KEY` or the Secrets Manager secret
//! `GITHUB_APP_PRIVATE_KEY_ARN` names. The API is `GITHUB_API_URL` (default
//! `https://api.github.com`; GitHub Enterprise Server's is `https://HOST/api/v3`). A rate limit
//! (429, or 403 with `retry-after` or `x-ratelimit-remaining: 0`) ends the run cleanly; this
//! environment then makes no request until the limit resets, and the next run carries on. It
//! needs no database and no VPC. One line per run, with the recovery metrics by `Provider`.

use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use claimonce::config;
use claimonce::jobs::{self, Budget, JobFailed, Recovery};
use claimonce::log::Log;
use claimonce::prelude::ConfigError;
use claimonce::sender_api::{Api, ApiError, Quiet, secret_header};
use claimonce::timestamp::unix_now;
use http::{HeaderName, HeaderValue, Method};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// The binary's name.
pub const FUNCTION: &str = "github-recover";
/// GitHub's API on github.com.
pub const DEFAULT_API_URL: &str = "https://api.github.com";
/// The REST API version the calls are written against.
pub const API_VERSION: &str = "2022-11-28";
/// Deliveries per page, the most `per_page` takes.
pub const PAGE_SIZE: u32 = 100;
/// Kept off the end of the window: a delivery that old may not be redelivered in time.
pub const WINDOW_MARGIN: Duration = Duration::from_secs(3600);
/// How long before now the JWT's `iat` is put, for the clock drift GitHub's documentation
/// allows for.
pub const JWT_BACKDATE_SECONDS: u64 = 60;
/// How long after now the JWT expires: under GitHub's limit of ten minutes.
pub const JWT_LIFETIME_SECONDS: u64 = 540;

/// What a run may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// GitHub's redelivery window (hours).
    pub window_hours: u64,
    /// A guid whose latest attempt is younger than this (seconds) is left alone.
    pub grace_seconds: u64,
    /// At most this many redeliveries per run.
    pub max_redeliveries: u64,
    /// At most this many pages per run.
    pub max_pages: u64,
}

impl Policy {
    /// From `GITHUB_REDELIVERY_WINDOW_HOURS` (default 72, 2 to 720), `RECOVER_GRACE_SECONDS`
    /// (default 600, at most a day), `RECOVER_MAX_REDELIVERIES` (default 50, 1 to 1000) and
    /// `RECOVER_MAX_PAGES` (default 100, 1 to 1000).
    pub fn from_env() -> Result<Self, ConfigError> {
        let policy = Self {
            window_hours: config::number("GITHUB_REDELIVERY_WINDOW_HOURS", 72)?,
            grace_seconds: config::number("RECOVER_GRACE_SECONDS", 600)?,
            max_redeliveries: config::number("RECOVER_MAX_REDELIVERIES", 50)?,
            max_pages: config::number("RECOVER_MAX_PAGES", 100)?,
        };
        if !(2..=720).contains(&policy.window_hours) {
            return Err(ConfigError::new(
                "GITHUB_REDELIVERY_WINDOW_HOURS must be between 2 and 720".into(),
            ));
        }
        if policy.grace_seconds > 86_400 {
            return Err(ConfigError::new(
                "RECOVER_GRACE_SECONDS is at most 86400".into(),
            ));
        }
        if !(1..=1000).contains(&policy.max_redeliveries) || !(1..=1000).contains(&policy.max_pages)
        {
            return Err(ConfigError::new(
                "RECOVER_MAX_REDELIVERIES and RECOVER_MAX_PAGES must be between 1 and 1000".into(),
            ));
        }
        Ok(policy)
    }
}

/// The App's identity: its id and private key. The key is never shown.
pub struct App {
    id: String,
    key: aws_lc_rs::signature::RsaKeyPair,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "App({}, [key])", self.id)
    }
}

impl App {
    /// The App `id` (its numeric App id, or its client id) with its private key `pem` (GitHub
    /// hands out PKCS#1, `BEGIN RSA PRIVATE KEY`; PKCS#8 is accepted too). The error names
    /// what is wrong, never the key.
    pub fn new(id: &str, pem: &str) -> Result<Self, ConfigError> {
        use rustls_pki_types::PrivateKeyDer;
        use rustls_pki_types::pem::PemObject;
        let id = id.trim();
        if id.is_empty() || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.') {
            return Err(ConfigError::new(
                "GITHUB_APP_ID is not an App id (digits) or client id".into(),
            ));
        }
        let bad = || {
            ConfigError::new(
                "GITHUB_APP_PRIVATE_KEY is not the App's RSA private key in PEM (the .pem file \
                 GitHub generates)"
                    .into(),
            )
        };
        let key = match PrivateKeyDer::from_pem_slice(pem.trim().as_bytes()).map_err(|_| bad())? {
            PrivateKeyDer::Pkcs1(der) => {
                aws_lc_rs::signature::RsaKeyPair::from_der(der.secret_pkcs1_der())
            }
            PrivateKeyDer::Pkcs8(der) => {
                aws_lc_rs::signature::RsaKeyPair::from_pkcs8(der.secret_pkcs8_der())
            }
            _ => return Err(bad()),
        }
        .map_err(|_| bad())?;
        Ok(Self {
            id: id.to_owned(),
            key,
        })
    }

    /// A JWT for the App at `now` (Unix seconds): RS256, `iat` a minute back, `exp` nine
    /// minutes on, `iss` the App id.
    pub fn jwt(&self, now: u64) -> Result<String, String> {
        let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"RS256","typ":"JWT"}"#);
        let claims = json!({
            "iat": now.saturating_sub(JWT_BACKDATE_SECONDS),
            "exp": now + JWT_LIFETIME_SECONDS,
            "iss": self.id,
        });
        let claims = URL_SAFE_NO_PAD.encode(claims.to_string());
        let signing_input = format!("{header}.{claims}");
        let mut signature = vec![0; self.key.public_modulus_len()];
        self.key
            .sign(
                &aws_lc_rs::signature::RSA_PKCS1_SHA256,
                &aws_lc_rs::rand::SystemRandom::new(),
                signing_input.as_bytes(),
                &mut signature,
            )
            .map_err(|_| "the App's JWT could not be signed".to_owned())?;
        Ok(format!(
            "{signing_input}.{}",
            URL_SAFE_NO_PAD.encode(signature)
        ))
    }
}

/// One item of `GET /app/hook/deliveries` (GitHub's `hook-delivery-item`), as far as a run
/// reads it.
#[derive(Debug, Clone, Deserialize)]
pub struct Delivery {
    /// The attempt's id: what a redelivery is asked for by.
    pub id: u64,
    /// The delivery's guid, shared by its redeliveries.
    pub guid: String,
    /// When the attempt was made.
    pub delivered_at: String,
    /// True for a redelivery.
    #[serde(default)]
    pub redelivery: bool,
    /// The receiver's answer (0 when it could not be reached).
    #[serde(default)]
    pub status_code: u16,
    /// The event's name.
    #[serde(default)]
    pub event: String,
}

/// A guid none of whose attempts succeeded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failed {
    /// The guid.
    pub guid: String,
    /// The latest attempt's id.
    pub latest_id: u64,
    /// The first attempt seen (Unix seconds).
    pub first_at: i64,
    /// The latest attempt (Unix seconds).
    pub latest_at: i64,
    /// Every attempt was answered with a 4xx: a redelivery is likely to be refused again.
    pub client_errors_only: bool,
}

/// The failed guids among `deliveries`: none of their attempts has a status of 200 to 399.
/// Those with an attempt that was not a 4xx (a 5xx, a timeout, no answer) come first, then
/// those whose every attempt was a 4xx; each group oldest first. An attempt listed twice (by
/// both listings) counts once; an item whose `delivered_at` cannot be read is left out.
pub fn failed(deliveries: &[Delivery]) -> Vec<Failed> {
    let mut by_guid: std::collections::BTreeMap<&str, (bool, Failed)> = Default::default();
    let mut seen = std::collections::HashSet::new();
    for d in deliveries {
        let Some(at) = claimonce::timestamp::unix_from_rfc3339(&d.delivered_at) else {
            continue;
        };
        if !seen.insert(d.id) {
            continue;
        }
        // GitHub's own `status=success` filter: 200 to 399.
        let ok = (200..400).contains(&d.status_code);
        let entry = by_guid.entry(d.guid.as_str()).or_insert_with(|| {
            (
                false,
                Failed {
                    guid: d.guid.clone(),
                    latest_id: d.id,
                    first_at: at,
                    latest_at: at,
                    client_errors_only: true,
                },
            )
        });
        entry.0 |= ok;
        entry.1.client_errors_only &= (400..500).contains(&d.status_code);
        let f = &mut entry.1;
        if at < f.first_at {
            f.first_at = at;
        }
        if (at, d.id) > (f.latest_at, f.latest_id) {
            f.latest_at = at;
            f.latest_id = d.id;
        }
    }
    let mut failed: Vec<Failed> = by_guid
        .into_values()
        .filter(|(ok, _)| !ok)
        .map(|(_, f)| f)
        .collect();
    failed.sort_by(|a, b| {
        (a.client_errors_only, a.first_at, &a.guid).cmp(&(
            b.client_errors_only,
            b.first_at,
            &b.guid,
        ))
    });
    failed
}

/// What one run saw and did: the invocation's answer and its line, but for the error.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Pages read, both listings.
    pub pages: u64,
    /// The full listing stopped short of the window's start, so the failed attempts were
    /// listed too (`status=failure`).
    pub listed_failures: bool,
    /// Attempts listed in the window.
    pub deliveries: u64,
    /// Guids none of whose attempts succeeded.
    pub failed: u64,
    /// Redeliveries GitHub accepted (202).
    pub redelivered: u64,
    /// Failed guids left for their grace period.
    pub in_grace: u64,
    /// Failed guids not asked for: the cap, the budget or a rate limit came first, or GitHub
    /// refused the request.
    pub not_redelivered: u64,
    /// Requests GitHub refused (not a rate limit).
    pub refused: u64,
    /// The run stopped at a rate limit: no request for this many seconds.
    pub rate_limited_seconds: Option<u64>,
    /// The whole window was listed and every failed guid past its grace asked for.
    pub finished: bool,
    /// Age of the oldest failed guid's first attempt (seconds), 0 when none; the window's age
    /// when no listing reached the window's start.
    pub oldest_failure_age_seconds: u64,
    /// Why the run failed (authentication refused, GitHub unreachable), data-free: in the
    /// line, and the invocation's error.
    #[serde(skip)]
    pub error: Option<String>,
}

/// The recover function in one execution environment.
#[derive(Debug)]
pub struct Recoverer {
    api: Api,
    app: App,
    policy: Policy,
    log: Log,
    /// No request before the last rate limit resets.
    quiet: Quiet,
}

impl Recoverer {
    /// Assembles one.
    pub fn new(api: Api, app: App, policy: Policy, log: Log) -> Self {
        Self {
            api,
            app,
            policy,
            log,
            quiet: Quiet::default(),
        }
    }

    /// One run within `budget`: list, choose, redeliver, log one line. A run GitHub refused
    /// (authentication) or could not be reached is an error, after its line is logged; a rate
    /// limit is not.
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
                job: "github-recover",
                reason: e.clone(),
            }),
            None => Ok(report),
        }
    }

    async fn recover(&self, budget: &Budget, report: &mut Report) {
        let now = unix_now();
        let headers = match self.headers(now) {
            Ok(headers) => headers,
            Err(why) => {
                report.error = Some(why);
                return;
            }
        };
        let since = i64::try_from(
            now.saturating_sub(self.policy.window_hours * 3600)
                .saturating_add(WINDOW_MARGIN.as_secs()),
        )
        .unwrap_or(i64::MAX);
        let all = "";
        let Some((mut deliveries, mut reached)) =
            self.list(budget, &headers, since, all, report).await
        else {
            return;
        };
        if !reached && report.rate_limited_seconds.is_none() {
            // A busy App: the failures alone reach further back.
            report.listed_failures = true;
            let Some((failures, failures_reached)) = self
                .list(budget, &headers, since, "&status=failure", report)
                .await
            else {
                return;
            };
            deliveries.extend(failures);
            reached = failures_reached;
        }
        let failed = failed(&deliveries);
        report.deliveries = deliveries.len() as u64;
        report.failed = failed.len() as u64;
        let now = i64::try_from(now).unwrap_or(i64::MAX);
        let oldest_seen = failed.iter().map(|f| f.first_at).min();
        report.oldest_failure_age_seconds = if reached {
            oldest_seen.map_or(0, |at| u64::try_from(now - at).unwrap_or(0))
        } else {
            // A failure the listings did not reach may be as old as the window.
            u64::try_from(now - since).unwrap_or(0)
        };
        let grace = i64::try_from(self.policy.grace_seconds).unwrap_or(i64::MAX);
        // What was listed is redelivered even when the listing stopped short.
        let mut stopped = report.rate_limited_seconds.is_some();
        for f in &failed {
            if now - f.latest_at < grace {
                report.in_grace += 1;
                continue;
            }
            if stopped
                || report.redelivered >= self.policy.max_redeliveries
                || !budget.allows_more()
            {
                report.not_redelivered += 1;
                stopped = true;
                continue;
            }
            let path = format!("/app/hook/deliveries/{}/attempts", f.latest_id);
            match self.api.send(Method::POST, &path, &headers, None).await {
                Ok(answer) if answer.status.is_success() => report.redelivered += 1,
                Ok(answer) => {
                    report.refused += 1;
                    report.not_redelivered += 1;
                    self.log.write(
                        claimonce::log::Level::Warn,
                        "GitHub refused a redelivery",
                        claimonce::log::fields! {
                            guid: f.guid.as_str(),
                            delivery_id: f.latest_id,
                            status: answer.status.as_u16(),
                        },
                    );
                }
                Err(e) => {
                    report.not_redelivered += 1;
                    stopped = true;
                    self.stop(e, report);
                }
            }
        }
        report.finished = reached && !stopped;
    }

    /// The deliveries back to `since`, newest first, `filter` added to the first page's query
    /// (the next pages' links carry it); `true` with them when the listing reached `since` or
    /// the end, within `RECOVER_MAX_PAGES` pages. `None` when the run failed before any.
    async fn list(
        &self,
        budget: &Budget,
        headers: &[(HeaderName, HeaderValue)],
        since: i64,
        filter: &str,
        report: &mut Report,
    ) -> Option<(Vec<Delivery>, bool)> {
        let mut deliveries = Vec::new();
        let mut path = format!("/app/hook/deliveries?per_page={PAGE_SIZE}{filter}");
        let mut pages = 0;
        loop {
            if !budget.allows_more() || pages >= self.policy.max_pages {
                return Some((deliveries, false));
            }
            let answer = match self.api.send(Method::GET, &path, headers, None).await {
                Ok(answer) => answer,
                Err(e) => {
                    self.stop(e, report);
                    return report.error.is_none().then_some((deliveries, false));
                }
            };
            if !answer.status.is_success() {
                report.error = Some(format!(
                    "listing deliveries: HTTP {}{}",
                    answer.status.as_u16(),
                    match answer.status.as_u16() {
                        401 => " (the App's JWT was refused: GITHUB_APP_ID, the key, the clock)",
                        404 => " (no App webhook, or not an App's JWT)",
                        _ => "",
                    }
                ));
                return None;
            }
            let Ok(page) = serde_json::from_slice::<Vec<Delivery>>(&answer.body) else {
                report.error =
                    Some("listing deliveries: the answer is not a list of deliveries".into());
                return None;
            };
            report.pages += 1;
            pages += 1;
            let mut reached = false;
            for d in page {
                match claimonce::timestamp::unix_from_rfc3339(&d.delivered_at) {
                    Some(at) if at < since => reached = true,
                    _ => deliveries.push(d),
                }
            }
            let next = next_page(&answer.headers, self.api.base());
            match next {
                Some(next) if !reached => path = next,
                _ => return Some((deliveries, true)),
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
            e => report.error = Some(format!("GitHub: {e}")),
        }
    }

    fn headers(&self, now: u64) -> Result<Vec<(HeaderName, HeaderValue)>, String> {
        let jwt = self.app.jwt(now)?;
        Ok(vec![
            secret_header(http::header::AUTHORIZATION, &format!("Bearer {jwt}"))?,
            (
                http::header::ACCEPT,
                HeaderValue::from_static("application/vnd.github+json"),
            ),
            (
                HeaderName::from_static("x-github-api-version"),
                HeaderValue::from_static(API_VERSION),
            ),
        ])
    }

    fn write(&self, report: &Report, started: Instant) {
        let line = match serde_json::to_value(report).unwrap_or(Value::Null) {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        let counts = Recovery {
            recovered: report.redelivered,
            duplicates: None,
            still_failing: report.not_redelivered,
            oldest_failure_age_seconds: report.oldest_failure_age_seconds,
        };
        jobs::write_recovery_report(
            &self.log,
            "github recovery",
            "github",
            line,
            started,
            report.error.as_deref(),
            &counts,
        );
    }
}

/// The path and query of the `Link` header's `rel="next"`, when it is on `base` (a link to
/// another host is not followed: the JWT would go with it).
pub fn next_page(headers: &http::HeaderMap, base: &str) -> Option<String> {
    let link = headers.get(http::header::LINK)?.to_str().ok()?;
    link.split(',').find_map(|part| {
        let (url, params) = part.split_once(';')?;
        let url = url.trim().strip_prefix('<')?.strip_suffix('>')?;
        params
            .split(';')
            .any(|p| {
                let p = p.trim();
                p == "rel=\"next\"" || p == "rel=next"
            })
            .then_some(())?;
        let path = url.strip_prefix(base)?;
        path.starts_with('/').then(|| path.to_owned())
    })
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

/// The whole of the function's `main`: the App, the API and the policy from the environment
/// (a bad value is one line naming the variable, and the process ends before any invocation),
/// then one run per invocation.
pub async fn run_from_env() -> Result<(), lambda_runtime::Error> {
    let log = Log::process();
    let built = async {
        let id = config::required("GITHUB_APP_ID")?;
        let pem = claimonce::secrets::WebhookSecrets::from_env("GITHUB_APP_PRIVATE_KEY")
            .await?
            .read()
            .await?;
        let app = App::new(&id, &pem)?;
        let api = Api::from_env("GITHUB_API_URL", DEFAULT_API_URL)?;
        let policy = Policy::from_env()?;
        Ok::<_, ConfigError>(Recoverer::new(api, app, policy, log.clone()))
    }
    .await;
    claimonce::jobs::serve_job(built).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(id: u64, guid: &str, at: &str, status_code: u16) -> Delivery {
        Delivery {
            id,
            guid: guid.into(),
            delivered_at: at.into(),
            redelivery: false,
            status_code,
            event: "issues".into(),
        }
    }

    #[test]
    fn a_guid_with_any_successful_attempt_is_not_failed() {
        let deliveries = [
            delivery(5, "c", "2026-12-01T10:05:00Z", 500),
            delivery(4, "b", "2026-12-01T10:04:00Z", 200),
            delivery(3, "b", "2026-12-01T10:03:00Z", 502),
            delivery(2, "a", "2026-12-01T10:02:00Z", 0),
            delivery(1, "a", "2026-12-01T10:01:00Z", 400),
        ];
        let failed = failed(&deliveries);
        assert_eq!(
            failed
                .iter()
                .map(|f| (f.guid.as_str(), f.latest_id))
                .collect::<Vec<_>>(),
            [("a", 2), ("c", 5)],
            "b was redelivered successfully; a is older than c"
        );
    }

    #[test]
    fn guids_that_only_ever_got_a_4xx_come_after_the_others_and_an_attempt_counts_once() {
        let deliveries = [
            delivery(9, "timeout", "2026-12-01T10:09:00Z", 0),
            delivery(8, "server", "2026-12-01T10:08:00Z", 503),
            delivery(3, "too-large", "2026-12-01T10:03:00Z", 413),
            delivery(2, "refused", "2026-12-01T10:02:00Z", 400),
            delivery(1, "mixed", "2026-12-01T10:01:00Z", 400),
            delivery(7, "mixed", "2026-12-01T10:07:00Z", 500),
            // Listed twice: by the full listing and by the failures' listing.
            delivery(2, "refused", "2026-12-01T10:02:00Z", 400),
        ];
        let failed = failed(&deliveries);
        assert_eq!(
            failed
                .iter()
                .map(|f| (f.guid.as_str(), f.client_errors_only))
                .collect::<Vec<_>>(),
            [
                ("mixed", false),
                ("server", false),
                ("timeout", false),
                ("refused", true),
                ("too-large", true),
            ],
            "5xx, timeouts and no answer first, oldest first; then the 4xx-only guids"
        );
    }

    #[test]
    fn the_next_page_is_followed_only_on_the_same_api() {
        let mut headers = http::HeaderMap::new();
        headers.insert(
            http::header::LINK,
            "<https://api.github.com/app/hook/deliveries?per_page=100&cursor=v1_12>; rel=\"next\", \
             <https://api.github.com/app/hook/deliveries?per_page=100>; rel=\"first\""
                .parse()
                .expect("a header"),
        );
        assert_eq!(
            next_page(&headers, "https://api.github.com").as_deref(),
            Some("/app/hook/deliveries?per_page=100&cursor=v1_12")
        );
        assert_eq!(next_page(&headers, "https://evil.example"), None);
        assert_eq!(
            next_page(&http::HeaderMap::new(), "https://api.github.com"),
            None
        );
    }

    #[test]
    fn a_key_that_is_not_an_rsa_pem_is_refused_without_showing_it() {
        let err = App::new(
            "123",
            "-----BEGIN RSA PRIVATE KEY-----\nc2VjcmV0\n-----END RSA PRIVATE KEY-----",
        )
        .expect_err("not a key");
        assert!(!err.to_string().contains("c2VjcmV0"));
        assert!(App::new("", "x").is_err());
        assert!(App::new("12 3", "x").is_err());
    }
}
