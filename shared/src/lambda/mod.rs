//! The Lambda boundary: an API Gateway event (HTTP API payload 2.0 or REST API 1.0) in, the
//! matching API Gateway response payload out; an SQS event from the spill queue or the event
//! queue (EventBridge, [`crate::bridge`]) in, a partial batch response out; and the runtime loop
//! that serves them.
//!
//! The event is read by `event.rs` rather than by `lambda_http`'s own adapter because that
//! adapter panics on a body flagged `isBase64Encoded` that is not base64; a request that cannot
//! be read must be a 400 like any other bad request, not a crashed execution environment.

use std::borrow::Cow;
use std::time::Instant;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use http::{HeaderMap, HeaderValue};
use lambda_http::{Body, Response};
use lambda_runtime::{LambdaEvent, service_fn};
use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};

mod event;

pub use self::event::MAX_HEADERS;
use self::event::{Format, Incoming, Invocation, not_an_api_gateway_event, read};
use crate::config::ConfigError;
use crate::db::Database;
use crate::log::Log;
use crate::provider::Provider;
use crate::receiver::{Limits, Receiver};
use crate::response::Rejection;

// The jobs' and tests', not a provider crate's: out of the documented surface.
#[doc(hidden)]
/// The API Gateway response payload for one request, in the event's format.
#[derive(Debug)]
pub struct Payload {
    format: Format,
    response: Response<Body>,
}

impl Payload {
    /// The HTTP status of the response.
    pub fn status(&self) -> u16 {
        self.response.status().as_u16()
    }

    /// The response it carries.
    pub fn response(&self) -> &Response<Body> {
        &self.response
    }
}

impl Serialize for Payload {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // Serialises `{"statusCode", "headers", ["multiValueHeaders",] "body",
        // "isBase64Encoded"}` straight from the response: no intermediate JSON value.
        struct Single<'a>(&'a HeaderMap);
        struct Multi<'a>(&'a HeaderMap);
        fn text(value: &HeaderValue) -> Cow<'_, str> {
            String::from_utf8_lossy(value.as_bytes())
        }
        impl Serialize for Single<'_> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_map(
                    self.0
                        .iter()
                        .map(|(name, value)| (name.as_str(), text(value))),
                )
            }
        }
        impl Serialize for Multi<'_> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_map(self.0.keys().map(|name| {
                    (
                        name.as_str(),
                        self.0.get_all(name).iter().map(text).collect::<Vec<_>>(),
                    )
                }))
            }
        }
        let headers = self.response.headers();
        let (body, base64) = match self.response.body() {
            Body::Text(text) => (Cow::Borrowed(text.as_str()), false),
            Body::Binary(bytes) => (Cow::Owned(STANDARD.encode(bytes)), true),
            _ => (Cow::Borrowed(""), false),
        };
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("statusCode", &self.status())?;
        map.serialize_entry("headers", &Single(headers))?;
        if self.format == Format::V1 {
            map.serialize_entry("multiValueHeaders", &Multi(headers))?;
        }
        map.serialize_entry("body", &body)?;
        map.serialize_entry("isBase64Encoded", &base64)?;
        map.end()
    }
}

impl<P: Provider> Receiver<P> {
    /// Handles one raw API Gateway event and returns the response payload for it. An SQS
    /// event is refused here (400), not drained: only [`Receiver::handle_invocation`] drains.
    pub async fn handle_event(&self, event: &str) -> Payload {
        let started = Instant::now();
        self.respond(started, read(event)).await
    }

    /// Handles one invocation of the function: an API Gateway event is answered with its
    /// response payload; an SQS event (the provider's spill queue, or its event queue of
    /// EventBridge events) is applied and answered with the messages to receive again.
    pub async fn handle_invocation(&self, event: &str) -> Answer {
        self.answer(Instant::now(), read(event), None).await
    }

    /// The answer to an invocation as read.
    async fn answer(
        &self,
        started: Instant,
        read: Result<Incoming, (Format, Rejection)>,
        deadline: Option<tokio::time::Instant>,
    ) -> Answer {
        match read {
            Ok(Incoming::Spilled(records)) => Answer::Batch(self.drain(&records, deadline).await),
            Ok(Incoming::UnreadableBatch(ids)) => {
                self.refuse_batch(&ids);
                Answer::Batch(crate::sqs::BatchResponse::all_failed(&ids))
            }
            read => Answer::Http(self.respond(started, read).await),
        }
    }

    /// The response payload to an event as read; an SQS event here is not an API Gateway
    /// event.
    async fn respond(
        &self,
        started: Instant,
        read: Result<Incoming, (Format, Rejection)>,
    ) -> Payload {
        match read {
            Ok(Incoming::Http(format, request)) => Payload {
                format,
                response: self.handle(request).await,
            },
            Ok(Incoming::Spilled(_) | Incoming::UnreadableBatch(_)) => Payload {
                format: Format::V1,
                response: self.refuse(started, not_an_api_gateway_event()),
            },
            Err((format, rejection)) => Payload {
                format,
                response: self.refuse(started, rejection),
            },
        }
    }
}

// The jobs' and tests', not a provider crate's: out of the documented surface.
#[doc(hidden)]
/// The answer to one invocation.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Answer {
    /// An API Gateway response payload.
    Http(Payload),
    /// A partial batch response to an SQS event.
    Batch(crate::sqs::BatchResponse),
}

/// How many invocations one execution environment serves at once, and how many database
/// connections it may hold for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Concurrency {
    /// Invocations at once: `AWS_LAMBDA_MAX_CONCURRENCY`, which Lambda sets on Managed
    /// Instances (`PerExecutionEnvironmentMaxConcurrency`); unset, one, as on classic Lambda.
    pub invocations: usize,
    /// Database connections at most: `DB_MAX_CONNECTIONS`, by default one per invocation at
    /// once, and never more (docs/decisions/0048).
    pub connections: usize,
}

impl Concurrency {
    /// One invocation at a time, on one connection: classic Lambda.
    pub const CLASSIC: Self = Self {
        invocations: 1,
        connections: 1,
    };

    /// From `AWS_LAMBDA_MAX_CONCURRENCY` and `DB_MAX_CONNECTIONS`; an error names the
    /// variable.
    pub fn from_env() -> Result<Self, ConfigError> {
        let invocations = crate::config::number("AWS_LAMBDA_MAX_CONCURRENCY", 1)?.max(1);
        let connections = crate::config::number("DB_MAX_CONNECTIONS", invocations)?;
        if connections == 0 || connections > invocations {
            return Err(ConfigError::new(format!(
                "DB_MAX_CONNECTIONS must be from 1 to the invocations served at once \
                 ({invocations}, AWS_LAMBDA_MAX_CONCURRENCY)"
            )));
        }
        let size = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        Ok(Self {
            invocations: size(invocations),
            connections: size(connections),
        })
    }
}

/// Resolves once this process's parent has changed (it ended, and the process was adopted),
/// checked every second.
async fn orphaned() {
    let parent = std::os::unix::process::parent_id();
    loop {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        if std::os::unix::process::parent_id() != parent {
            return;
        }
    }
}

/// Set once the first invocation has checked the login's statement bound against the
/// function's timeout.
static BOUND_CHECKED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl<P: Provider> Receiver<P> {
    /// The deadline of the invocation `context` describes, for a batch to stop taking records
    /// before it; the process's first checks the login's statement bound against the
    /// function's timeout (that invocation's time left: Lambda puts it in no variable).
    fn deadline(&self, context: &lambda_runtime::Context) -> tokio::time::Instant {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let left = std::time::Duration::from_millis(context.deadline.saturating_sub(now_ms));
        if !BOUND_CHECKED.swap(true, std::sync::atomic::Ordering::Relaxed) {
            self.check_statement_bound(left);
        }
        tokio::time::Instant::now() + left
    }
}

/// Runs a receiver as a Lambda function: connect at cold start, then answer every
/// invocation, one at a time, with the same connection.
///
/// The runtime loop ends only when the Runtime API fails. Before any invocation that is an
/// error (a runtime that cannot reach its API must say so and exit non-zero). After one, it
/// is the API going away between invocations: Lambda itself never does that (it freezes or
/// ends the environment), but a local emulator does, `sam local invoke` after every single
/// invocation. That ends the process quietly, with one info line instead of an `Error:` that
/// reads as a failed invocation; Lambda would start a new environment either way, whatever
/// the exit status.
pub async fn serve<P: Provider>(receiver: Receiver<P>) -> Result<(), lambda_runtime::Error> {
    serve_with(receiver, Concurrency::CLASSIC).await
}

/// [`serve`] with `concurrency`: more than one invocation at once is Lambda Managed
/// Instances' mode, through `lambda_runtime`'s concurrent runtime (one polling task per
/// invocation at once, all on this process's runtime), each delivery on a connection of its
/// own ([`Database`]).
pub async fn serve_with<P: Provider>(
    receiver: Receiver<P>,
    concurrency: Concurrency,
) -> Result<(), lambda_runtime::Error> {
    receiver.warm_up().await;
    let served = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let ended = if concurrency.invocations > 1 {
        crate::log::Log::stdout().write(
            crate::log::Level::Info,
            "serving invocations at once",
            serde_json::json!({
                "invocations": concurrency.invocations,
                "connections": concurrency.connections,
            }),
        );
        let receiver = std::sync::Arc::new(receiver);
        let counter = std::sync::Arc::clone(&served);
        let serving =
            lambda_runtime::run_concurrent(service_fn(move |event: LambdaEvent<Invocation>| {
                let (receiver, counter) = (
                    std::sync::Arc::clone(&receiver),
                    std::sync::Arc::clone(&counter),
                );
                async move {
                    // Several at once: each invocation's lines name it through its task.
                    let started = Instant::now();
                    let invocation = crate::log::Invocation::of(&event.context);
                    let answering = async {
                        let deadline = receiver.deadline(&event.context);
                        receiver
                            .answer(started, event.payload.0, Some(deadline))
                            .await
                    };
                    let answer = crate::log::within(invocation, answering).await;
                    counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    Ok::<_, lambda_runtime::Error>(answer)
                }
            }));
        // The concurrent runtime polls its API again at once after an error, for good: an
        // environment whose API went away (a local emulator that ended) would spin. It ends
        // instead once the process that started it is gone, as Lambda's never is while the
        // environment lives.
        tokio::select! {
            ended = serving => ended,
            () = orphaned() => {
                crate::log::Log::stdout().write(
                    crate::log::Level::Info,
                    "the process that started this environment is gone; exiting",
                    serde_json::Map::new(),
                );
                Ok(())
            }
        }
    } else {
        let (receiver, counter) = (&receiver, &*served);
        lambda_runtime::run(service_fn(
            move |event: LambdaEvent<Invocation>| async move {
                // One at a time: the process's one slot names the invocation.
                let started = Instant::now();
                crate::log::begin(&event.context);
                let deadline = receiver.deadline(&event.context);
                let answer = receiver
                    .answer(started, event.payload.0, Some(deadline))
                    .await;
                counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Ok::<_, lambda_runtime::Error>(answer)
            },
        ))
        .await
    };
    let served = served.load(std::sync::atomic::Ordering::Relaxed);
    match ended {
        Err(error) if served > 0 => {
            // The error is the HTTP client's (no request data in it). The receiver's own log
            // is stdout too, which is where a function's lines go.
            crate::log::Log::stdout().write(
                crate::log::Level::Info,
                "the Lambda Runtime API went away; exiting",
                serde_json::json!({"invocations": served, "cause": error.to_string()}),
            );
            Ok(())
        }
        other => other,
    }
}

/// The whole of a provider function's `main`: read the signing secrets from the variable the
/// provider's registry entry names (`secret_var` in [`Provider::MANIFEST`], or the Secrets
/// Manager secret `<secret_var>_ARN` names: [`crate::secrets`]), build the provider from them
/// with `build` and the receiver from the environment, connect, and serve. A configuration
/// error is logged as one line (naming the variable, never its value) and ends the process
/// before it takes any request, as a Runtime API that fails before the first invocation does;
/// both exit with a failure status.
pub async fn run_from_env<P: Provider>(
    build: fn(&str) -> Result<P, ConfigError>,
) -> std::process::ExitCode {
    let log = Log::process();
    let built = async {
        let entry = crate::registry::Entry::from_manifest(P::MANIFEST)?;
        let bridge = crate::bridge::Bridge::from_env(P::NAME)?;
        let spill = crate::spill::Spill::from_env()?;
        let api = crate::fetch::SenderApi::from_env(&entry).await?;
        let limits = Limits::from_env()?;
        let settings = crate::db::Settings::from_env().await?;
        let concurrency = Concurrency::from_env()?;
        let database = Database::new(settings).with_connections(concurrency.connections);
        // No signing secret: a function that takes its sender's events through EventBridge
        // alone, if the provider has such a form; otherwise the secret is required.
        let bridged_only =
            bridge.is_some() && !crate::secrets::WebhookSecrets::configured(entry.secret_var);
        let receiver = match P::without_webhooks().filter(|_| bridged_only) {
            Some(provider) => Receiver::new(provider, database, limits, log.clone()),
            None => {
                let secrets = crate::secrets::WebhookSecrets::from_env(entry.secret_var).await?;
                let interval = crate::secrets::refresh_interval()?;
                let provider = build(&secrets.read().await?)?;
                Receiver::new(provider, database, limits, log.clone())
                    .with_secret_refresh(secrets, build, interval)
            }
        };
        Ok::<_, ConfigError>((
            receiver
                .with_spill(spill)
                .with_bridge(bridge)
                .with_sender_api(api),
            concurrency,
        ))
    }
    .await;
    let Ok((receiver, concurrency)) = log.config(built) else {
        return std::process::ExitCode::FAILURE;
    };
    match serve_with(receiver, concurrency).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            // The HTTP client's error: no request data in it.
            log.write(
                crate::log::Level::Error,
                "the Lambda Runtime API failed before any invocation",
                serde_json::json!({"cause": error.to_string()}),
            );
            std::process::ExitCode::FAILURE
        }
    }
}
