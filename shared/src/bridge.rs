//! Amazon EventBridge as an entry point: a sender's partner event source (Stripe's event
//! destinations, Shopify's EventBridge webhooks) delivers the provider's event, and a rule on
//! that partner event bus puts each one on the function's event queue, whose records the same
//! function applies through the same claim as a webhook.
//!
//! There is no signature to check: the sender wrote the event into EventBridge over its own
//! authenticated partner integration, and what reaches the function is trusted for where it
//! came from. A record is taken only from the function's own event queue or its dead-letter
//! queue (`eventSourceARN` naming `EVENT_QUEUE_URL`'s or `EVENT_DEAD_LETTER_QUEUE_URL`'s
//! queue), only once SQS has vouched for its receipt handle on that queue (`claimonce::sqs`'s
//! receipt proof: a direct invocation cannot make one up), and its envelope only when its
//! `source` is the configured partner source (`<PROVIDER>_EVENT_SOURCE`) and its `account` the
//! queue's own (ARCHITECTURE.md, "EventBridge").
//!
//! Why a queue and not the rule invoking the function: EventBridge invokes a Lambda target
//! asynchronously, and Lambda retries a failed asynchronous invocation twice within about three
//! minutes before it gives the event up; a queue keeps a failed event for as many receives as
//! it is told (days of a database outage), and its event source bounds how many executions,
//! and so database connections, a burst of events takes (docs/decisions/).

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::config::{self, ConfigError};
use crate::sqs::Record;
use crate::sqs::receipt::{self, Queue, Receipts};

/// The queue at `url`, or a startup error naming `var`.
fn queue(url: &str, var: &str) -> Result<Queue, ConfigError> {
    Queue::new(url).ok_or_else(|| {
        ConfigError::new(format!(
            "{var} is not an SQS queue's URL (https://sqs.<region>.amazonaws.com/<account>/<name>)"
        ))
    })
}

/// The variable naming the function's event queue (its URL), whose records it takes as
/// EventBridge events.
pub const QUEUE_URL_VAR: &str = "EVENT_QUEUE_URL";

/// The variable naming the event queue's dead-letter queue (its URL), the one other queue
/// whose records it takes (when an operator turns that event source on).
pub const DEAD_LETTER_URL_VAR: &str = "EVENT_DEAD_LETTER_QUEUE_URL";

/// The partner event source a provider's function takes events from, and its event queues.
#[derive(Debug)]
pub struct Bridge {
    source: String,
    queue: Queue,
    dead_letter: Option<Queue>,
    receipts: Receipts,
}

impl Bridge {
    /// The variable that names `provider`'s partner event source: `STRIPE_EVENT_SOURCE` for
    /// `stripe`.
    pub fn source_var(provider: &str) -> String {
        format!("{}_EVENT_SOURCE", provider.to_ascii_uppercase())
    }

    /// From the environment: `<PROVIDER>_EVENT_SOURCE` (the partner event source's full
    /// name, `aws.partner/stripe.com/ed_...`; unset: the function takes no EventBridge event
    /// at all), then [`EVENT_QUEUE_URL`](QUEUE_URL_VAR), required with it, and
    /// [`EVENT_DEAD_LETTER_QUEUE_URL`](DEAD_LETTER_URL_VAR), optional.
    pub fn from_env(provider: &str) -> Result<Option<Self>, ConfigError> {
        let var = Self::source_var(provider);
        let Some(source) = config::optional(&var) else {
            return Ok(None);
        };
        let queue_url = config::optional(QUEUE_URL_VAR).ok_or_else(|| {
            ConfigError::new(format!(
                "{var} is set but {QUEUE_URL_VAR} is not: the function takes EventBridge events \
                 only from its own event queue, named by that URL"
            ))
        })?;
        let dead_letter = match config::optional(DEAD_LETTER_URL_VAR) {
            None => None,
            Some(url) => Some(queue(&url, DEAD_LETTER_URL_VAR)?),
        };
        Ok(Some(Self {
            dead_letter,
            ..Self::new(&source, &queue_url)?
        }))
    }

    /// The partner event source `source`, its events taken from the queue at `queue_url`
    /// (`https://<host>/<account>/<name>`).
    pub fn new(source: &str, queue_url: &str) -> Result<Self, ConfigError> {
        let queue = queue(queue_url, QUEUE_URL_VAR)?;
        if source.is_empty() || source.len() > 256 {
            return Err(ConfigError::new(
                "the event source variable is empty or longer than an event source's name".into(),
            ));
        }
        Ok(Self {
            source: source.to_owned(),
            queue,
            dead_letter: None,
            receipts: Receipts::default(),
        })
    }

    /// This function's queues: the event queue, and its dead-letter queue when configured.
    fn queues(&self) -> impl Iterator<Item = &Queue> {
        std::iter::once(&self.queue).chain(self.dead_letter.as_ref())
    }

    /// True when a record from the queue `arn` is an EventBridge event for this function.
    pub(crate) fn takes(&self, arn: Option<&str>) -> bool {
        self.queues().any(|q| q.name().is(arn))
    }

    /// For each of `records`, whether it is proven to have come off this function's queue its
    /// ARN names ([`crate::sqs::receipt`]); `None` for a record of no such queue. A record whose
    /// receipt handle another record of the batch repeats is refused without asking SQS.
    pub(crate) async fn prove(&self, records: &[Record]) -> Vec<Option<Result<(), String>>> {
        let repeated = receipt::repeated(records);
        let mut proofs: Vec<Option<Result<(), String>>> = records.iter().map(|_| None).collect();
        for queue in self.queues() {
            let mut indexes = Vec::new();
            let mut from = Vec::new();
            let ours = records
                .iter()
                .zip(&repeated)
                .zip(proofs.iter_mut())
                .enumerate()
                .filter(|(_, ((r, _), _))| queue.name().is(r.event_source_arn.as_deref()));
            for (i, ((record, twin), proof)) in ours {
                if *twin {
                    *proof = Some(Err(receipt::REPEATED.to_owned()));
                } else {
                    indexes.push(i);
                    from.push(record);
                }
            }
            if from.is_empty() {
                continue;
            }
            let proven = self.receipts.prove(queue, &from).await;
            for (i, proof) in indexes.into_iter().zip(proven) {
                if let Some(slot) = proofs.get_mut(i) {
                    *slot = Some(proof);
                }
            }
        }
        proofs
    }

    /// The envelope of an event queue message, when it is an event of the configured source
    /// in the queue's own account; why not, data-free.
    pub(crate) fn open<'r>(&self, body: &'r str) -> Result<Envelope<'r>, &'static str> {
        let envelope: Envelope<'r> =
            serde_json::from_str(body).map_err(|_| "the message is not an EventBridge event")?;
        if envelope.source != self.source {
            return Err("the event's source is not this function's partner event source");
        }
        if envelope.account != self.queue.name().account() {
            return Err("the event's account is not the event queue's");
        }
        Ok(envelope)
    }
}

/// The parts of an EventBridge event the function reads.
#[derive(Debug, Deserialize)]
pub(crate) struct Envelope<'a> {
    /// EventBridge's id of the event: logged, to find it in EventBridge's archive.
    #[serde(borrow)]
    pub(crate) id: Cow<'a, str>,
    #[serde(borrow)]
    source: Cow<'a, str>,
    #[serde(borrow)]
    account: Cow<'a, str>,
    /// The sender's event, as the sender wrote it.
    #[serde(borrow)]
    pub(crate) detail: &'a RawValue,
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUEUE: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/stack-stripe-events";
    const QUEUE_ARN: &str = "arn:aws:sqs:us-east-1:123456789012:stack-stripe-events";
    const SOURCE: &str = "aws.partner/stripe.com/ed_test_1";

    fn event(source: &str, account: &str) -> String {
        serde_json::json!({
            "version": "0", "id": "eb-1", "detail-type": "invoice.paid", "source": source,
            "account": account, "time": "2026-12-02T10:00:00Z", "region": "us-east-1",
            "resources": [], "detail": {"id": "evt_1", "object": "event"}
        })
        .to_string()
    }

    #[test]
    fn an_event_of_its_source_in_its_account_opens_and_no_other_does() {
        let bridge = Bridge::new(SOURCE, QUEUE).expect("valid");
        let good = event(SOURCE, "123456789012");
        let envelope = bridge.open(&good).expect("opens");
        assert_eq!(envelope.id, "eb-1");
        assert_eq!(envelope.detail.get(), r#"{"id":"evt_1","object":"event"}"#);
        for (body, why) in [
            (
                event("aws.partner/stripe.com/ed_other", "123456789012"),
                "source",
            ),
            (event(SOURCE, "210987654321"), "account"),
            ("{\"id\":\"x\"}".to_owned(), "EventBridge event"),
            ("not json".to_owned(), "EventBridge event"),
        ] {
            let refused = bridge.open(&body).expect_err("refused");
            assert!(refused.contains(why), "{refused}");
        }
        assert!(bridge.takes(Some(QUEUE_ARN)));
        assert!(!bridge.takes(Some(&QUEUE_ARN.replace("events", "spill"))));
        assert!(!bridge.takes(None));
    }

    #[test]
    fn a_queue_url_that_is_not_one_is_a_startup_error_naming_the_variable() {
        for url in [
            "arn:aws:sqs:us-east-1:123456789012:q",
            "https://sqs.us-east-1.amazonaws.com/q",
            "https://sqs.us-east-1.amazonaws.com/123456789012/",
            "q",
        ] {
            let error = Bridge::new(SOURCE, url).expect_err(url);
            assert!(error.message().contains(QUEUE_URL_VAR), "{url}");
        }
        assert_eq!(Bridge::source_var("stripe"), "STRIPE_EVENT_SOURCE");
    }
}
