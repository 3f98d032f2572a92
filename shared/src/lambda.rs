//! The Lambda boundary: an API Gateway event (HTTP API payload 2.0 or REST API 1.0) in, the
//! matching API Gateway response payload out.
//!
//! The event is read here rather than by `lambda_http`'s own adapter because that adapter
//! panics on a body flagged `isBase64Encoded` that is not base64; a request that cannot be
//! read must be a 400 like any other bad request, not a crashed execution environment. It is
//! also read in one pass that borrows from the event text and keeps only the method, the
//! headers and the body: the rest of the event (request context, query, cookies) is skipped,
//! never allocated.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;
use std::time::Instant;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use lambda_http::{Body, Request, Response};
use lambda_runtime::{LambdaEvent, service_fn};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::config::ConfigError;
use crate::db::Database;
use crate::log::Log;
use crate::provider::Provider;
use crate::receiver::{ApiRequestId, Limits, Receiver};
use crate::response::{Problem, Rejection};

/// The most header lines an event may carry (a name with several values counts once per
/// value); an event with more is a 400. `http`'s `HeaderMap` panics past about 24,000 names,
/// and no sender of webhooks comes near a thousand.
pub const MAX_HEADERS: usize = 1000;

/// The parts of an API Gateway event the receiver reads, in either payload format.
#[derive(Deserialize)]
struct Event<'a> {
    /// "2.0" for an HTTP API payload 2.0; absent (or "1.0") for a REST API event.
    #[serde(borrow, default)]
    version: Option<Cow<'a, str>>,
    /// The method of a 1.0 event.
    #[serde(rename = "httpMethod", borrow, default)]
    http_method: Option<Cow<'a, str>>,
    /// The method of a 2.0 event is `requestContext.http.method`.
    #[serde(rename = "requestContext", borrow, default)]
    request_context: Option<Context<'a>>,
    /// One value per header (2.0, and 1.0's single-value twin).
    #[serde(default)]
    headers: Headers<One>,
    /// Every value per header (1.0 only).
    #[serde(rename = "multiValueHeaders", default)]
    multi_value_headers: Headers<Many>,
    #[serde(borrow, default)]
    body: Option<Cow<'a, str>>,
    #[serde(rename = "isBase64Encoded", default)]
    is_base64_encoded: Option<bool>,
    /// An SQS event's records: the provider's spill queue, drained ([`crate::spill`]). An API
    /// Gateway event has none.
    #[serde(rename = "Records", default)]
    records: Option<Vec<crate::spill::Record>>,
}

/// What an invocation was: a request through API Gateway, or a batch from the spill queue.
// Made once per invocation and matched at once: boxing the request would add an allocation
// to every delivery.
#[allow(clippy::large_enum_variant)]
enum Incoming {
    Http(Format, Request),
    Spilled(Vec<crate::spill::Record>),
}

#[derive(Deserialize)]
struct Context<'a> {
    #[serde(borrow, default)]
    http: Option<HttpContext<'a>>,
    /// API Gateway's id of the request (both formats), as in its access log.
    #[serde(rename = "requestId", borrow, default)]
    request_id: Option<Cow<'a, str>>,
}

/// API Gateway's request id, carried in the request's extensions to the delivery's log line.
#[derive(Debug, Clone, Deserialize)]
struct HttpContext<'a> {
    #[serde(borrow)]
    method: Cow<'a, str>,
}

/// A header map read straight from the event's JSON object, names lower-cased by
/// `HeaderName`. A name or value HTTP cannot carry makes the event unreadable. `V` says
/// whether each header holds one string (`headers`) or a list (`multiValueHeaders`); `null`
/// is no headers.
struct Headers<V>(HeaderMap, PhantomData<V>);

impl<V> Default for Headers<V> {
    fn default() -> Self {
        Self(HeaderMap::new(), PhantomData)
    }
}

/// One string per header.
struct One;
/// A list of strings per header.
struct Many;

trait Values<'de> {
    fn append<A: MapAccess<'de>>(
        map: &mut A,
        name: HeaderName,
        headers: &mut HeaderMap,
    ) -> Result<(), A::Error>;
}

fn header_value<E: de::Error>(value: &str) -> Result<HeaderValue, E> {
    HeaderValue::from_str(value).map_err(|_| E::custom("a header value HTTP cannot carry"))
}

/// Refuses one more header line once the map holds [`MAX_HEADERS`].
fn room_for_one<E: de::Error>(headers: &HeaderMap) -> Result<(), E> {
    if headers.len() >= MAX_HEADERS {
        return Err(E::custom("more header lines than the limit"));
    }
    Ok(())
}

impl<'de> Values<'de> for One {
    fn append<A: MapAccess<'de>>(
        map: &mut A,
        name: HeaderName,
        headers: &mut HeaderMap,
    ) -> Result<(), A::Error> {
        let value: Cow<'de, str> = map.next_value()?;
        room_for_one(headers)?;
        headers.insert(name, header_value(&value)?);
        Ok(())
    }
}

impl<'de> Values<'de> for Many {
    fn append<A: MapAccess<'de>>(
        map: &mut A,
        name: HeaderName,
        headers: &mut HeaderMap,
    ) -> Result<(), A::Error> {
        let values: Vec<Cow<'de, str>> = map.next_value()?;
        for value in values {
            room_for_one(headers)?;
            headers.append(name.clone(), header_value(&value)?);
        }
        Ok(())
    }
}

impl<'de, V: Values<'de>> Deserialize<'de> for Headers<V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Read<V>(PhantomData<V>);
        impl<'de, V: Values<'de>> Visitor<'de> for Read<V> {
            type Value = Headers<V>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of headers")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Headers::default())
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut headers = HeaderMap::with_capacity(map.size_hint().unwrap_or(8));
                while let Some(name) = map.next_key::<Cow<'de, str>>()? {
                    let name = HeaderName::from_bytes(name.as_bytes())
                        .map_err(|_| de::Error::custom("a header name HTTP cannot carry"))?;
                    V::append(&mut map, name, &mut headers)?;
                }
                Ok(Headers(headers, PhantomData))
            }
        }
        deserializer.deserialize_any(Read(PhantomData))
    }
}

/// Which payload format the event came in, and so which response format it expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    /// HTTP API, payload format 2.0.
    V2,
    /// REST API (or HTTP API payload format 1.0).
    V1,
}

/// Turns the raw event into the request the receiver reads: its method, headers and body,
/// nothing else. `lambda_http`'s own conversion also builds a URI from the path, host and
/// query and panics when it cannot (an empty host, a bad port, a quote in the query), and it
/// panics on a body flagged base64 that is not; any of those is a 400 here.
fn read(event: &str) -> Result<Incoming, (Format, Rejection)> {
    let unreadable = |format, detail| (format, Rejection::new(Problem::UnreadableBody, detail));
    let not_an_event = |format| (format, not_an_api_gateway_event());
    // A 2.0 event that cannot be read is still answered in 2.0's format when its version can
    // be found: the whole event failed, so look for the version on its own.
    let event: Event<'_> = serde_json::from_str(event).map_err(|_| {
        #[derive(Deserialize)]
        struct Probe<'a> {
            #[serde(borrow)]
            version: Option<Cow<'a, str>>,
        }
        let probe = serde_json::from_str::<Probe<'_>>(event).ok();
        not_an_event(format_of(probe.and_then(|p| p.version).as_deref()))
    })?;
    if let Some(records) = event.records {
        return Ok(Incoming::Spilled(records));
    }
    let format = format_of(event.version.as_deref());
    let (context_method, request_id) = match event.request_context {
        Some(c) => (c.http.map(|h| h.method), c.request_id),
        None => (None, None),
    };
    let method = match format {
        Format::V2 => context_method,
        Format::V1 => event.http_method,
    }
    .and_then(|m| Method::from_bytes(m.as_bytes()).ok())
    .ok_or_else(|| not_an_event(format))?;
    let headers = match format {
        Format::V2 => event.headers.0,
        Format::V1 => {
            // Single-value headers replace their multi-value twins, as API Gateway fills both.
            let mut headers = event.multi_value_headers.0;
            headers.extend(event.headers.0);
            headers
        }
    };
    let body = match event.body {
        None => Body::Empty,
        Some(text) if event.is_base64_encoded == Some(true) => {
            Body::Binary(STANDARD.decode(text.as_bytes()).map_err(|_| {
                unreadable(format, "the body is flagged base64 but is not valid base64")
            })?)
        }
        Some(text) => Body::Text(text.into_owned()),
    };
    let mut request = Request::new(body);
    *request.method_mut() = method;
    *request.headers_mut() = headers;
    if let Some(id) = request_id {
        request
            .extensions_mut()
            .insert(ApiRequestId(id.into_owned()));
    }
    Ok(Incoming::Http(format, request))
}

/// The refusal of an event that is not an API Gateway request.
fn not_an_api_gateway_event() -> Rejection {
    Rejection::new(
        Problem::UnreadableBody,
        "the event is not an API Gateway event",
    )
}

fn format_of(version: Option<&str>) -> Format {
    if version == Some("2.0") {
        Format::V2
    } else {
        Format::V1
    }
}

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
    /// response payload; an SQS event (the provider's spill queue) is drained and answered
    /// with the messages to receive again.
    pub async fn handle_invocation(&self, event: &str) -> Answer {
        let started = Instant::now();
        match read(event) {
            Ok(Incoming::Spilled(records)) => Answer::Batch(self.drain(&records).await),
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
            Ok(Incoming::Spilled(_)) => Payload {
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

/// The answer to one invocation.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Answer {
    /// An API Gateway response payload.
    Http(Payload),
    /// A partial batch response to an SQS event.
    Batch(crate::spill::BatchResponse),
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
    receiver.warm_up().await;
    let served = std::sync::atomic::AtomicU64::new(0);
    let (receiver, counter) = (&receiver, &served);
    let ended = lambda_runtime::run(service_fn(
        move |event: LambdaEvent<Box<RawValue>>| async move {
            crate::log::begin(&event.context);
            if counter.load(std::sync::atomic::Ordering::Relaxed) == 0 {
                // The first invocation's time left is the function's timeout, which Lambda
                // puts in no variable.
                let now_ms = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
                receiver.check_statement_bound(std::time::Duration::from_millis(
                    event.context.deadline.saturating_sub(now_ms),
                ));
            }
            let payload = receiver.handle_invocation(event.payload.get()).await;
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok::<_, lambda_runtime::Error>(payload)
        },
    ))
    .await;
    let served = served.into_inner();
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

/// The whole of a provider function's `main`, given its crate's manifest
/// (`include_str!("../Cargo.toml")`): read the signing secrets from the variable its registry
/// entry names (`secret_var`, or the Secrets Manager secret `<secret_var>_ARN` names:
/// [`crate::secrets`]), build the provider from them with `build` (its `name()` must be the
/// entry's `provider`) and the receiver from the environment, connect, and serve. A
/// configuration error is logged as one line (naming the variable, never its value) and ends
/// the process before it takes any request.
pub async fn run_from_env<P: Provider>(
    manifest: &'static str,
    build: fn(&str) -> Result<P, ConfigError>,
) -> Result<(), lambda_http::Error> {
    let log = Log::process();
    let built = async {
        let entry = crate::registry::Entry::from_manifest(manifest)?;
        let secrets = crate::secrets::WebhookSecrets::from_env(entry.secret_var).await?;
        let interval = crate::secrets::refresh_interval()?;
        let provider = build(&secrets.read().await?)?;
        if provider.name() != entry.provider {
            return Err(ConfigError::new(format!(
                "the provider is named {:?}, its registry entry {:?}: they are one name (the \
                 ledger namespace, the route, the role)",
                provider.name(),
                entry.provider
            )));
        }
        let spill = crate::spill::Spill::from_env()?;
        let limits = Limits::from_env()?;
        let settings = crate::db::Settings::from_env().await?;
        Ok::<_, ConfigError>(
            Receiver::new(provider, Database::new(settings), limits, log.clone())
                .with_secret_refresh(secrets, build, interval)
                .with_spill(spill),
        )
    }
    .await;
    serve(log.config(built)?).await
}
