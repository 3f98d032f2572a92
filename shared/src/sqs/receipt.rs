//! The proof that a record came off a queue. A record that carries no signature (an
//! EventBridge event) is trusted for where it came from, and its `eventSourceARN` is only what
//! the invoker wrote: anyone allowed to invoke the function could write the queue's. Its
//! receipt handle is different: SQS issues one for each receive and refuses one it never issued
//! (`ReceiptHandleIsInvalid`), and only the function's role may receive from its queues. So
//! before a record is claimed, `ChangeMessageVisibilityBatch` is called with the batch's handles
//! on the queue the records name: each entry SQS accepts proves its record was received from
//! that queue and is still in flight. A handle that two records of one batch carry proves
//! neither ([`repeated`]). The visibility set is the queue's own
//! (`GetQueueAttributes`, read once per queue and environment), so a record reported failed
//! comes back when it would have without the proof.

use std::time::Duration;

use aws_sdk_sqs::error::ProvideErrorMetadata;
use aws_sdk_sqs::types::{ChangeMessageVisibilityBatchRequestEntry as Entry, QueueAttributeName};

use super::{QueueName, Record};

/// The bound on proving one batch, the queue's attributes read included: a proof that cannot
/// finish in it fails the batch's records, which come back after their visibility timeout.
pub(crate) const PROOF_TIMEOUT: Duration = Duration::from_secs(3);

/// SQS's largest batch: ten entries per call.
const ENTRIES_PER_CALL: usize = 10;

/// A queue whose records are proven: its URL (the calls name it), its account and name (a
/// record's ARN is matched to it), and its visibility timeout once read.
#[derive(Debug)]
pub(crate) struct Queue {
    url: String,
    name: QueueName,
    visibility: tokio::sync::OnceCell<i32>,
}

impl Queue {
    /// The queue at `url`; `None` when `url` is not a queue's URL.
    pub(crate) fn new(url: &str) -> Option<Self> {
        Some(Self {
            url: url.to_owned(),
            name: QueueName::from_url(url)?,
            visibility: tokio::sync::OnceCell::new(),
        })
    }

    /// Its account and name.
    pub(crate) fn name(&self) -> &QueueName {
        &self.name
    }
}

/// Why a record whose receipt handle another record of its batch also carries is not proven.
pub(crate) const REPEATED: &str = "its receipt handle is repeated by another record of the batch, \
                                   and which of them came off the queue cannot be told";

/// For each of `records`, whether another record of the batch carries the same receipt handle.
/// SQS issues a handle for one receive of one message, so the event source mapping never hands
/// over a handle twice: two records with one handle are at most one genuine record and a
/// forgery. SQS would vouch for the handle of each, and nothing tells the genuine body from the
/// forged one, so none of them is proven. The genuine message, asked nothing of, stays in
/// flight and comes back after its visibility timeout. An empty handle is refused on its own.
pub(crate) fn repeated(records: &[Record]) -> Vec<bool> {
    let mut seen = std::collections::HashMap::<&str, usize>::new();
    for record in records.iter().filter(|r| !r.receipt_handle.is_empty()) {
        *seen.entry(record.receipt_handle.as_str()).or_default() += 1;
    }
    records
        .iter()
        .map(|r| seen.get(r.receipt_handle.as_str()).is_some_and(|n| *n > 1))
        .collect()
}

/// The SQS client the proofs are asked of, made at the first one.
#[derive(Debug, Default)]
pub(crate) struct Receipts {
    client: super::LazyClient,
}

impl Receipts {
    /// For each of `records`, all named as `queue`'s, whether SQS vouches that it was received
    /// from `queue` and is still in flight; why not, data-free (SQS's error code, never the
    /// handle or the body).
    pub(crate) async fn prove(
        &self,
        queue: &Queue,
        records: &[&Record],
    ) -> Vec<Result<(), String>> {
        let asked = async {
            let mut proven = Vec::with_capacity(records.len());
            for chunk in records.chunks(ENTRIES_PER_CALL) {
                proven.extend(self.prove_chunk(queue, chunk).await?);
            }
            Ok::<_, String>(proven)
        };
        match tokio::time::timeout(PROOF_TIMEOUT, asked).await {
            Ok(Ok(proven)) => proven,
            Ok(Err(why)) => records.iter().map(|_| Err(why.clone())).collect(),
            Err(_) => {
                let why = format!("SQS did not answer within {} ms", PROOF_TIMEOUT.as_millis());
                records.iter().map(|_| Err(why.clone())).collect()
            }
        }
    }

    /// The queue's visibility timeout, read once.
    async fn visibility(&self, queue: &Queue) -> Result<i32, String> {
        let read = queue
            .visibility
            .get_or_try_init(|| async {
                let attributes = self
                    .client
                    .get()
                    .await
                    .get_queue_attributes()
                    .queue_url(&queue.url)
                    .attribute_names(QueueAttributeName::VisibilityTimeout)
                    .send()
                    .await
                    .map_err(|e| failed("GetQueueAttributes", &e))?;
                attributes
                    .attributes()
                    .and_then(|a| a.get(&QueueAttributeName::VisibilityTimeout))
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(|| "SQS GetQueueAttributes: no visibility timeout".to_owned())
            })
            .await?;
        Ok(*read)
    }

    /// One call for at most ten records. A record without a handle is refused without asking.
    async fn prove_chunk(
        &self,
        queue: &Queue,
        records: &[&Record],
    ) -> Result<Vec<Result<(), String>>, String> {
        let mut proven: Vec<Result<(), String>> = records
            .iter()
            .map(|r| {
                if r.receipt_handle.is_empty() {
                    Err("it carries no receipt handle".to_owned())
                } else {
                    Ok(())
                }
            })
            .collect();
        if proven.iter().all(Result::is_err) {
            return Ok(proven);
        }
        let visibility = self.visibility(queue).await?;
        let mut entries = Vec::with_capacity(records.len());
        for (i, (record, proof)) in records.iter().zip(&proven).enumerate() {
            if proof.is_ok() {
                let entry = Entry::builder()
                    .id(format!("r{i}"))
                    .receipt_handle(&record.receipt_handle)
                    .visibility_timeout(visibility)
                    .build()
                    .map_err(|_| "could not build a ChangeMessageVisibilityBatch entry")?;
                entries.push(entry);
            }
        }
        let answer = self
            .client
            .get()
            .await
            .change_message_visibility_batch()
            .queue_url(&queue.url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|e| failed("ChangeMessageVisibilityBatch", &e))?;
        for refused in answer.failed() {
            let slot = refused
                .id()
                .strip_prefix('r')
                .and_then(|i| i.parse::<usize>().ok())
                .and_then(|i| proven.get_mut(i));
            if let Some(slot) = slot {
                *slot = Err(format!(
                    "SQS refused its receipt handle ({})",
                    refused.code()
                ));
            }
        }
        // An entry SQS answered neither way is not proven.
        let accepted: std::collections::HashSet<&str> =
            answer.successful().iter().map(|s| s.id()).collect();
        for (i, result) in proven.iter_mut().enumerate() {
            if result.is_ok() && !accepted.contains(format!("r{i}").as_str()) {
                *result = Err("SQS did not answer for its receipt handle".to_owned());
            }
        }
        Ok(proven)
    }
}

/// A failed SQS call, data-free: the operation and SQS's error code, or that no answer came.
fn failed<E: ProvideErrorMetadata>(operation: &str, e: &E) -> String {
    match e.code() {
        Some(code) => format!("SQS {operation} refused: {code}"),
        None => format!("SQS {operation} had no answer"),
    }
}
