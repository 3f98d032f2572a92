//! API Gateway events as API Gateway sends them, handed to a receiver the way the function
//! binaries hand them over (the event's text through the project's own event reader,
//! `lambda::handle_event`), and helpers to read the responses.

use std::borrow::Borrow;
use std::ops::Deref;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use claimonce::Receiver;
use claimonce::lambda::Payload;
use claimonce::prelude::Provider;
use lambda_http::{Body, Response};
use serde_json::{Map, Value, json};

/// The body as the event carries it: text, or base64 with `isBase64Encoded`.
fn event_body(body: &[u8], base64: bool) -> (Value, bool) {
    if base64 {
        (Value::String(STANDARD.encode(body)), true)
    } else {
        (
            Value::String(String::from_utf8(body.to_vec()).expect("text body")),
            false,
        )
    }
}

fn header_map(headers: &[(&str, &str)]) -> Map<String, Value> {
    headers
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Value::String((*v).to_owned())))
        .collect()
}

/// An HTTP API (payload format 2.0) event.
pub fn v2_event(
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    base64: bool,
) -> Value {
    let (body, encoded) = event_body(body, base64);
    json!({
        "version": "2.0",
        "routeKey": format!("{method} {path}"),
        "rawPath": path,
        "rawQueryString": "",
        "headers": header_map(headers),
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "abc123",
            "domainName": "abc123.execute-api.us-east-1.amazonaws.com",
            "domainPrefix": "abc123",
            "http": {
                "method": method,
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": "203.0.113.10",
                "userAgent": "Stripe/1.0 (+https://stripe.com/docs/webhooks)"
            },
            "requestId": "req-1",
            "routeKey": format!("{method} {path}"),
            "stage": "$default",
            "time": "29/Nov/2026:19:00:00 +0000",
            "timeEpoch": 1_795_978_800_000_u64
        },
        "body": body,
        "isBase64Encoded": encoded
    })
}

/// A REST API (payload format 1.0) event.
pub fn v1_event(
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    base64: bool,
) -> Value {
    let (body, encoded) = event_body(body, base64);
    let multi: Map<String, Value> = headers
        .iter()
        .map(|(k, v)| ((*k).to_owned(), json!([v])))
        .collect();
    json!({
        "resource": path,
        "path": path,
        "httpMethod": method,
        "headers": header_map(headers),
        "multiValueHeaders": multi,
        "queryStringParameters": null,
        "multiValueQueryStringParameters": null,
        "pathParameters": null,
        "stageVariables": null,
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "abc123",
            "resourceId": "res1",
            "resourcePath": path,
            "httpMethod": method,
            "path": format!("/prod{path}"),
            "protocol": "HTTP/1.1",
            "requestId": "req-1",
            "stage": "prod",
            "identity": { "sourceIp": "203.0.113.10", "userAgent": "Stripe/1.0" }
        },
        "body": body,
        "isBase64Encoded": encoded
    })
}

/// What a receiver answered an event with: the API Gateway response payload the function
/// returns to the runtime, read through the response it carries.
#[derive(Debug)]
pub struct Answer(Payload);

impl Answer {
    /// The payload as the runtime sends it to API Gateway: serialised.
    pub fn payload(&self) -> Value {
        serde_json::to_value(&self.0).expect("a JSON payload")
    }
}

/// For [`outcome`], which takes an answer as readily as a bare response.
impl Borrow<Response<Body>> for Answer {
    fn borrow(&self) -> &Response<Body> {
        self.0.response()
    }
}

impl Deref for Answer {
    type Target = Response<Body>;

    fn deref(&self) -> &Response<Body> {
        self.0.response()
    }
}

/// Hands `event` to `receiver` as a function binary does: its text through the project's own
/// event reader (`lambda::handle_event`), the boundary that runs on Lambda.
pub async fn send_event<P: Provider>(receiver: &Receiver<P>, event: &Value) -> Answer {
    Answer(claimonce::lambda::handle_event(receiver, &event.to_string()).await)
}

/// A POST to `path` through an HTTP API (payload format 2.0), delivered to `receiver` as a
/// function binary does ([`send_event`]).
pub async fn post_to<P: Provider>(
    receiver: &Receiver<P>,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Answer {
    send_event(receiver, &v2_event("POST", path, headers, body, false)).await
}

/// A Stripe delivery: `body` signed now with the suite's secret and POSTed to
/// `/webhooks/stripe` ([`post_to`]).
pub async fn post_stripe<P: Provider>(receiver: &Receiver<P>, body: &[u8]) -> Answer {
    use crate::sign::{STRIPE_SECRET, now, stripe_header};
    let signature = stripe_header(STRIPE_SECRET, now(), body);
    post_to(
        receiver,
        "/webhooks/stripe",
        &[("stripe-signature", &signature)],
        body,
    )
    .await
}

/// The response body as JSON.
pub fn json_body(response: &Response<Body>) -> Value {
    serde_json::from_slice(response.body()).expect("JSON response body")
}

/// What an answer says, as the suite compares it: its status and its name, the body's
/// `disposition` or the last segment of its problem `type` (`about:blank` for the generic 500).
/// For a response in the process: an [`Answer`], or what `Receiver::handle` returns.
pub fn outcome(response: &impl Borrow<Response<Body>>) -> (u16, String) {
    let response = response.borrow();
    (response.status().as_u16(), name(&json_body(response)))
}

/// [`outcome`] of an API Gateway response payload as JSON: what a function binary returns to
/// its runtime, or an [`Answer`]'s [`payload`](Answer::payload).
pub fn payload_outcome(payload: &Value) -> (u16, String) {
    let body: Value =
        serde_json::from_str(payload["body"].as_str().unwrap_or("")).expect("JSON body");
    let status = payload["statusCode"]
        .as_u64()
        .and_then(|s| u16::try_from(s).ok())
        .unwrap_or(0);
    (status, name(&body))
}

/// A response body's name: its `disposition`, or the last segment of its problem `type`.
fn name(body: &Value) -> String {
    body["disposition"]
        .as_str()
        .or(body["type"].as_str())
        .unwrap_or("")
        .rsplit('/')
        .next()
        .unwrap_or("")
        .to_owned()
}

/// The response's content type.
pub fn content_type(response: &Response<Body>) -> &str {
    response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// Asserts that `response` is the generic 500 problem and that its body carries none of
/// `internals`: the values of what failed (the SQLSTATE code, the constraint, the table, the
/// event's data), not just words that describe them.
pub fn assert_generic_500(response: &Response<Body>, internals: &[&str]) {
    assert_eq!(response.status().as_u16(), 500);
    assert_eq!(content_type(response), "application/problem+json");
    let text = String::from_utf8_lossy(response.body());
    for leak in ["sqlstate", "SELECT", "INSERT", "ERROR"]
        .iter()
        .chain(internals)
    {
        assert!(!text.contains(leak), "500 body leaks {leak}: {text}");
    }
}
