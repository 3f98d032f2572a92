//! Reading the raw event: an API Gateway request (HTTP API 2.0 or REST 1.0) or an SQS batch,
//! in one pass that borrows from the event text and keeps only the method, the headers and
//! the body of a request. A request that cannot be read is a 400, never a panic.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use lambda_http::{Body, Request};
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};

use crate::receiver::ApiRequestId;
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
pub(super) enum Incoming {
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
pub(super) enum Format {
    /// HTTP API, payload format 2.0.
    V2,
    /// REST API (or HTTP API payload format 1.0).
    V1,
}

/// Turns the raw event into the request the receiver reads: its method, headers and body,
/// nothing else. `lambda_http`'s own conversion also builds a URI from the path, host and
/// query and panics when it cannot (an empty host, a bad port, a quote in the query), and it
/// panics on a body flagged base64 that is not; any of those is a 400 here.
pub(super) fn read(event: &str) -> Result<Incoming, (Format, Rejection)> {
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
pub(super) fn not_an_api_gateway_event() -> Rejection {
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
