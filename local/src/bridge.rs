//! EventBridge events on a machine without AWS: what a partner event source's event looks like
//! once a rule has put it on a function's event queue, and the variables that tell a function
//! to take it (`claimonce::bridge`). The local run's `send` of an EventBridge sample and the
//! tests use the same.

use serde_json::{Value, json};

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
