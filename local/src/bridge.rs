//! EventBridge events on a machine without AWS: a provider's event queue and its dead-letter
//! queue in moto's SQS, as template.yaml makes them, what a partner event source's event looks
//! like once a rule has put it there, and the event source mapping's part: receive, invoke the
//! function with what was received, delete what it did not report failed. The function proves
//! each record came off its queue with the receipt handle SQS issued (`shared/src/bridge.rs`), so
//! a record is only ever handed over as received. The local run's `send` of an EventBridge
//! sample, the tests and the benchmarks use the same.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_sqs::types::QueueAttributeName;
use serde_json::{Value, json};

use crate::functions::Function;
use crate::runtime_api::RuntimeApi;

/// A provider's event queue and its dead-letter queue in moto's SQS.
#[derive(Debug, Clone)]
pub struct EventQueues {
    sqs: aws_sdk_sqs::Client,
    /// The moto server's URL.
    moto: String,
    /// The event queue's URL.
    pub url: String,
    /// Its dead-letter queue's URL.
    pub dead_letter_url: String,
    /// Held by a delivery from send to delete, so that two at once do not take each other's
    /// message.
    delivering: Arc<tokio::sync::Mutex<()>>,
    /// What the function's `bridged` lines say became of the messages delivered.
    lines: BridgedLines,
}

/// The dispositions the function's `bridged` lines name, handed to the delivery waiting for
/// that message: its answer (a batch response) says only which records failed, and on Lambda
/// the line in CloudWatch is where the rest is read. The local run feeds it every line its
/// functions print ([`BridgedLines::read`]).
#[derive(Debug, Clone, Default)]
pub struct BridgedLines(Arc<Mutex<HashMap<String, tokio::sync::oneshot::Sender<String>>>>);

impl BridgedLines {
    /// Reads one line a function printed: a `bridged` line's disposition goes to the delivery
    /// of the SQS message it names, if one waits for it.
    pub fn read(&self, line: &str) {
        if !line.contains(r#""message":"bridged""#) {
            return;
        }
        let Ok(line) = serde_json::from_str::<Value>(line) else {
            return;
        };
        let text = |key: &str| line.get(key).and_then(Value::as_str);
        if let (Some("bridged"), Some(id), Some(disposition)) =
            (text("message"), text("sqs_message_id"), text("disposition"))
        {
            let waiting = self.0.lock().map(|mut w| w.remove(id)).ok().flatten();
            if let Some(waiting) = waiting {
                let _ = waiting.send(disposition.to_owned());
            }
        }
    }

    /// The disposition of message `id`'s line, once it has been read.
    fn expect(&self, id: &str) -> tokio::sync::oneshot::Receiver<String> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if let Ok(mut waiting) = self.0.lock() {
            waiting.insert(id.to_owned(), tx);
        }
        rx
    }

    fn forget(&self, id: &str) {
        if let Ok(mut waiting) = self.0.lock() {
            waiting.remove(id);
        }
    }
}

impl EventQueues {
    /// Creates `<prefix>-events` and `<prefix>-events-dead` on the moto server at `moto`, a
    /// message received and reported failed visible again after `visibility` seconds.
    pub async fn create(moto: &str, prefix: &str, visibility: u32) -> Result<Self, String> {
        let sqs = crate::spill::client(moto).await;
        let attributes = [
            (
                QueueAttributeName::VisibilityTimeout,
                visibility.to_string(),
            ),
            (QueueAttributeName::MaximumMessageSize, "1048576".to_owned()),
        ];
        let url =
            crate::spill::create_queue(&sqs, &format!("{prefix}-events"), &attributes).await?;
        let dead_letter_url =
            crate::spill::create_queue(&sqs, &format!("{prefix}-events-dead"), &attributes).await?;
        Ok(Self {
            sqs,
            moto: moto.to_owned(),
            url,
            dead_letter_url,
            delivering: Arc::default(),
            lines: BridgedLines::default(),
        })
    }

    /// The variables that make `provider`'s function take the events of partner source
    /// `source` from these queues, and reach them.
    pub fn function_env(&self, provider: &str, source: &str) -> Vec<(String, String)> {
        let mut env = vec![
            (
                claimonce::jobs::Bridge::source_var(provider),
                source.to_owned(),
            ),
            (claimonce::jobs::QUEUE_URL_VAR.to_owned(), self.url.clone()),
            (
                claimonce::jobs::DEAD_LETTER_URL_VAR.to_owned(),
                self.dead_letter_url.clone(),
            ),
        ];
        env.extend(
            crate::spill::aws_env(&self.moto)
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v)),
        );
        env
    }

    /// The SQS client these queues are reached with.
    pub fn sqs(&self) -> &aws_sdk_sqs::Client {
        &self.sqs
    }

    /// Puts `event` on the queue at `queue`, as EventBridge's rule does; its message id.
    pub async fn send(&self, queue: &str, event: &Value) -> Result<String, String> {
        self.sqs
            .send_message()
            .queue_url(queue)
            .message_body(event.to_string())
            .send()
            .await
            .map_err(|e| {
                format!(
                    "SQS SendMessage: {}",
                    aws_sdk_sqs::error::DisplayErrorContext(&e)
                )
            })?
            .message_id
            .ok_or_else(|| "SQS SendMessage: no message id".to_owned())
    }

    /// Receives from `queue` until every message of `ids` is in hand (others that come with
    /// them are kept too, as the event source mapping would hand them over), hidden for the
    /// queue's visibility timeout.
    pub async fn receive(
        &self,
        queue: &str,
        ids: &[String],
    ) -> Result<Vec<aws_sdk_sqs::types::Message>, String> {
        let mut wanted: HashSet<&str> = ids.iter().map(String::as_str).collect();
        let mut received = Vec::new();
        for _ in 0..20 {
            if wanted.is_empty() {
                return Ok(received);
            }
            for message in crate::spill::receive(&self.sqs, queue, None, 1).await? {
                wanted.remove(message.message_id().unwrap_or_default());
                received.push(message);
            }
        }
        Err(format!(
            "{} sent message(s) never came back from the queue",
            wanted.len()
        ))
    }

    /// Hands `messages` received from `queue` to `api`'s function as Lambda's event source
    /// mapping does, and deletes the ones it did not report failed; the function's answer.
    pub async fn invoke(
        &self,
        api: &RuntimeApi,
        queue: &str,
        messages: &[aws_sdk_sqs::types::Message],
    ) -> Result<Value, String> {
        crate::spill::hand_over(&self.sqs, queue, api, messages)
            .await
            .map(|(answer, _)| answer)
    }

    /// Where the function's `bridged` lines are to be read for [`EventQueues::deliver`].
    pub fn lines(&self) -> &BridgedLines {
        &self.lines
    }

    /// What the rule and the event source mapping do with one event: on the event queue,
    /// received, handed to `api`'s function, deleted unless it failed. The function's answer,
    /// and the disposition its `bridged` line for the event names (none when no such line was
    /// read: one below `AWS_LAMBDA_LOG_LEVEL`, or [`EventQueues::lines`] fed nothing).
    pub async fn deliver(
        &self,
        api: &RuntimeApi,
        event: &Value,
    ) -> Result<(Value, Option<String>), String> {
        let _one_at_a_time = self.delivering.lock().await;
        let id = self.send(&self.url, event).await?;
        let line = self.lines.expect(&id);
        let delivered = async {
            let messages = self.receive(&self.url, std::slice::from_ref(&id)).await?;
            let answer = self.invoke(api, &self.url, &messages).await?;
            // The function wrote the line before it answered; reading it from its output
            // may still take a moment.
            let disposition = tokio::time::timeout(Duration::from_secs(2), line)
                .await
                .ok()
                .and_then(Result::ok);
            Ok((answer, disposition))
        }
        .await;
        self.lines.forget(&id);
        delivered
    }
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

/// The local route a function takes EventBridge events on: the gateway puts each event on
/// the function's event queue and hands it over as received.
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
