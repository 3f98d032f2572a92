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
use lambda_http::aws_lambda_events::apigw::{ApiGatewayProxyRequest, ApiGatewayV2httpRequest};
use lambda_http::{Body, Request, Response};
use lambda_runtime::{LambdaEvent, service_fn};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::receiver::{Provider, Receiver};
use crate::response::{Problem, Rejection};

/// The one field read before the event is parsed in its own shape.
#[derive(Deserialize)]
struct Probe<'a> {
    #[serde(borrow)]
    version: Option<Cow<'a, str>>,
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
fn read(event: &str) -> Result<(Format, Request), (Format, Rejection)> {
    let unreadable = |format, detail| (format, Rejection::new(Problem::UnreadableBody, detail));
    let not_an_event =
        |format| move |_| unreadable(format, "the event is not an API Gateway event");
    let probe: Probe<'_> = serde_json::from_str(event).map_err(not_an_event(Format::V1))?;
    let format = if probe.version.as_deref() == Some("2.0") {
        Format::V2
    } else {
        Format::V1
    };
    let (method, headers, body, base64) = match format {
        Format::V2 => {
            let ag: ApiGatewayV2httpRequest =
                serde_json::from_str(event).map_err(not_an_event(format))?;
            (
                ag.request_context.http.method,
                ag.headers,
                ag.body,
                ag.is_base64_encoded,
            )
        }
        Format::V1 => {
            let ag: ApiGatewayProxyRequest =
                serde_json::from_str(event).map_err(not_an_event(format))?;
            // Single-value headers replace their multi-value twins, as API Gateway fills both.
            let mut headers = ag.multi_value_headers;
            headers.extend(ag.headers);
            (ag.http_method, headers, ag.body, ag.is_base64_encoded)
        }
    };
    let body = match body {
        None => Body::Empty,
        Some(text) if base64 => Body::Binary(STANDARD.decode(text.as_bytes()).map_err(|_| {
            unreadable(format, "the body is flagged base64 but is not valid base64")
        })?),
        Some(text) => Body::Text(text),
    };
    let mut request = Request::new(body);
    *request.method_mut() = method;
    *request.headers_mut() = headers;
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
