//! No verified delivery lost while the database is down: the spill queue.
//!
//! When a delivery has been verified and parsed but the database cannot take it (the cases
//! [`DeliveryError::unavailable`](crate::db::DeliveryError::unavailable) names), the receiver
//! puts what it verified on its provider's SQS queue (`SPILL_QUEUE_URL`) and answers 200
//! `queued`; if the queue cannot take it either, the answer stays 500. The same function
//! drains that queue: an SQS event (the event source mapping beside its HTTP route) is a batch
//! of spilled deliveries, each applied through the same claim and effect as a webhook, and
//! each one that fails is reported back (`batchItemFailures`) to be received again, and after
//! the queue's stated number of receives to land in its dead-letter queue.
//!
//! A message is the signed body as the SQS message body (base64 when it holds a character SQS
//! refuses), and in attributes: the provider, when it arrived, and the headers it arrived with
//! that the signature scheme and the provider's parser read, by name. The drain rebuilds
//! exactly what the receiver saw and proves it again: the sender's signature is checked on the
//! spilled bytes with the receiver's current secrets ([`crate::verify::Verify::authenticate`]:
//! the MAC does not expire, so only the timestamp tolerance is waived, and a replay of an
//! event still in the ledger is a duplicate), then the same bytes and headers give the same
//! event, id and effect. A message that does not verify (forged, altered, or signed with a
//! secret no longer configured) is never applied: it is reported failed, and after the
//! queue's stated receives waits in the dead-letter queue. The drain takes records only from
//! the function's own spill queue and its dead-letter queue (`eventSourceARN`), and a function
//! without `SPILL_QUEUE_URL` drains nothing. Who can write to the queue is a second line of
//! defence, not the only one (ARCHITECTURE.md, "The spill queue").

use std::time::Duration;

use crate::config::{self, ConfigError};
use crate::forward::SQS_MESSAGE_LIMIT;
use crate::sqs::Record;

/// What a spilled message's attributes may take beside its body: the seven attributes' names
/// and types, the provider and event id (255 bytes each at most), the message id (255) and
/// the unsigned headers the parser read (a few short ones for every provider here; each is at
/// most [`crate::verify::MAX_HEADER_LEN`]). A delivery whose message would not fit is not
/// spilled (500, as without a queue).
pub const SPILL_ATTRIBUTE_ROOM: usize = 8192;

/// The largest body a receiver with a spill queue accepts: one that can always be spilled
/// as text. This is the one place the limit is stated; `MAX_BODY_BYTES` may not exceed it when
/// `SPILL_QUEUE_URL` is set, and is this by default.
pub const SPILL_BODY_LIMIT: usize = SQS_MESSAGE_LIMIT - SPILL_ATTRIBUTE_ROOM;

/// How long SQS keeps a spilled message: the spill queues' and their dead-letter queues'
/// `MessageRetentionPeriod` as the template sets it (14 days, SQS's longest). A message moved
/// to a dead-letter queue keeps its first enqueue time, so no spilled message is older.
pub const SPILL_RETENTION_SECONDS: u64 = 1_209_600;

/// The oldest signature a spilled message can carry: kept at most
/// [`SPILL_RETENTION_SECONDS`], it was verified on arrival within a tolerance of at most
/// [`crate::config::MAX_TOLERANCE_SECONDS`]. The drain refuses an older signed time: such a
/// record never came through the spill queue, and after the retention sweep (at least 31 days)
/// it would be applied again.
pub const SPILLED_SIGNATURE_MAX_AGE: u64 =
    SPILL_RETENTION_SECONDS + crate::config::MAX_TOLERANCE_SECONDS;

/// The attribute names, one place.
const PROVIDER: &str = "claimonce-provider";
const EVENT_ID: &str = "claimonce-event-id";
const RECEIVED_AT: &str = "claimonce-received-at";
const HEADERS: &str = "claimonce-headers";
const ENCODING: &str = crate::sqs::body::ENCODING_ATTRIBUTE;
const VERSION: &str = "claimonce-spill";

/// The version a message is written with. Version 1 carried no signature headers: the drain
/// refuses it, since nothing in it can be proven.
const WRITTEN_VERSION: &str = "2";

/// A receiver's spill queue: its URL, a bound on each send, the queues its drain takes records
/// from, and the SQS client, made at the first spill (a delivery that never spills pays nothing
/// for it, cold start included).
#[derive(Debug)]
pub struct Spill {
    queue_url: String,
    /// The queue's account and name, from its URL (`None` when it is not a queue URL).
    queue: Option<crate::sqs::QueueName>,
    timeout: Duration,
    /// The dead-letter queue's ARN (`SPILL_DEAD_LETTER_QUEUE_ARN`), drained when an operator
    /// turns its event source on.
    dead_letter_arn: Option<String>,
    client: crate::sqs::LazyClient,
}

impl Spill {
    /// From `SPILL_QUEUE_URL` (unset: no spill queue, a database outage is answered 500 as
    /// before, and the function drains nothing), `SPILL_TIMEOUT_MS` (default 3000: the bound on
    /// putting one delivery on the queue, within the function's timeout after the database's
    /// 6.1 s; template.yaml) and `SPILL_DEAD_LETTER_QUEUE_ARN` (optional: the one other queue
    /// the drain takes records from).
    pub fn from_env() -> Result<Option<Self>, ConfigError> {
        let Some(queue_url) = config::optional("SPILL_QUEUE_URL") else {
            return Ok(None);
        };
        let ms = config::number("SPILL_TIMEOUT_MS", 3000)?;
        if ms == 0 {
            return Err(ConfigError::new(
                "SPILL_TIMEOUT_MS must be greater than 0".into(),
            ));
        }
        // A value that is not a queue URL (`sam local` puts the queue's logical id there) is
        // not refused: SendMessage then fails, a delivery the database cannot take is answered
        // 500 as without a queue, and the drain takes records from the dead-letter queue only.
        let spill = Self::new(&queue_url, Duration::from_millis(ms));
        Ok(Some(spill.with_dead_letter_arn(config::optional(
            "SPILL_DEAD_LETTER_QUEUE_ARN",
        ))))
    }

    /// The dead-letter queue's ARN, the one other queue the drain takes records from.
    pub fn with_dead_letter_arn(mut self, arn: Option<String>) -> Self {
        self.dead_letter_arn = arn;
        self
    }

    /// True when the drain may take a record from the queue `arn` names: this spill queue
    /// (its account and name those of [`SPILL_QUEUE_URL`](Self::from_env)) or its dead-letter
    /// queue. Lambda sets the record's `eventSourceARN`; a direct invocation can write any, so
    /// this keeps out other queues' messages, and the signature check keeps out forged ones.
    pub(crate) fn drains(&self, arn: Option<&str>) -> bool {
        self.dead_letter_arn.is_some() && self.dead_letter_arn.as_deref() == arn
            || self.queue.as_ref().is_some_and(|own| own.is(arn))
    }

    /// A spill queue at `queue_url`, each send bounded by `timeout`. The AWS configuration
    /// is the process's (`AWS_ENDPOINT_URL_SQS` redirects it, to a VPC endpoint or a test).
    pub fn new(queue_url: &str, timeout: Duration) -> Self {
        Self {
            queue_url: queue_url.to_owned(),
            queue: crate::sqs::QueueName::from_url(queue_url),
            timeout,
            dead_letter_arn: None,
            client: crate::sqs::LazyClient::default(),
        }
    }

    /// Puts `delivery` on the queue within the timeout. The error names what failed (the
    /// SDK's operation and error code, a timeout, a size), never the body.
    pub(crate) async fn put(&self, delivery: &Spilled<'_>) -> Result<(), String> {
        let (body, base64) = crate::sqs::body::encode(delivery.body);
        let attributes = delivery.attributes(base64)?;
        let size = body.len()
            + attributes
                .iter()
                .map(|(name, value, kind)| name.len() + value.len() + kind.len())
                .sum::<usize>();
        if size > SQS_MESSAGE_LIMIT {
            return Err(format!(
                "the message would be {size} bytes, over SQS's {SQS_MESSAGE_LIMIT}"
            ));
        }
        let send = async {
            let mut request = self
                .client
                .get()
                .await
                .send_message()
                .queue_url(&self.queue_url)
                .message_body(body);
            for (name, value, kind) in attributes {
                let value = aws_sdk_sqs::types::MessageAttributeValue::builder()
                    .data_type(kind)
                    .string_value(value)
                    .build()
                    .map_err(|_| "could not build a message attribute".to_owned())?;
                request = request.message_attributes(name, value);
            }
            request.send().await.map(drop).map_err(|e| {
                format!(
                    "SQS SendMessage: {}",
                    aws_sdk_sqs::error::DisplayErrorContext(&e)
                )
            })
        };
        tokio::time::timeout(self.timeout, send)
            .await
            .unwrap_or_else(|_| {
                Err(format!(
                    "SQS SendMessage timed out after {} ms (SPILL_TIMEOUT_MS)",
                    self.timeout.as_millis()
                ))
            })
    }
}

/// What a spilled message holds: everything the signature scheme and the provider's parser
/// saw.
#[derive(Debug)]
pub(crate) struct Spilled<'a> {
    pub(crate) provider: &'a str,
    pub(crate) event_id: &'a str,
    pub(crate) body: &'a [u8],
    /// The signature headers and the unsigned headers the parser read, with their values
    /// (absent ones are not listed).
    pub(crate) headers: &'a [(String, String)],
    pub(crate) received_at: u64,
}

impl Spilled<'_> {
    /// The message attributes: (name, value, SQS data type).
    fn attributes(
        &self,
        base64: bool,
    ) -> Result<Vec<(&'static str, String, &'static str)>, String> {
        let mut attributes = vec![
            (VERSION, WRITTEN_VERSION.to_owned(), "Number"),
            (PROVIDER, self.provider.to_owned(), "String"),
            (EVENT_ID, self.event_id.to_owned(), "String"),
            (RECEIVED_AT, self.received_at.to_string(), "Number"),
        ];
        if !self.headers.is_empty() {
            let headers: std::collections::BTreeMap<&str, &str> = self
                .headers
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_str()))
                .collect();
            let json = serde_json::to_string(&headers)
                .map_err(|_| "could not write the headers".to_owned())?;
            attributes.push((HEADERS, json, "String"));
        }
        if base64 {
            attributes.push((ENCODING, "base64".to_owned(), "String"));
        }
        Ok(attributes)
    }
}

/// A spilled delivery read back from its message.
#[derive(Debug)]
pub(crate) struct Restored {
    pub(crate) provider: String,
    pub(crate) body: Vec<u8>,
    pub(crate) headers: http::HeaderMap,
    pub(crate) received_at: u64,
}

impl Restored {
    /// The delivery `record`'s message holds; an error says which part is missing or
    /// unreadable (a message this code did not write, or one of another version).
    pub(crate) fn from_record(record: &Record) -> Result<Self, &'static str> {
        match record.attribute(VERSION) {
            Some(WRITTEN_VERSION) => {}
            Some("1") => {
                return Err(
                    "a spilled delivery of version 1 carries no signature to check \
                            (OPERATIONS.md, \"Spilled deliveries\")",
                );
            }
            _ => return Err("not a spilled delivery of version 2"),
        }
        let provider = record
            .attribute(PROVIDER)
            .ok_or("no provider attribute")?
            .to_owned();
        let received_at = record
            .attribute(RECEIVED_AT)
            .and_then(|t| t.parse().ok())
            .ok_or("no arrival time")?;
        let body = crate::sqs::body::decode(record.body(), record.attribute(ENCODING))?;
        let mut headers = http::HeaderMap::new();
        if let Some(json) = record.attribute(HEADERS) {
            let read: std::collections::BTreeMap<String, String> =
                serde_json::from_str(json).map_err(|_| "the headers are not a JSON object")?;
            for (name, value) in read {
                let name = http::HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| "a header name HTTP cannot carry")?;
                let value = http::HeaderValue::from_str(&value)
                    .map_err(|_| "a header value HTTP cannot carry")?;
                headers.insert(name, value);
            }
        }
        Ok(Restored {
            provider,
            body,
            headers,
            received_at,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(body: &str, attributes: &[(&str, &str)]) -> Record {
        let attributes: serde_json::Map<String, serde_json::Value> = attributes
            .iter()
            .map(|(n, v)| {
                (
                    (*n).to_owned(),
                    serde_json::json!({"stringValue": v, "dataType": "String"}),
                )
            })
            .collect();
        serde_json::from_value(serde_json::json!({
            "messageId": "m-1",
            "body": body,
            "messageAttributes": attributes,
            "attributes": {"ApproximateReceiveCount": "3"},
        }))
        .expect("a record")
    }

    #[test]
    fn a_spilled_delivery_reads_back_as_it_was_written() {
        let headers = vec![("x-github-event".to_owned(), "issues".to_owned())];
        for body in [
            &b"{\"id\":\"evt_1\"}"[..],
            &b"{\"a\":\"\x01\"}"[..],
            &[0xff, 0xfe][..],
        ] {
            let spilled = Spilled {
                provider: "github",
                event_id: "d-1",
                body,
                headers: &headers,
                received_at: 1_796_070_269,
            };
            let (text, base64) = crate::sqs::body::encode(body);
            let attributes = spilled.attributes(base64).expect("attributes");
            let pairs: Vec<(&str, &str)> = attributes
                .iter()
                .map(|(n, v, _)| (*n, v.as_str()))
                .collect();
            let restored = Restored::from_record(&record(&text, &pairs)).expect("restored");
            assert_eq!(restored.body, body);
            assert_eq!(restored.provider, "github");
            assert_eq!(restored.received_at, 1_796_070_269);
            assert_eq!(
                restored.headers.get("x-github-event").map(|v| v.as_bytes()),
                Some(&b"issues"[..])
            );
        }
    }

    #[test]
    fn a_message_this_code_did_not_write_is_refused_by_name() {
        assert_eq!(
            Restored::from_record(&record("{}", &[])).expect_err("refused"),
            "not a spilled delivery of version 2"
        );
        assert!(
            Restored::from_record(&record("{}", &[(VERSION, "1")]))
                .expect_err("refused")
                .contains("no signature")
        );
        assert_eq!(
            Restored::from_record(&record("{}", &[(VERSION, "2"), (PROVIDER, "stripe")]))
                .expect_err("refused"),
            "no arrival time"
        );
        assert_eq!(record("{}", &[]).receive_count(), 3);
    }

    #[test]
    fn the_drain_takes_records_from_its_own_queue_and_its_dead_letter_queue_only() {
        let spill = Spill::new(
            "https://sqs.us-east-1.amazonaws.com/123456789012/app-stripe-spill",
            Duration::from_secs(1),
        )
        .with_dead_letter_arn(Some("arn:aws:sqs:us-east-1:123456789012:app-dlq".into()));
        for own in [
            "arn:aws:sqs:us-east-1:123456789012:app-stripe-spill",
            "arn:aws:sqs:us-east-1:123456789012:app-dlq",
        ] {
            assert!(spill.drains(Some(own)), "{own}");
        }
        for other in [
            None,
            Some("arn:aws:sqs:us-east-1:123456789012:app-github-spill"),
            Some("arn:aws:sqs:us-east-1:210987654321:app-stripe-spill"),
            Some("arn:aws:sqs:us-east-1:123456789012:app-stripe-spill:x"),
            Some("arn:aws:sns:us-east-1:123456789012:app-stripe-spill"),
            Some("app-stripe-spill"),
            Some(""),
        ] {
            assert!(!spill.drains(other), "{other:?}");
        }
        // moto's URLs have the same shape.
        let local = Spill::new(
            "http://127.0.0.1:5000/123456789012/spill",
            Duration::from_secs(1),
        );
        assert!(local.drains(Some("arn:aws:sqs:us-east-1:123456789012:spill")));
        assert!(!Spill::new("not a url", Duration::from_secs(1)).drains(Some("")));
    }
}
