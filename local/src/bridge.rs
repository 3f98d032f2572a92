//! EventBridge events on a machine without AWS: what a partner event source's event looks like
//! once a rule has put it on a function's event queue, and the variables that tell a function
//! to take it (`claimonce::bridge`). The local run's `send` of an EventBridge sample and the
//! tests use the same.

use serde_json::{Value, json};

use crate::functions::Function;

/// The account the local event queue is in, as its ARN says.
pub const ACCOUNT: &str = "000000000000";

/// The local event queue of `provider`.
pub fn queue_arn(provider: &str) -> String {
    format!("arn:aws:sqs:us-east-1:{ACCOUNT}:claimonce-local-{provider}-events")
}

/// The local event queue's dead-letter queue.
pub fn dead_letter_arn(provider: &str) -> String {
    format!("{}-dead", queue_arn(provider))
}

/// The variables that make `provider`'s function take the events of partner source `source`
/// from its local event queue and that queue's dead-letter queue.
pub fn function_env(provider: &str, source: &str) -> Vec<(String, String)> {
    vec![
        (
            claimonce::bridge::Bridge::source_var(provider),
            source.to_owned(),
        ),
        (
            claimonce::bridge::QUEUE_ARN_VAR.to_owned(),
            queue_arn(provider),
        ),
        (
            claimonce::bridge::DEAD_LETTER_ARN_VAR.to_owned(),
            dead_letter_arn(provider),
        ),
    ]
}

/// The SQS event Lambda's event source mapping hands the function for `events` (message id,
/// EventBridge event) received from the queue `arn`, each on its `receive`th receive.
pub fn sqs_event(arn: &str, events: &[(&str, &Value)], receive: u32) -> Value {
    let records: Vec<Value> = events
        .iter()
        .map(|(id, event)| {
            json!({
                "messageId": id,
                "body": event.to_string(),
                "attributes": {"ApproximateReceiveCount": receive.to_string()},
                "messageAttributes": {},
                "eventSource": "aws:sqs",
                "eventSourceARN": arn,
            })
        })
        .collect();
    json!({ "Records": records })
}

/// True when `event` is an EventBridge event (it has a `detail-type` and a `detail`), as the
/// samples under `events/<provider>/` that are not API Gateway events are.
pub fn is_eventbridge(event: &Value) -> bool {
    event.get("detail-type").is_some() && event.get("detail").is_some()
}

/// The partner event source the local run gives `function`: the one its EventBridge samples
/// name (the first's); `None` for a function that has none.
pub fn local_source(function: &Function) -> Option<String> {
    let first = function.eventbridge_samples().into_iter().next()?;
    let event: Value = serde_json::from_str(&std::fs::read_to_string(first).ok()?).ok()?;
    event.get("source")?.as_str().map(str::to_owned)
}

/// The local route a function takes EventBridge events on: the gateway hands each event to it
/// as a record of its event queue.
pub fn route(provider: &str) -> String {
    format!("/eventbridge/{provider}")
}

/// What `claimonce-local send` posts for an EventBridge event: the event as the body, to the
/// route of the provider whose local source the event names.
pub fn request(registry: &[Function], event: &Value) -> Result<Value, String> {
    let source = event.get("source").and_then(Value::as_str).unwrap_or("");
    let function = registry
        .iter()
        .find(|f| local_source(f).as_deref() == Some(source))
        .ok_or_else(|| format!("no function takes the EventBridge source {source:?} locally"))?;
    Ok(json!({
        "rawPath": route(function.provider),
        "headers": {"content-type": "application/json"},
        "body": event.to_string(),
    }))
}
