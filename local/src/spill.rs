//! The spill queues on a machine without AWS: a queue per provider in moto's SQS, created as
//! template.yaml makes them, and the drain that Lambda's SQS event source mapping runs in a
//! deployment: receive up to ten messages, invoke the provider's function with them as an SQS
//! event, delete those it did not report failed. The local run's `--spill` and the tests use
//! the same.

use std::collections::HashSet;
use std::time::Duration;

use aws_sdk_sqs::types::{Message, MessageSystemAttributeName, QueueAttributeName};
use serde_json::{Value, json};

use crate::runtime_api::{Outcome, RuntimeApi};

/// An SQS client for the moto server at `url` (any credentials: moto checks none).
pub async fn client(url: &str) -> aws_sdk_sqs::Client {
    aws_sdk_sqs::Client::new(&crate::moto::aws_config_at(url).await)
}

/// An SQS call's error, for a message: the operation, the service's code and message.
fn sqs_error<E: std::error::Error + 'static>(operation: &str, e: &E) -> String {
    format!(
        "SQS {operation}: {}",
        aws_sdk_sqs::error::DisplayErrorContext(e)
    )
}

/// The variables a function needs to spill to `queue` on the moto server at `url`.
pub fn function_env(queue: &str, url: &str) -> Vec<(&'static str, String)> {
    let mut env = vec![("SPILL_QUEUE_URL", queue.to_owned())];
    env.extend(aws_env(url));
    env
}

/// The variables a function needs to reach SQS on the moto server at `url`.
pub fn aws_env(url: &str) -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ENDPOINT_URL_SQS", url.to_owned()),
        ("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE".to_owned()),
        (
            "AWS_SECRET_ACCESS_KEY",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".to_owned(),
        ),
        ("AWS_REGION", "us-east-1".to_owned()),
    ]
}

/// Creates the queue `name` with the attributes given (name, value) and returns its URL.
pub async fn create_queue(
    sqs: &aws_sdk_sqs::Client,
    name: &str,
    attributes: &[(QueueAttributeName, String)],
) -> Result<String, String> {
    let mut request = sqs.create_queue().queue_name(name);
    for (attribute, value) in attributes {
        request = request.attributes(attribute.clone(), value);
    }
    request
        .send()
        .await
        .map_err(|e| sqs_error(&format!("CreateQueue {name}"), &e))?
        .queue_url
        .ok_or_else(|| format!("SQS CreateQueue {name}: no URL"))
}

/// Up to ten messages of `queue`, hidden for `visibility` seconds once received (the
/// queue's own visibility timeout with `None`), waiting up to `wait` seconds for one.
pub async fn receive(
    sqs: &aws_sdk_sqs::Client,
    queue: &str,
    visibility: Option<i32>,
    wait: i32,
) -> Result<Vec<Message>, String> {
    sqs.receive_message()
        .queue_url(queue)
        .max_number_of_messages(10)
        .message_attribute_names("All")
        .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
        .set_visibility_timeout(visibility)
        .wait_time_seconds(wait)
        .send()
        .await
        .map(|r| r.messages.unwrap_or_default())
        .map_err(|e| sqs_error("ReceiveMessage", &e))
}

/// The ARN of the queue at `url` in moto's region (`us-east-1`, as [`function_env`] sets
/// it): `arn:aws:sqs:<region>:<account>:<name>`, the account and name the URL's last two
/// path segments, as SQS forms it.
pub fn queue_arn(url: &str) -> String {
    let mut segments = url.trim_end_matches('/').rsplit('/');
    let name = segments.next().unwrap_or_default();
    let account = segments.next().unwrap_or_default();
    format!("arn:aws:sqs:us-east-1:{account}:{name}")
}

/// The SQS event Lambda's event source mapping makes of `messages` received from the queue at
/// `queue` (its URL).
pub fn sqs_event(queue: &str, messages: &[Message]) -> Value {
    let arn = queue_arn(queue);
    let records: Vec<Value> = messages
        .iter()
        .map(|m| {
            let attributes: serde_json::Map<String, Value> = m
                .message_attributes()
                .map(|a| {
                    a.iter()
                        .map(|(name, value)| {
                            (
                                name.clone(),
                                json!({"stringValue": value.string_value(),
                                       "dataType": value.data_type()}),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            let count = m
                .attributes()
                .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
                .cloned()
                .unwrap_or_else(|| "1".into());
            json!({
                "messageId": m.message_id(),
                "receiptHandle": m.receipt_handle(),
                "body": m.body(),
                "attributes": {"ApproximateReceiveCount": count},
                "messageAttributes": attributes,
                "eventSource": "aws:sqs",
                "eventSourceARN": arn,
                "awsRegion": "us-east-1",
            })
        })
        .collect();
    json!({"Records": records})
}

/// One poll of the event source mapping: receives, invokes `api`'s function with what it
/// received, deletes what it did not report failed. Returns (received, failed).
pub async fn drain_once(
    sqs: &aws_sdk_sqs::Client,
    queue: &str,
    api: &RuntimeApi,
    visibility: i32,
    wait: i32,
) -> Result<(usize, usize), String> {
    let messages = receive(sqs, queue, Some(visibility), wait).await?;
    if messages.is_empty() {
        return Ok((0, 0));
    }
    let (_, failed) = hand_over(sqs, queue, api, &messages).await?;
    Ok((messages.len(), failed))
}

/// Hands `messages`, received from `queue`, to `api`'s function as Lambda's event source
/// mapping does, and deletes the ones it did not report failed: its answer, and how many it
/// reported failed.
pub async fn hand_over(
    sqs: &aws_sdk_sqs::Client,
    queue: &str,
    api: &RuntimeApi,
    messages: &[Message],
) -> Result<(Value, usize), String> {
    let answer = match api
        .invoke(
            sqs_event(queue, messages).to_string(),
            Duration::from_secs(60),
        )
        .await
        .map_err(|e| format!("the invocation: {e:?}"))?
    {
        Outcome::Response(payload) => {
            serde_json::from_slice::<Value>(&payload).map_err(|e| e.to_string())?
        }
        Outcome::Error(e) => {
            return Err(format!(
                "the function failed: {}",
                String::from_utf8_lossy(&e)
            ));
        }
    };
    let failed: HashSet<&str> = answer
        .get("batchItemFailures")
        .and_then(Value::as_array)
        .ok_or_else(|| format!("not a batch response: {answer}"))?
        .iter()
        .filter_map(|f| f.get("itemIdentifier").and_then(Value::as_str))
        .collect();
    for m in messages {
        if !failed.contains(m.message_id().unwrap_or_default()) {
            delete(sqs, queue, m).await?;
        }
    }
    let count = failed.len();
    Ok((answer, count))
}

/// Deletes `message`, received from `queue`, as the event source mapping does with a record
/// the function did not report failed.
pub async fn delete(
    sqs: &aws_sdk_sqs::Client,
    queue: &str,
    message: &Message,
) -> Result<(), String> {
    sqs.delete_message()
        .queue_url(queue)
        .receipt_handle(message.receipt_handle().unwrap_or_default())
        .send()
        .await
        .map(drop)
        .map_err(|e| sqs_error("DeleteMessage", &e))
}

/// The event source mapping, for good: polls `queue` (long polls of a second) and drains into
/// `api`'s function; a failed message comes back after `visibility` seconds.
pub async fn drain_forever(
    sqs: aws_sdk_sqs::Client,
    queue: String,
    api: std::sync::Arc<RuntimeApi>,
    visibility: i32,
) {
    loop {
        if drain_once(&sqs, &queue, &api, visibility, 1).await.is_err() {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}
