//! Reading the raw event: an API Gateway request (HTTP API 2.0 or REST 1.0) or an SQS batch,
//! keeping only the method, the headers and the body of a request.
//!
//! The function's payload type is [`Invocation`]: the runtime reads it straight from the
//! Runtime API's bytes, with no copy of it as raw JSON first, so the body, most of the event,
//! is scanned once ([`apart`] says what is looked at twice, and why). That reading never fails on JSON: a field of the wrong type, a
//! header HTTP cannot carry or one header too many make the event unreadable, which is a 400
//! like any other bad request, never a runtime error and never a panic.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use lambda_http::{Body, Request};
use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use crate::response::{Problem, Rejection};

/// API Gateway's id for the request (`requestContext.requestId`): the delivery's log line
/// carries it, as API Gateway's access log does.
#[derive(Debug, Clone)]
pub(super) struct ApiRequestId(pub(super) String);

/// The most header lines an event may carry (a name with several values counts once per
/// value); an event with more is a 400. `http`'s `HeaderMap` panics past about 24,000 names,
/// and no sender of webhooks comes near a thousand.
pub const MAX_HEADERS: usize = 1000;

/// What an invocation was: a request through API Gateway, or a batch from the spill queue.
// Made once per invocation and matched at once: boxing the request would add an allocation
// to every delivery.
#[allow(clippy::large_enum_variant)]
pub(super) enum Incoming {
    Http(Format, Request),
    /// An SQS batch: the spill queue's records, or the event queue's (EventBridge).
    Queued(Vec<crate::sqs::Record>),
    /// An SQS batch whose records cannot all be read: the message ids that can be.
    UnreadableBatch(Vec<String>),
}

/// One invocation as read: what it was, or why it is refused and in which format.
pub(super) struct Invocation(pub(super) Result<Incoming, (Format, Rejection)>);

/// Which payload format the event came in, and so which response format it expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Format {
    /// HTTP API, payload format 2.0.
    V2,
    /// REST API (or HTTP API payload format 1.0).
    V1,
}

/// Reads an event given as text, as the runtime reads it from its bytes.
pub(super) fn read(event: &str) -> Result<Incoming, (Format, Rejection)> {
    serde_json::from_str::<Invocation>(event)
        .map_or_else(|_| Err((Format::V1, not_an_api_gateway_event())), |i| i.0)
}

/// The refusal of an event that is not an API Gateway request.
pub(super) fn not_an_api_gateway_event() -> Rejection {
    Rejection::new(
        Problem::UnreadableBody,
        "the event is not an API Gateway event",
    )
}

impl<'de> Deserialize<'de> for Invocation {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Invocation(
            match Got::<Event<'de>>::deserialize(deserializer)? {
                Got::Is(event) => event.into_incoming(),
                Got::Null | Got::Wrong => Err((Format::V1, not_an_api_gateway_event())),
            },
        ))
    }
}

/// The parts of an API Gateway event the receiver reads, in either payload format, as found.
#[derive(Default)]
struct Event<'a> {
    /// "2.0" for an HTTP API payload 2.0; absent (or "1.0") for a REST API event.
    version: Option<Cow<'a, str>>,
    /// The method of a 1.0 event.
    http_method: Option<Cow<'a, str>>,
    /// The method of a 2.0 event is `requestContext.http.method`.
    request_context: Option<Context<'a>>,
    /// One value per header (2.0, and 1.0's single-value twin).
    headers: Option<Headers<One>>,
    /// Every value per header (1.0 only).
    multi_value_headers: Option<Headers<Many>>,
    body: Option<Cow<'a, str>>,
    is_base64_encoded: Option<bool>,
    /// An SQS event's records: the provider's spill queue or event queue, drained
    /// ([`crate::spill`]), as text borrowed from the event, read once the event is. An API
    /// Gateway event has none.
    records: Option<&'a RawValue>,
    /// A field read here held the wrong type, came twice, or could not be carried by HTTP.
    malformed: bool,
}

impl<'a> Event<'a> {
    /// The request or batch the event carries, or its refusal in the format it came in.
    fn into_incoming(self) -> Result<Incoming, (Format, Rejection)> {
        let format = if self.version.as_deref() == Some("2.0") {
            Format::V2
        } else {
            Format::V1
        };
        let not_an_event = || (format, not_an_api_gateway_event());
        if self.malformed {
            return Err(not_an_event());
        }
        if let Some(records) = self.records.filter(|r| r.get() != "null") {
            return Ok(serde_json::from_str(records.get()).map_or_else(
                |_| Incoming::UnreadableBatch(message_ids(records)),
                Incoming::Queued,
            ));
        }
        let (context_method, request_id) = match self.request_context {
            Some(c) => (c.method, c.request_id),
            None => (None, None),
        };
        let method = match format {
            Format::V2 => context_method,
            Format::V1 => self.http_method,
        }
        .and_then(|m| Method::from_bytes(m.as_bytes()).ok())
        .ok_or_else(not_an_event)?;
        let single = self.headers.map(|h| h.0).unwrap_or_default();
        let headers = match (format, self.multi_value_headers) {
            // Single-value headers replace their multi-value twins, as API Gateway fills both.
            (Format::V1, Some(Headers(mut multi, _))) => {
                multi.extend(single);
                multi
            }
            _ => single,
        };
        let body = match self.body {
            None => Body::Empty,
            Some(text) if self.is_base64_encoded == Some(true) => {
                Body::Binary(STANDARD.decode(text.as_bytes()).map_err(|_| {
                    (
                        format,
                        Rejection::new(
                            Problem::UnreadableBody,
                            "the body is flagged base64 but is not valid base64",
                        ),
                    )
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
}

/// A value of the event: `T` when it has `T`'s shape, `Null`, or `Wrong` for anything else,
/// which is read to its end and dropped, so reading goes on past it.
enum Got<T> {
    Is(T),
    Null,
    Wrong,
}

impl<T> From<Option<T>> for Got<T> {
    fn from(value: Option<T>) -> Self {
        value.map_or(Got::Wrong, Got::Is)
    }
}

/// The JSON shapes a value read into `Self` may take. Each method reads one shape; one a type
/// does not take leaves its value `Wrong`.
trait Shape<'de>: Sized {
    fn from_str(_: Cow<'de, str>) -> Option<Self> {
        None
    }
    fn from_bool(_: bool) -> Option<Self> {
        None
    }
    fn from_map<A: MapAccess<'de>>(mut map: A) -> Result<Option<Self>, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(None)
    }
    fn from_seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Option<Self>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }
}

impl<'de, T: Shape<'de>> Deserialize<'de> for Got<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Read<T>(PhantomData<T>);
        impl<'de, T: Shape<'de>> Visitor<'de> for Read<T> {
            type Value = Got<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Got<T>, E> {
                Ok(Got::Null)
            }
            fn visit_none<E: de::Error>(self) -> Result<Got<T>, E> {
                Ok(Got::Null)
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Got<T>, E> {
                Ok(T::from_bool(v).into())
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Got<T>, E> {
                Ok(Got::Wrong)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Got<T>, E> {
                Ok(Got::Wrong)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Got<T>, E> {
                Ok(Got::Wrong)
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Got<T>, E> {
                Ok(T::from_str(Cow::Borrowed(v)).into())
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Got<T>, E> {
                Ok(T::from_str(Cow::Owned(v.to_owned())).into())
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Got<T>, E> {
                Ok(T::from_str(Cow::Owned(v)).into())
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Got<T>, A::Error> {
                T::from_map(map).map(Got::from)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Got<T>, A::Error> {
                T::from_seq(seq).map(Got::from)
            }
        }
        deserializer.deserialize_any(Read(PhantomData))
    }
}

impl<'de> Shape<'de> for Cow<'de, str> {
    fn from_str(v: Cow<'de, str>) -> Option<Self> {
        Some(v)
    }
}

impl Shape<'_> for bool {
    fn from_bool(v: bool) -> Option<Self> {
        Some(v)
    }
}

/// Puts a field's value in its slot: a value of the wrong type, or a field seen twice, marks
/// the object malformed.
fn put<T>(slot: &mut Option<T>, got: Got<T>, malformed: &mut bool) {
    match got {
        Got::Is(_) | Got::Wrong if slot.is_some() => *malformed = true,
        Got::Is(value) => *slot = Some(value),
        Got::Null => {}
        Got::Wrong => *malformed = true,
    }
}

/// Reads the next key of an object, borrowed from the event where it has no escapes.
fn next_key<'de, A: MapAccess<'de>>(map: &mut A) -> Result<Option<Cow<'de, str>>, A::Error> {
    Ok(match map.next_key::<Got<Cow<'de, str>>>()? {
        Some(Got::Is(key)) => Some(key),
        // JSON's keys are strings; another deserializer's may not be, and none of ours is one.
        Some(Got::Null | Got::Wrong) => Some(Cow::Borrowed("")),
        None => None,
    })
}

impl<'de> Shape<'de> for Event<'de> {
    fn from_map<A: MapAccess<'de>>(mut map: A) -> Result<Option<Self>, A::Error> {
        let mut e = Event::default();
        let m = &mut e.malformed;
        while let Some(key) = next_key(&mut map)? {
            match key.as_ref() {
                "version" => put(&mut e.version, map.next_value()?, m),
                "httpMethod" => put(&mut e.http_method, map.next_value()?, m),
                "requestContext" => put(&mut e.request_context, apart(&mut map)?, m),
                "headers" => put(&mut e.headers, apart(&mut map)?, m),
                "multiValueHeaders" => put(&mut e.multi_value_headers, apart(&mut map)?, m),
                "body" => put(&mut e.body, map.next_value()?, m),
                "isBase64Encoded" => put(&mut e.is_base64_encoded, map.next_value()?, m),
                "Records" => put(&mut e.records, Got::Is(map.next_value()?), m),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Some(e))
    }
}

/// The message ids of an SQS batch that cannot be read as a whole: each record's `messageId`
/// that is a string, in order; none when the records are not even a list.
fn message_ids(records: &RawValue) -> Vec<String> {
    #[derive(Deserialize)]
    struct Named {
        #[serde(rename = "messageId")]
        message_id: String,
    }
    serde_json::from_str::<Vec<&RawValue>>(records.get())
        .unwrap_or_default()
        .iter()
        .filter_map(|record| serde_json::from_str::<Named>(record.get()).ok())
        .map(|named| named.message_id)
        .collect()
}

/// Reads the next value, an object of many small members, on its own: its text found in the
/// pass the runtime makes, then read by a reader of its own. The runtime's reader records the
/// path to every member as it goes, a copy of each key, which costs more than a second look at
/// a few hundred bytes; the body, the bulk of the event, is read once.
fn apart<'de, T: Shape<'de>, A: MapAccess<'de>>(map: &mut A) -> Result<Got<T>, A::Error> {
    let text = map.next_value::<&'de RawValue>()?.get();
    Ok(serde_json::from_str(text).unwrap_or(Got::Wrong))
}

/// The parts of `requestContext` the receiver reads.
#[derive(Default)]
struct Context<'a> {
    /// `http.method`: the method of a 2.0 event.
    method: Option<Cow<'a, str>>,
    /// API Gateway's id of the request (both formats), as in its access log, carried in the
    /// request's extensions to the delivery's log line.
    request_id: Option<Cow<'a, str>>,
}

/// `requestContext.http` of a 2.0 event.
struct HttpContext<'a>(Option<Cow<'a, str>>);

impl<'de> Shape<'de> for Context<'de> {
    fn from_map<A: MapAccess<'de>>(mut map: A) -> Result<Option<Self>, A::Error> {
        let (mut context, mut http, mut malformed) = (Context::default(), None, false);
        while let Some(key) = next_key(&mut map)? {
            match key.as_ref() {
                "http" => put(&mut http, map.next_value()?, &mut malformed),
                "requestId" => put(&mut context.request_id, map.next_value()?, &mut malformed),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        context.method = http.and_then(|HttpContext(method)| method);
        Ok((!malformed).then_some(context))
    }
}

impl<'de> Shape<'de> for HttpContext<'de> {
    fn from_map<A: MapAccess<'de>>(mut map: A) -> Result<Option<Self>, A::Error> {
        let (mut method, mut malformed) = (None, false);
        while let Some(key) = next_key(&mut map)? {
            if key == "method" {
                put(&mut method, map.next_value()?, &mut malformed);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok((!malformed).then_some(HttpContext(method)))
    }
}

/// A header map read straight from the event's JSON object, names lower-cased by
/// `HeaderName`. `V` says whether each header holds one string (`headers`) or a list
/// (`multiValueHeaders`); `null` is no headers.
struct Headers<V>(HeaderMap, PhantomData<V>);

/// One string per header.
struct One;
/// A list of strings per header.
struct Many;

/// How one header's value is written in its map.
trait Values<'de>: Sized {
    type Written: Shape<'de>;
    /// Appends the header's values; false when a value HTTP cannot carry, or one more line
    /// than [`MAX_HEADERS`], makes the map unreadable.
    fn append(written: Self::Written, name: HeaderName, headers: &mut HeaderMap) -> bool;
}

/// Adds one header line, replacing the name's lines first when `replace`.
fn append_one(headers: &mut HeaderMap, name: HeaderName, value: &str, replace: bool) -> bool {
    match HeaderValue::from_str(value) {
        Ok(value) if headers.len() < MAX_HEADERS => {
            if replace {
                headers.insert(name, value);
            } else {
                headers.append(name, value);
            }
            true
        }
        _ => false,
    }
}

impl<'de> Values<'de> for One {
    type Written = Cow<'de, str>;
    fn append(value: Cow<'de, str>, name: HeaderName, headers: &mut HeaderMap) -> bool {
        // One value per name here: a name written twice keeps its last value.
        append_one(headers, name, &value, true)
    }
}

/// The list of a multi-value header.
struct List<'a>(Vec<Cow<'a, str>>);

impl<'de> Shape<'de> for List<'de> {
    fn from_seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Option<Self>, A::Error> {
        let (mut values, mut malformed) = (Vec::new(), false);
        while let Some(value) = seq.next_element::<Got<Cow<'de, str>>>()? {
            match value {
                Got::Is(value) => values.push(value),
                Got::Null | Got::Wrong => malformed = true,
            }
        }
        Ok((!malformed).then_some(List(values)))
    }
}

impl<'de> Values<'de> for Many {
    type Written = List<'de>;
    fn append(List(values): List<'de>, name: HeaderName, headers: &mut HeaderMap) -> bool {
        values
            .iter()
            .all(|value| append_one(headers, name.clone(), value, false))
    }
}

impl<'de, V: Values<'de>> Shape<'de> for Headers<V> {
    fn from_map<A: MapAccess<'de>>(mut map: A) -> Result<Option<Self>, A::Error> {
        let mut headers = HeaderMap::with_capacity(map.size_hint().unwrap_or(16));
        let mut readable = true;
        while let Some(name) = next_key(&mut map)? {
            let value = map.next_value::<Got<V::Written>>()?;
            if !readable {
                continue;
            }
            readable = match (HeaderName::from_bytes(name.as_bytes()), value) {
                (Ok(name), Got::Is(value)) => V::append(value, name, &mut headers),
                _ => false,
            };
        }
        Ok(readable.then_some(Headers(headers, PhantomData)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads an event as the runtime does: from its bytes, through the path-tracking
    /// deserializer `lambda_runtime` puts around the payload type.
    fn as_the_runtime_reads(event: &str) -> Result<Incoming, (Format, Rejection)> {
        let de = &mut serde_json::Deserializer::from_slice(event.as_bytes());
        match serde_path_to_error::deserialize::<_, Invocation>(de) {
            Ok(invocation) => invocation.0,
            Err(error) => panic!("the runtime would fail the invocation: {error}"),
        }
    }

    fn refused_in(event: &str) -> (Format, String) {
        match as_the_runtime_reads(event) {
            Err((format, rejection)) => (format, rejection.detail.to_owned()),
            Ok(_) => panic!("{event} was read"),
        }
    }

    #[test]
    fn a_request_and_a_batch_are_read_in_the_runtimes_pass() {
        let event = r#"{"version":"2.0","routeKey":"POST /","headers":{"stripe-signature":"t=1,v1=00","x-a":"b"},
            "requestContext":{"requestId":"req-1","http":{"method":"POST","path":"/"},"authorizer":{"x":[1,{"y":null}]}},
            "body":"{\"id\":\"evt_1\"}","isBase64Encoded":false}"#;
        let Ok(Incoming::Http(Format::V2, request)) = as_the_runtime_reads(event) else {
            panic!("not read as a 2.0 request");
        };
        assert_eq!(request.method(), Method::POST);
        assert_eq!(request.headers()["stripe-signature"], "t=1,v1=00");
        assert_eq!(request.headers().len(), 2);
        assert_eq!(request.body().as_ref(), br#"{"id":"evt_1"}"#);
        assert_eq!(
            request
                .extensions()
                .get::<ApiRequestId>()
                .map(|id| id.0.as_str()),
            Some("req-1")
        );

        let batch = r#"{"Records":[{"messageId":"m-1","body":"x","eventSourceARN":"arn:aws:sqs:eu-west-1:1:q"}]}"#;
        let Ok(Incoming::Queued(records)) = as_the_runtime_reads(batch) else {
            panic!("not read as a batch");
        };
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].message_id, "m-1");
    }

    /// An SQS batch that cannot be read as a whole is still a batch: the ids of the records
    /// that name one, so that each is reported failed; none when the records are no list.
    #[test]
    fn an_unreadable_batch_names_the_records_it_can() {
        let batch = r#"{"Records":[{"messageId":"m-1","body":5},{"body":"x"},
            {"messageId":"m-3","body":"x","eventSourceARN":"arn:aws:sqs:eu-west-1:1:q"},
            {"messageId":7}]}"#;
        let Ok(Incoming::UnreadableBatch(ids)) = as_the_runtime_reads(batch) else {
            panic!("not read as an unreadable batch");
        };
        assert_eq!(ids, ["m-1", "m-3"]);
        for records in [r#""secret""#, "{}", "[1,2]"] {
            let event = format!(r#"{{"version":"2.0","Records":{records}}}"#);
            let Ok(Incoming::UnreadableBatch(ids)) = as_the_runtime_reads(&event) else {
                panic!("{records}: not read as an unreadable batch");
            };
            assert!(ids.is_empty(), "{records}");
        }
    }

    #[test]
    fn a_rest_event_reads_both_header_maps_the_single_value_winning() {
        let event = r#"{"httpMethod":"POST","headers":{"X-One":"single"},
            "multiValueHeaders":{"x-one":["multi"],"x-two":["a","b"]},"body":null}"#;
        let Ok(Incoming::Http(Format::V1, request)) = as_the_runtime_reads(event) else {
            panic!("not read as a 1.0 request");
        };
        let values = |name| {
            request
                .headers()
                .get_all(name)
                .iter()
                .map(|v| v.to_str().unwrap_or("?"))
                .collect::<Vec<_>>()
        };
        assert_eq!(values("x-one"), ["single"]);
        assert_eq!(values("x-two"), ["a", "b"]);
    }

    #[test]
    fn no_json_value_fails_the_runtimes_read_each_wrong_one_is_refused_in_its_format() {
        let not_an_event = (
            Format::V2,
            "the event is not an API Gateway event".to_owned(),
        );
        // Each added to a readable 2.0 event.
        let fields = [
            r#""body":5"#,
            r#""body":{"a":"secret"}"#,
            r#""body":"a","body":"b""#,
            r#""headers":"secret""#,
            r#""headers":{"a":1}"#,
            r#""headers":{"a b":"c"}"#,
            r#""headers":{"a":"b\nc"}"#,
            r#""multiValueHeaders":{"a":[null]}"#,
            r#""isBase64Encoded":"yes""#,
        ];
        for field in fields {
            let event = format!(
                r#"{{"version":"2.0","requestContext":{{"http":{{"method":"POST"}}}},{field}}}"#
            );
            assert_eq!(refused_in(&event), not_an_event, "{field}");
        }
        for context in [
            r#"{"http":[]}"#,
            r#"{"http":{"method":"POST"},"requestId":7}"#,
        ] {
            let event = format!(r#"{{"version":"2.0","requestContext":{context}}}"#);
            assert_eq!(refused_in(&event), not_an_event, "{context}");
        }
        assert_eq!(refused_in(r#"{"version":"2.0","body":"x"}"#), not_an_event);
        // Not an object, or no version to read: refused in 1.0's format.
        for event in [r#""just a string""#, "[1,{}]", "null", r#"{"version":2}"#] {
            assert_eq!(refused_in(event).0, Format::V1, "{event}");
        }
        // A wrong value is read to its end: the fields after it are still read, as the
        // format shows.
        assert_eq!(
            refused_in(r#"{"body":[1,[2,{"a":[]}]],"version":"2.0"}"#).0,
            Format::V2
        );
    }

    #[test]
    fn one_header_line_past_the_limit_is_refused() {
        let headers = |n: usize| {
            (0..n)
                .map(|i| format!(r#""x-{i}":"v""#))
                .collect::<Vec<_>>()
                .join(",")
        };
        let event = |n| format!(r#"{{"httpMethod":"POST","headers":{{{}}}}}"#, headers(n));
        assert!(as_the_runtime_reads(&event(MAX_HEADERS)).is_ok());
        assert_eq!(refused_in(&event(MAX_HEADERS + 1)).0, Format::V1);
    }
}
