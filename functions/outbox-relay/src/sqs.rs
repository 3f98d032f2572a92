//! The production dispatcher: Amazon SQS.
//!
//! Every message carries its idempotency key as the `idempotency-key` message attribute (and
//! an envelope carries it in its body too), with the attributes [`OutboxRow::attributes`]
//! lists. On a FIFO queue (URL ending in `.fifo`) the key is also the `MessageDeduplicationId`,
//! so a resend within SQS's five-minute window is dropped by SQS itself, and the
//! `MessageGroupId`, so messages are not held behind one another (the outbox promises no
//! order). Both take at most 128 characters: a longer key is sent as its SHA-256, in hex.

use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::MessageAttributeValue;
use claimonce::config;
use claimonce::prelude::ConfigError;

use crate::{Dispatch, OutboxRow};

/// Sends outbox rows to one SQS queue.
#[derive(Debug, Clone)]
pub struct Sqs {
    client: aws_sdk_sqs::Client,
    queue_url: String,
    fifo: bool,
}

impl Sqs {
    /// A dispatcher for `queue_url` with the given AWS configuration.
    pub fn new(config: &aws_config::SdkConfig, queue_url: &str) -> Self {
        Self {
            client: aws_sdk_sqs::Client::new(config),
            queue_url: queue_url.to_owned(),
            fifo: queue_url.ends_with(".fifo"),
        }
    }

    /// From `OUTBOX_QUEUE_URL` and the default AWS configuration (region and credentials of
    /// the function; `AWS_ENDPOINT_URL_SQS` redirects it, e.g. to a VPC endpoint or a test).
    pub async fn from_env() -> Result<Self, ConfigError> {
        let url = config::required("OUTBOX_QUEUE_URL")?;
        let aws = claimonce::jobs::aws_config().load().await;
        Ok(Self::new(&aws, &url))
    }

    /// True for a FIFO queue.
    pub fn is_fifo(&self) -> bool {
        self.fifo
    }
}

/// A FIFO deduplication or group id: the key itself when it fits SQS's 128 characters.
fn fifo_id(key: &str) -> String {
    use sha2::Digest as _;
    if key.len() <= 128 {
        key.to_owned()
    } else {
        claimonce::verify::lower_hex(sha2::Sha256::digest(key.as_bytes()).as_slice())
    }
}

fn attribute(value: &str) -> Result<MessageAttributeValue, String> {
    MessageAttributeValue::builder()
        .data_type("String")
        .string_value(value)
        .build()
        .map_err(|_| "could not build a message attribute".to_owned())
}

impl Dispatch for Sqs {
    type Error = String;

    async fn send(&self, row: &OutboxRow) -> Result<(), String> {
        let body = row
            .message_body()
            .ok_or_else(|| "the payload is not JSON".to_owned())?;
        let mut request = self
            .client
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(body);
        for (name, value) in row.attributes() {
            request = request.message_attributes(name, attribute(&value)?);
        }
        if self.fifo {
            let key = fifo_id(&row.idempotency_key());
            request = request
                .message_deduplication_id(&key)
                .message_group_id(&key);
        }
        // The SDK's error names the operation, the service's error code and message (for
        // example AccessDenied or a too-large body), never the message itself.
        request
            .send()
            .await
            .map(drop)
            .map_err(|e| format!("SQS SendMessage: {}", DisplayErrorContext(&e)))
    }
}
