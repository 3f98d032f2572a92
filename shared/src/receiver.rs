//! The one flow every provider shares: read the raw body, verify, parse, claim and apply in one
//! transaction, answer, and log one line.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use lambda_http::http::Method;
use lambda_http::{Body, Request, Response};
use serde::Serialize;
use serde_json::Map;
use sha2::{Digest, Sha256};

use crate::config::{self, ConfigError};
use crate::db::Database;
use crate::ids::EventId;
use crate::log::{Level, Log};
use crate::metrics;
use crate::pipeline::{Claim, Finished};
use crate::provider::{Parsed, Provider, Signed, Unsigned};
use crate::response::{Disposition, Problem, Rejection};

/// API Gateway's id for the request (`requestContext.requestId`), as the Lambda boundary
/// read it: the delivery's log line carries it, as API Gateway's access log does.
#[derive(Debug, Clone)]
pub(crate) struct ApiRequestId(pub(crate) String);

/// Limits on what is accepted before any work is done.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest body accepted, in bytes (`MAX_BODY_BYTES`, default 1 MiB).
    pub max_body_bytes: usize,
}

impl Limits {
    /// From the environment. With a spill queue (`SPILL_QUEUE_URL`) every body accepted must
    /// be one it can spill, so `MAX_BODY_BYTES` then defaults to
    /// [`crate::spill::SPILL_BODY_LIMIT`] and may not exceed it.
    pub fn from_env() -> Result<Self, ConfigError> {
        let spilling = config::optional("SPILL_QUEUE_URL").is_some();
        let limit = crate::spill::SPILL_BODY_LIMIT;
        let default = if spilling { limit as u64 } else { 1 << 20 };
        let max = config::number("MAX_BODY_BYTES", default)?;
        let max = usize::try_from(max).unwrap_or(usize::MAX);
        if spilling && max > limit {
            return Err(ConfigError::new(format!(
                "MAX_BODY_BYTES is {max}, over the {limit} bytes a delivery can be spilled with \
                 (SPILL_QUEUE_URL is set): lower it, or unset it for that limit"
            )));
        }
        Ok(Self {
            max_body_bytes: max,
        })
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_body_bytes: 1 << 20,
        }
    }
}

/// One provider's receiver in one execution environment: the provider, the connection it
/// reuses, its limits and its log.
#[derive(Debug)]
pub struct Receiver<P> {
    /// Replaced when the signing secrets are read again ([`Receiver::with_secret_refresh`]).
    provider: std::sync::RwLock<std::sync::Arc<P>>,
    /// The provider's ledger name, read once: a rebuilt provider keeps it, and the log lines
    /// and the claim need it without taking the lock.
    name: &'static str,
    refresh: Option<Refresh<P>>,
    database: Database,
    limits: Limits,
    log: Log,
    /// The login's statement bound, as read at cold start.
    statement_bound: std::sync::OnceLock<crate::db::StatementBound>,
    /// Where a verified delivery goes when the database cannot take it ([`crate::spill`]).
    spill: Option<crate::spill::Spill>,
}

struct Delivery {
    event_id: Option<EventId>,
    event_type: Option<String>,
    delivery_id: Option<EventId>,
    disposition: Disposition,
    error: Option<String>,
}

/// The one log line of a delivery, written straight from these fields.
#[derive(Serialize)]
struct DeliveryLine<'a> {
    provider: &'a str,
    /// API Gateway's request id, as in its access log.
    #[serde(skip_serializing_if = "Option::is_none")]
    request_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    event_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    event_type: Option<&'a str>,
    /// The sender's id of this delivery attempt, when it is not the event id.
    #[serde(skip_serializing_if = "Option::is_none")]
    delivery_id: Option<&'a str>,
    disposition: &'a str,
    status: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    problem: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
    latency_ms: f64,
    #[serde(flatten)]
    metrics: metrics::Delivery<'a>,
}

impl Delivery {
    fn rejected(rejection: Rejection) -> Self {
        Self {
            event_id: None,
            event_type: None,
            delivery_id: None,
            disposition: Disposition::Rejected(rejection),
            error: None,
        }
    }
}

/// How a receiver reads its signing secrets again: the source, the provider's constructor,
/// and when it last read.
struct Refresh<P> {
    secrets: crate::secrets::WebhookSecrets,
    build: fn(&str) -> Result<P, crate::config::ConfigError>,
    interval: std::time::Duration,
    last: tokio::sync::Mutex<Instant>,
}

impl<P> std::fmt::Debug for Refresh<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Refresh({:?})", self.secrets)
    }
}

impl<P: Provider> Receiver<P> {
    /// Assembles a receiver.
    pub fn new(provider: P, database: Database, limits: Limits, log: Log) -> Self {
        Self {
            name: provider.name(),
            provider: std::sync::RwLock::new(std::sync::Arc::new(provider)),
            refresh: None,
            database,
            limits,
            log,
            statement_bound: std::sync::OnceLock::new(),
            spill: None,
        }
    }

    /// Keeps a verified delivery on `spill` when the database cannot take it, and answers
    /// 200 `queued` ([`crate::spill`]); without one such a delivery is answered 500.
    pub fn with_spill(mut self, spill: Option<crate::spill::Spill>) -> Self {
        self.spill = spill;
        self
    }

    /// Reads the signing secrets from `secrets` again, with `build`, when a delivery's
    /// signature matches none of the current ones and the last read is at least `interval`
    /// old (a deployment: [`crate::secrets::refresh_interval`]); the delivery is then checked
    /// once more. For a source that cannot change (the environment) this does nothing.
    pub fn with_secret_refresh(
        mut self,
        secrets: crate::secrets::WebhookSecrets,
        build: fn(&str) -> Result<P, crate::config::ConfigError>,
        interval: std::time::Duration,
    ) -> Self {
        if secrets.can_change() {
            self.refresh = Some(Refresh {
                secrets,
                build,
                interval,
                last: tokio::sync::Mutex::new(Instant::now()),
            });
        }
        self
    }

    /// The provider as last built.
    fn provider(&self) -> std::sync::Arc<P> {
        let held = self
            .provider
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        std::sync::Arc::clone(&held)
    }

    /// Reads the secrets again if the interval allows; true when the provider was rebuilt
    /// with what was read. Logs the outcome (never a value).
    async fn refresh_secrets(&self) -> bool {
        let Some(refresh) = &self.refresh else {
            return false;
        };
        let mut last = refresh.last.lock().await;
        if last.elapsed() < refresh.interval {
            return false;
        }
        *last = Instant::now();
        let rebuilt = match refresh.secrets.read().await {
            Ok(raw) => (refresh.build)(&raw),
            Err(e) => Err(e),
        };
        match rebuilt {
            Ok(provider) => {
                *self
                    .provider
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) =
                    std::sync::Arc::new(provider);
                self.log.write(
                    Level::Info,
                    "signing secrets read again after a signature matched none",
                    serde_json::json!({"provider": self.name}),
                );
                true
            }
            Err(e) => {
                self.log.write(
                    Level::Warn,
                    "could not read the signing secrets again",
                    serde_json::json!({"provider": self.name, "error": e.to_string()}),
                );
                false
            }
        }
    }

    /// Connects now, at cold start, and logs the cold start with its metrics (`ColdStart`, and
    /// `DatabaseConnectMs` when the connection was made). A failure is logged; the first
    /// delivery retries.
    pub async fn warm_up(&self) {
        let started = Instant::now();
        let connected = self.database.warm_up().await;
        let connect_ms = started.elapsed().as_secs_f64() * 1000.0;
        let mut fields = Map::new();
        fields.insert("provider".into(), self.name.into());
        let cold = metrics::Metric {
            name: "ColdStart",
            unit: "Count",
            value: 1.0,
        };
        match connected {
            Ok(bound) => {
                if let Some(bound) = bound {
                    let _ = self.statement_bound.set(bound);
                }
                let connect = metrics::Metric {
                    name: "DatabaseConnectMs",
                    unit: "Milliseconds",
                    value: connect_ms,
                };
                metrics::embed(&mut fields, &[("Provider", self.name)], &[cold, connect]);
                self.log.write(Level::Info, "cold start", fields);
            }
            Err(e) => {
                fields.insert("error".into(), e.to_string().into());
                metrics::embed(&mut fields, &[("Provider", self.name)], &[cold]);
                self.log
                    .write(Level::Warn, "database not reachable at cold start", fields);
            }
        }
    }

    /// Checks the login's statement bound read at cold start against the function's timeout
    /// (what the first invocation had left when it began). A `statement_timeout` of zero, or
    /// one longer than the function may run, leaves a statement the client gave up on running
    /// on the server behind RDS Proxy, which cancels nothing: an ERROR line naming the login,
    /// with the `UnboundedStatements` metric. Returns true when it logged that.
    pub fn check_statement_bound(&self, function_timeout: std::time::Duration) -> bool {
        let Some(bound) = self.statement_bound.get() else {
            return false;
        };
        let unbounded =
            bound.statement_timeout.is_zero() || bound.statement_timeout > function_timeout;
        if unbounded {
            let mut fields = Map::new();
            fields.insert("provider".into(), self.name.into());
            fields.insert("login".into(), bound.login.as_str().into());
            fields.insert(
                "statement_timeout_ms".into(),
                u64::try_from(bound.statement_timeout.as_millis())
                    .unwrap_or(u64::MAX)
                    .into(),
            );
            fields.insert(
                "function_timeout_ms".into(),
                u64::try_from(function_timeout.as_millis())
                    .unwrap_or(u64::MAX)
                    .into(),
            );
            let metric = metrics::Metric {
                name: "UnboundedStatements",
                unit: "Count",
                value: 1.0,
            };
            metrics::embed(&mut fields, &[("Provider", self.name)], &[metric]);
            self.log.write(
                Level::Error,
                "the login's statement_timeout does not end a statement within the function's \
                 timeout; set it as the login's default (the migrate function's DB_HANDLER_USERS)",
                fields,
            );
        }
        unbounded
    }

    /// Logs the reconnects the last delivery made, with the `Reconnects` metric: a proxy that
    /// drops idle connections, a failover, or a database that went away shows here.
    fn report_reconnects(&self, event_id: &EventId) {
        let reconnects = self.database.take_reconnects();
        if reconnects == 0 {
            return;
        }
        let mut fields = Map::new();
        fields.insert("provider".into(), self.name.into());
        fields.insert("event_id".into(), event_id.as_str().into());
        let metric = metrics::Metric {
            name: "Reconnects",
            unit: "Count",
            value: reconnects as f64,
        };
        metrics::embed(&mut fields, &[("Provider", self.name)], &[metric]);
        self.log.write(Level::Info, "reconnected", fields);
    }

    /// Handles one request and always answers: it never panics and never fails.
    pub(crate) async fn handle(&self, request: Request) -> Response<Body> {
        let started = Instant::now();
        let delivery = self.deliver(&request).await;
        let request_id = request
            .extensions()
            .get::<ApiRequestId>()
            .map(|id| id.0.as_str());
        self.finish(started, request_id, delivery)
    }

    /// Answers a request refused before it could be read (at the Lambda boundary).
    pub(crate) fn refuse(&self, started: Instant, rejection: Rejection) -> Response<Body> {
        self.finish(started, None, Delivery::rejected(rejection))
    }

    /// Logs the delivery's one line and turns its disposition into the response.
    fn finish(
        &self,
        started: Instant,
        request_id: Option<&str>,
        delivery: Delivery,
    ) -> Response<Body> {
        let latency_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        let latency_ms = latency_us as f64 / 1000.0;
        let disposition = delivery.disposition.name();
        if self.log.enabled(Level::Debug)
            && let Disposition::Rejected(r) = &delivery.disposition
        {
            // Why, beyond the problem's slug: our own words, never request data.
            self.log.write(
                Level::Debug,
                "rejected",
                serde_json::json!({"problem": r.problem.slug(), "detail": r.detail}),
            );
        }
        let line = DeliveryLine {
            provider: self.name,
            request_id,
            event_id: delivery.event_id.as_ref().map(EventId::as_str),
            event_type: delivery.event_type.as_deref(),
            delivery_id: delivery.delivery_id.as_ref().map(EventId::as_str),
            disposition,
            status: delivery.disposition.status().as_u16(),
            problem: match &delivery.disposition {
                Disposition::Rejected(r) => Some(r.problem.slug()),
                _ => None,
            },
            error: delivery.error.as_deref(),
            latency_ms,
            metrics: metrics::Delivery::new(self.name, disposition, latency_ms),
        };
        let level = match delivery.disposition {
            Disposition::Error => Level::Error,
            _ => Level::Info,
        };
        self.log.write(level, "delivery", &line);
        delivery.disposition.into_response()
    }

    /// Everything before the database: method, size, signature, parsing. Pure but for the
    /// clock; a request it refuses never reaches the database.
    pub fn admit(&self, request: &Request, now: u64) -> Result<Admitted<P::Event>, Rejection> {
        if request.method() != Method::POST {
            return Err(Rejection::new(
                Problem::MethodNotAllowed,
                "webhooks are delivered with POST",
            ));
        }
        let body: &[u8] = request.body();
        if body.len() > self.limits.max_body_bytes {
            return Err(Rejection::new(
                Problem::PayloadTooLarge,
                "the body is larger than this receiver accepts",
            ));
        }
        let provider = self.provider();
        let verifier = provider.verifier();
        let verified = verifier.verify(request.headers(), body, now)?;
        let payload_sha256: [u8; 32] = Sha256::digest(body).into();
        // The headers the scheme and the parser read are kept only for a spill queue's
        // message, which the drain verifies and parses again.
        let read = std::cell::RefCell::new(Vec::new());
        let unsigned = match self.spill {
            Some(_) => {
                let signature = verifier.signature_headers().iter().filter_map(|name| {
                    let value = crate::verify::one_header(request.headers(), name).ok()??;
                    Some(((*name).to_owned(), value.to_owned()))
                });
                read.borrow_mut().extend(signature);
                Unsigned::noting(request.headers(), &read)
            }
            None => Unsigned::new(request.headers()),
        };
        let parsed = provider.parse(&Signed::new(body, &payload_sha256, &verified), &unsigned)?;
        Ok(Admitted {
            parsed,
            payload_sha256,
            read_headers: read.into_inner(),
        })
    }

    async fn deliver(&self, request: &Request) -> Delivery {
        let admitted = match self.admit(request, unix_now()) {
            Ok(admitted) => admitted,
            // A rotation may have begun: read the secrets again (rate-limited) and look once more.
            Err(r) if r.problem == Problem::SignatureMismatch && self.refresh_secrets().await => {
                match self.admit(request, unix_now()) {
                    Ok(admitted) => admitted,
                    Err(r) => return Delivery::rejected(r),
                }
            }
            Err(r) => return Delivery::rejected(r),
        };
        let (disposition, error) = match self
            .settle(&admitted.parsed, Some(admitted.payload_sha256))
            .await
        {
            Ok(disposition) => (disposition, None),
            Err(e) => self.keep(request.body(), &admitted, &e).await,
        };
        let parsed = admitted.parsed;
        Delivery {
            event_id: Some(parsed.event_id),
            event_type: Some(parsed.event_type),
            delivery_id: parsed.delivery_id,
            disposition,
            error,
        }
    }

    /// A delivery whose statement failed with `e`: put on the spill queue when the database
    /// was unavailable and there is one (`queued`), else an error; the error text says which.
    async fn keep(
        &self,
        body: &[u8],
        admitted: &Admitted<P::Event>,
        e: &crate::db::DeliveryError,
    ) -> (Disposition, Option<String>) {
        let (Some(spill), Some(reason)) = (&self.spill, e.unavailable()) else {
            return (Disposition::Error, Some(e.summary()));
        };
        let spilled = crate::spill::Spilled {
            provider: self.name,
            event_id: admitted.parsed.event_id.as_str(),
            body,
            headers: &admitted.read_headers,
            received_at: unix_now(),
        };
        match spill.put(&spilled).await {
            Ok(()) => (
                Disposition::Queued,
                Some(format!("{}; queued ({reason})", e.summary())),
            ),
            Err(why) => (
                Disposition::Error,
                Some(format!("{}; not queued: {why}", e.summary())),
            ),
        }
    }

    /// The claim and the effect of a parsed event, on the database: processed, ignored or
    /// duplicate, or why it failed. What a webhook and a drained message share.
    async fn settle(
        &self,
        parsed: &Parsed<P::Event>,
        payload_sha256: Option<[u8; 32]>,
    ) -> Result<Disposition, crate::db::DeliveryError> {
        let claim = Claim {
            provider: self.name,
            event_id: parsed.event_id.as_str(),
            event_type: &parsed.event_type,
            payload_sha256,
        };
        let provider = self.provider();
        let effect = provider.effect(parsed);
        let apply = Applier {
            provider: &*provider,
            parsed,
        };
        let outcome = self
            .database
            .run(&crate::pipeline::Settle {
                claim: &claim,
                effect: effect.as_ref(),
                apply: &apply,
            })
            .await;
        self.report_reconnects(&parsed.event_id);
        match outcome? {
            Finished::Processed => Ok(Disposition::Processed),
            Finished::Ignored => Ok(Disposition::Ignored),
            Finished::Duplicate { stored_sha256 } => {
                // An event from the sender's API has no fingerprint, and a webhook after one
                // finds none stored: neither is compared.
                let differs = match (&stored_sha256, &claim.payload_sha256) {
                    (Some(stored), Some(ours)) => stored.as_slice() != ours.as_slice(),
                    _ => false,
                };
                if differs {
                    let mut fields = Map::new();
                    fields.insert("provider".into(), claim.provider.into());
                    fields.insert("event_id".into(), parsed.event_id.as_str().into());
                    self.log.write(
                        "warn",
                        "duplicate event id with a different payload; the first one was kept",
                        fields,
                    );
                }
                Ok(Disposition::Duplicate)
            }
        }
    }

    /// Applies a batch of spilled deliveries (an SQS event from the provider's spill queue),
    /// one after another on this environment's connection, each through the same claim and
    /// effect as a webhook; returns the ones to receive again. A record from another queue, or
    /// any record when this function has no spill queue, is applied never; a message that
    /// cannot be read, belongs to another provider, does not verify or no longer parses fails
    /// every time, and so reaches the dead-letter queue after the queue's stated receives; one
    /// the database could not take comes back after its visibility timeout. One log line per
    /// message (`drained`), with the `Drained` metric by provider and disposition.
    pub(crate) async fn drain(
        &self,
        records: &[crate::spill::Record],
    ) -> crate::spill::BatchResponse {
        let mut response = crate::spill::BatchResponse::default();
        // Once the database is found unavailable, the rest of the batch is not tried: each
        // would wait out its own connect or deadline, and the batch the function's timeout.
        let mut unavailable: Option<&'static str> = None;
        for record in records {
            let started = Instant::now();
            let mut fields = Map::new();
            let (disposition, error) = match self.restore(record).await {
                Err(Refused::Unreadable(why)) => (Disposition::Error, Some(why)),
                Err(Refused::Unproven(rejection)) => {
                    let why = format!("the spilled delivery does not verify: {}", rejection.detail);
                    (Disposition::Rejected(rejection), Some(why))
                }
                Ok(Reparsed {
                    parsed,
                    payload_sha256: sha,
                    received_at,
                }) => {
                    fields.insert("event_id".into(), parsed.event_id.as_str().into());
                    fields.insert(
                        "queued_seconds".into(),
                        unix_now().saturating_sub(received_at).into(),
                    );
                    match unavailable {
                        Some(reason) => (
                            Disposition::Error,
                            Some(format!("not tried: the database is unavailable ({reason})")),
                        ),
                        None => match self.settle(&parsed, Some(sha)).await {
                            Ok(disposition) => (disposition, None),
                            Err(e) => {
                                unavailable = e.unavailable();
                                (Disposition::Error, Some(e.summary()))
                            }
                        },
                    }
                }
            };
            let applied = matches!(
                disposition,
                Disposition::Processed | Disposition::Ignored | Disposition::Duplicate
            );
            if !applied {
                response.fail(&record.message_id);
            }
            let name = disposition.name();
            fields.insert("provider".into(), self.name.into());
            fields.insert("sqs_message_id".into(), record.message_id.as_str().into());
            fields.insert("disposition".into(), name.into());
            fields.insert("receive_count".into(), record.receive_count().into());
            if let Some(error) = error {
                fields.insert("error".into(), error.into());
            }
            let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
            fields.insert("latency_ms".into(), latency_ms.into());
            let metric = metrics::Metric {
                name: "Drained",
                unit: "Count",
                value: 1.0,
            };
            metrics::embed(
                &mut fields,
                &[("Provider", self.name), ("Disposition", name)],
                &[metric],
            );
            let level = if applied { Level::Info } else { Level::Error };
            self.log.write(level, "drained", fields);
        }
        response
    }

    /// A spilled message, proven and parsed again as its webhook was: the same bytes, the
    /// signature headers they arrived with, checked with the current secrets (read again once
    /// if none matches, as for a webhook), and the headers the parser read then.
    async fn restore(&self, record: &crate::spill::Record) -> Result<Reparsed<P::Event>, Refused> {
        let unreadable = |why: String| Refused::Unreadable(why);
        let Some(spill) = &self.spill else {
            return Err(unreadable(
                "this function has no spill queue (SPILL_QUEUE_URL) and drains nothing".into(),
            ));
        };
        if !spill.drains(record.event_source_arn.as_deref()) {
            return Err(unreadable(
                "a record from a queue other than this function's spill queue".into(),
            ));
        }
        let restored = record.restore().map_err(|why| unreadable(why.to_owned()))?;
        if restored.provider != self.name {
            return Err(unreadable(format!(
                "a message for provider {:?} on {:?}'s queue",
                restored.provider, self.name
            )));
        }
        let reparsed = match self.reparse(&restored.body, &restored.headers) {
            Err(r) if r.problem == Problem::SignatureMismatch && self.refresh_secrets().await => {
                self.reparse(&restored.body, &restored.headers)
            }
            other => other,
        };
        let (parsed, sha) = reparsed.map_err(|r| match r.problem {
            Problem::InvalidPayload | Problem::UnreadableBody => unreadable(format!(
                "the spilled delivery no longer parses: {}",
                r.detail
            )),
            _ => Refused::Unproven(r),
        })?;
        Ok(Reparsed {
            parsed,
            payload_sha256: sha,
            received_at: restored.received_at,
        })
    }

    /// A spilled delivery's signature checked with no timestamp tolerance, then the provider's
    /// parser on what it proved.
    fn reparse(
        &self,
        body: &[u8],
        headers: &http::HeaderMap,
    ) -> Result<(Parsed<P::Event>, [u8; 32]), Rejection> {
        let provider = self.provider();
        let verified = provider.verifier().authenticate(headers, body)?;
        let sha: [u8; 32] = Sha256::digest(body).into();
        let parsed =
            provider.parse(&Signed::new(body, &sha, &verified), &Unsigned::new(headers))?;
        Ok((parsed, sha))
    }

    /// The provider's parser on an event read from its sender's API, with no signature to
    /// check and no headers. The body's SHA-256 with it.
    fn parse_unverified(&self, body: &[u8]) -> Result<(Parsed<P::Event>, [u8; 32]), Rejection> {
        let verified = crate::verify::Verified::default();
        let sha: [u8; 32] = Sha256::digest(body).into();
        let headers = http::HeaderMap::new();
        let parsed = self.provider().parse(
            &Signed::new(body, &sha, &verified),
            &Unsigned::new(&headers),
        )?;
        Ok((parsed, sha))
    }

    /// Applies an event read from its sender's own API (a recover function's: Stripe's
    /// `GET /v1/events`) through the same claim and effect as its webhook. `body` is the
    /// event's JSON as the API returned it, parsed by the provider's parser with no headers;
    /// no signature covers it (the API was reached over verified TLS with the account's key:
    /// ARCHITECTURE.md "Recovery from the senders' records"), and the claim stores no payload
    /// fingerprint, because the API's JSON is not the bytes the webhook carried. An event that
    /// did arrive is a duplicate; one that did not is applied once. One log line per event
    /// (`recovered`); the run's counts are the caller's report.
    pub async fn recover(&self, body: &[u8]) -> Recovered {
        let started = Instant::now();
        let recovered = match self.parse_unverified(body) {
            Err(r) => Recovered {
                event_id: None,
                disposition: Disposition::Rejected(r.clone()),
                error: Some(format!("the event does not parse: {}", r.detail)),
                unavailable: None,
            },
            Ok((parsed, _)) => {
                let (disposition, error, unavailable) = match self.settle(&parsed, None).await {
                    Ok(d) => (d, None, None),
                    Err(e) => (Disposition::Error, Some(e.summary()), e.unavailable()),
                };
                Recovered {
                    event_id: Some(parsed.event_id),
                    disposition,
                    error,
                    unavailable,
                }
            }
        };
        let mut fields = Map::new();
        fields.insert("provider".into(), self.name.into());
        if let Some(id) = &recovered.event_id {
            fields.insert("event_id".into(), id.as_str().into());
        }
        fields.insert("disposition".into(), recovered.disposition.name().into());
        if let Some(error) = &recovered.error {
            fields.insert("error".into(), error.as_str().into());
        }
        fields.insert(
            "latency_ms".into(),
            (started.elapsed().as_secs_f64() * 1000.0).into(),
        );
        let level = if recovered.error.is_some() {
            Level::Error
        } else {
            Level::Info
        };
        self.log.write(level, "recovered", fields);
        recovered
    }
}

impl<P: Provider> Receiver<P> {
    /// The ids among `event_ids` already in this provider's ledger: applied by a webhook, a
    /// drain or an earlier run. A recover function asks before it applies what it listed, so
    /// its cap counts only events still to apply. An error is the database's, data-free.
    pub async fn claimed(
        &self,
        event_ids: &[&str],
    ) -> Result<std::collections::HashSet<String>, crate::db::DeliveryError> {
        self.database
            .run(&crate::pipeline::Claimed {
                provider: self.name,
                event_ids,
            })
            .await
    }
}

/// What [`Receiver::recover`] did with one event.
#[derive(Debug)]
pub struct Recovered {
    /// The event's id, when it parsed.
    pub event_id: Option<EventId>,
    /// Processed, ignored, duplicate, rejected (it does not parse) or error.
    pub disposition: Disposition,
    /// Why it was not applied, data-free.
    pub error: Option<String>,
    /// When the database was unavailable (the cause's name, as a spill names it): the caller
    /// stops, and the next run tries again.
    pub unavailable: Option<&'static str>,
}

/// A request that passed every check before the database.
#[derive(Debug)]
pub struct Admitted<E> {
    /// The parsed event.
    pub parsed: Parsed<E>,
    /// SHA-256 of the raw body, stored with the claim.
    pub payload_sha256: [u8; 32],
    /// The signature headers, and the unsigned headers the parser read and found: what a
    /// spilled copy carries.
    read_headers: Vec<(String, String)>,
}

/// Why the drain did not apply a record: it is not a spilled delivery it can read (from its
/// own queue, of its own provider), or its signature does not prove it.
enum Refused {
    Unreadable(String),
    Unproven(Rejection),
}

/// A spilled delivery parsed again: the event, its body's hash and when it first arrived.
struct Reparsed<E> {
    parsed: Parsed<E>,
    payload_sha256: [u8; 32],
    received_at: u64,
}

/// One delivery's Rust effect: the provider's [`Provider::apply`] for its event.
struct Applier<'a, P: Provider> {
    provider: &'a P,
    parsed: &'a Parsed<P::Event>,
}

impl<P: Provider> crate::pipeline::Apply for Applier<'_, P> {
    fn apply<'t>(
        &'t self,
        tx: &'t crate::effect::Tx<'t>,
    ) -> futures_util::future::BoxFuture<'t, Result<(), crate::effect::EffectError>> {
        Box::pin(self.provider.apply(self.parsed, tx))
    }
}

pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
