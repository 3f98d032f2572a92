//! Re-signs API Gateway sample events (`events/`) with the local development secrets, because
//! a signature older than the tolerance (300 s) is refused.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use claimonce::verify::{hub_signature, standard_webhooks, timestamp_v1};
use serde_json::{Map, Value};

use crate::functions::{self, Function, Scheme};

/// The route of an HTTP API (`rawPath`) or REST API (`path`) event.
pub fn event_path(event: &Value) -> Option<&str> {
    event
        .get("rawPath")
        .or_else(|| event.get("path"))
        .and_then(Value::as_str)
}

/// The body bytes the function will verify (decoded when `isBase64Encoded`).
pub fn event_body(event: &Value) -> Result<Vec<u8>, String> {
    let body = event.get("body").and_then(Value::as_str).unwrap_or("");
    if event.get("isBase64Encoded").and_then(Value::as_bool) == Some(true) {
        STANDARD
            .decode(body)
            .map_err(|_| "the event's body is not valid base64".to_owned())
    } else {
        Ok(body.as_bytes().to_vec())
    }
}

fn header<'a>(event: &'a Value, name: &str) -> Option<&'a str> {
    event
        .get("headers")?
        .as_object()?
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .and_then(|(_, v)| v.as_str())
}

/// Sets a header, keeping the spelling already used in the file, in `headers` and (REST
/// events) `multiValueHeaders`.
fn set_header(event: &mut Value, name: &str, value: &str) {
    for (field, wrap) in [("headers", false), ("multiValueHeaders", true)] {
        let Some(map) = event.get_mut(field).and_then(Value::as_object_mut) else {
            if field == "headers" {
                let mut map = Map::new();
                map.insert(name.to_owned(), Value::String(value.to_owned()));
                if let Some(obj) = event.as_object_mut() {
                    obj.insert("headers".into(), Value::Object(map));
                }
            }
            continue;
        };
        let key = map
            .keys()
            .find(|k| k.eq_ignore_ascii_case(name))
            .cloned()
            .unwrap_or_else(|| name.to_owned());
        let value = Value::String(value.to_owned());
        map.insert(
            key,
            if wrap {
                Value::Array(vec![value])
            } else {
                value
            },
        );
    }
}

/// Signs `event` for its route's function with that function's local secret, at `now`.
/// Returns the function it was signed for.
pub fn resign(event: &mut Value, now: u64) -> Result<&'static Function, String> {
    let path = event_path(event).ok_or("the event has no rawPath or path")?;
    let function = functions::by_path(path)?.ok_or_else(|| format!("no function serves {path}"))?;
    let body = event_body(event)?;
    match function.scheme {
        Scheme::TimestampV1(name) => {
            let signature = timestamp_v1::sign(function.dev_secret, now, &body);
            set_header(event, name, &format!("t={now},v1={signature}"));
        }
        Scheme::HubSignature256(name) => {
            set_header(
                event,
                name,
                &hub_signature::sign(function.dev_secret, &body),
            );
        }
        Scheme::StandardWebhooks => {
            let (prefix, id) = match (header(event, "webhook-id"), header(event, "svix-id")) {
                (Some(id), _) => ("webhook", id.to_owned()),
                (None, Some(id)) => ("svix", id.to_owned()),
                (None, None) => ("svix", format!("msg_local_{now}")),
            };
            let signature = standard_webhooks::sign(function.dev_secret, &id, now, &body)
                .map_err(|e| e.to_string())?;
            set_header(event, &format!("{prefix}-id"), &id);
            set_header(event, &format!("{prefix}-timestamp"), &now.to_string());
            set_header(event, &format!("{prefix}-signature"), &signature);
        }
    }
    Ok(function)
}
