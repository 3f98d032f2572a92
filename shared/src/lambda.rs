//! The Lambda boundary: an API Gateway event (HTTP API payload 2.0 or REST API 1.0) in, the
//! matching API Gateway response payload out.
//!
//! The event is read here rather than by `lambda_http`'s own adapter because that adapter
//! panics on a body flagged `isBase64Encoded` that is not base64; a request that cannot be
//! read must be a 400 like any other bad request, not a crashed execution environment.

use std::borrow::Cow;
use std::time::Instant;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use lambda_http::request::RequestContext;
use lambda_http::{Body, Request, RequestExt, Response};
use lambda_runtime::{LambdaEvent, service_fn};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::receiver::{Provider, Receiver};
use crate::response::{Problem, Rejection};

/// The few fields read before the event is turned into a request.
#[derive(Deserialize)]
struct Probe<'a> {
    version: Option<Cow<'a, str>>,
    #[serde(rename = "isBase64Encoded", default)]
    is_base64_encoded: bool,
    #[serde(borrow)]
    body: Option<Cow<'a, str>>,
}

/// Which payload format the event came in, and so which response format it expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    /// HTTP API, payload format 2.0.
    V2,
    /// REST API (or HTTP API payload format 1.0).
    V1,
}

/// True when the event's top-level `isBase64Encoded` is `true`. Inside a JSON string (the
/// body, a header) a quote is escaped, so the key with its unescaped quotes can only be the
/// event's own field: a plain search is exact, and it spares most events a second parse.
fn flagged_base64(event: &str) -> bool {
    event.match_indices("\"isBase64Encoded\"").any(|(at, key)| {
        event
            .get(at + key.len()..)
            .map(|rest| rest.trim_start().trim_start_matches(':').trim_start())
            .is_some_and(|value| value.starts_with("true"))
    })
}

fn read(event: &str) -> Result<(Format, Request), (Format, Rejection)> {
    let unreadable = |format, detail| (format, Rejection::new(Problem::UnreadableBody, detail));
    if flagged_base64(event) {
        // lambda_http panics on a body flagged base64 that is not: check it first.
        let probe: Probe<'_> = serde_json::from_str(event)
            .map_err(|_| unreadable(Format::V1, "the event is not an API Gateway event"))?;
        let format = if probe.version.as_deref() == Some("2.0") {
            Format::V2
        } else {
            Format::V1
        };
        if probe.is_base64_encoded
            && let Some(body) = &probe.body
            && STANDARD.decode(body.as_bytes()).is_err()
        {
            return Err(unreadable(
                format,
                "the body is flagged base64 but is not valid base64",
            ));
        }
    }
    let request = lambda_http::request::from_str(event)
        .map_err(|_| unreadable(Format::V1, "the event is not an API Gateway event"))?;
    let format = match request.request_context_ref() {
        Some(RequestContext::ApiGatewayV2(_)) => Format::V2,
        _ => Format::V1,
    };
    Ok((format, request))
}

/// The API Gateway response payload for `response` in the event's format.
fn payload(format: Format, response: Response<Body>) -> Value {
    let (parts, body) = response.into_parts();
    let (body, base64) = match body {
        Body::Empty => (String::new(), false),
        Body::Text(text) => (text, false),
        Body::Binary(bytes) => (STANDARD.encode(bytes), true),
        _ => (String::new(), false),
    };
    let mut headers = Map::new();
    let mut multi = Map::new();
    for (name, value) in &parts.headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        headers.insert(name.as_str().to_owned(), Value::String(value.clone()));
        multi.insert(
            name.as_str().to_owned(),
            Value::Array(vec![Value::String(value)]),
        );
    }
    let mut payload = Map::new();
    payload.insert("statusCode".into(), parts.status.as_u16().into());
    payload.insert("headers".into(), Value::Object(headers));
    if format == Format::V1 {
        payload.insert("multiValueHeaders".into(), Value::Object(multi));
    }
    payload.insert("body".into(), Value::String(body));
    payload.insert("isBase64Encoded".into(), base64.into());
    Value::Object(payload)
}

impl<P: Provider> Receiver<P> {
    /// Handles one raw API Gateway event and returns the response payload for it.
    pub async fn handle_event(&self, event: &str) -> Value {
        let started = Instant::now();
        match read(event) {
            Ok((format, request)) => payload(format, self.handle(request).await),
            Err((format, rejection)) => payload(format, self.refuse(started, rejection)),
        }
    }
}

/// Runs a receiver as a Lambda function: connect at cold start, then answer every
/// invocation, one at a time, with the same connection.
pub async fn serve<P: Provider>(receiver: Receiver<P>) -> Result<(), lambda_runtime::Error> {
    receiver.warm_up().await;
    let receiver = &receiver;
    lambda_runtime::run(service_fn(
        move |event: LambdaEvent<Box<RawValue>>| async move {
            Ok::<_, lambda_runtime::Error>(receiver.handle_event(event.payload.get()).await)
        },
    ))
    .await
}

#[cfg(test)]
mod tests {
    use super::flagged_base64;

    #[test]
    fn only_the_events_own_flag_counts() {
        assert!(flagged_base64(r#"{"body":"eA==","isBase64Encoded":true}"#));
        assert!(flagged_base64(r#"{"isBase64Encoded" :  true, "body":"eA=="}"#));
        assert!(!flagged_base64(r#"{"body":"x","isBase64Encoded":false}"#));
        // The same text inside the body (a JSON string) has escaped quotes.
        assert!(!flagged_base64(
            r#"{"body":"{\"isBase64Encoded\":true}","isBase64Encoded":false}"#
        ));
        assert!(!flagged_base64("{}"));
    }
}
