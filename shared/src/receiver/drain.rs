//! The spill queue's drain: each spilled delivery proven, parsed again and settled through
//! the same claim as a webhook ([`crate::spill`]).

use super::bridged::EventQueue;
use super::*;

/// Why the drain did not apply a record: it is not a spilled delivery it can read (from its
/// own queue, of its own provider), or its signature does not prove it.
enum Refused {
    Unreadable(String),
    Unproven(Rejection),
}

/// A spilled delivery parsed again: the event, its body's hash and when it first arrived.
struct Reparsed<E> {
    parsed: Parsed<E>,
    payload_sha256: [u8; 32],
    received_at: u64,
}

/// The queues' way in: an SQS batch of the spill queue's records (each proven by the signature
/// its delivery carried) and, with a [bridge](crate::bridge), of the event queue's (each
/// proven by its receipt handle). On the database unavailable the rest of the batch is not
/// tried, and comes back. Its lines are `drained` and `bridged`.
pub(crate) struct Queued<'q, P> {
    pub(crate) receiver: &'q Receiver<P>,
    pub(crate) spill: Option<&'q crate::spill::Spill>,
    pub(crate) bridge: Option<&'q crate::bridge::Bridge>,
}

impl<P: Provider> Receiver<P> {
    /// Logs an SQS batch that cannot be read (every record of it is received again): how many
    /// of its records could be named, nothing of their contents.
    pub(crate) fn unreadable_batch(&self, named_records: usize) {
        self.log.write(
            Level::Error,
            "an SQS batch that cannot be read: every record reported failed",
            crate::log::fields! { named_records: named_records },
        );
    }

    /// A record left untried because the invocation's deadline is too near: one WARN line, by
    /// its message id; it is received again after its visibility timeout.
    fn log_untried(&self, record: &crate::sqs::Record) {
        self.log.write(
            crate::log::Level::Warn,
            "not tried: too near the invocation's deadline; received again",
            crate::log::fields! { sqs_message_id: record.message_id.as_str() },
        );
    }
}

impl<P: Provider> Queued<'_, P> {
    /// Applies a batch of SQS records: each from the provider's spill queue (a spilled
    /// delivery) or, with a [bridge](crate::bridge), from its event queue (an EventBridge
    /// event), one after another on this environment's connection, each through the same claim
    /// and effect as a webhook; returns the ones to receive again. A record from another queue,
    /// or any record when this function has no spill queue and no event queue, is applied
    /// never; a message that cannot be read, belongs to another provider or source, does not
    /// verify or no longer parses fails every time, and so reaches the dead-letter queue after
    /// the queue's stated receives; one the database could not take comes back after its
    /// visibility timeout. One log line per message (`drained` or `bridged`), the spilled
    /// ones with the `Drained` metric by provider and disposition.
    ///
    /// With the invocation's `deadline`, a record is taken only while its bounds still fit
    /// before it: the database's (connect, delivery, a cancel's wait) for every record, and the
    /// sender's API's too for one its provider completes from the API. The rest are reported
    /// failed, untried, before the deadline: received again, never lost with the batch.
    pub(crate) async fn drain<'r>(
        &self,
        records: &'r [crate::sqs::Record],
        deadline: Option<tokio::time::Instant>,
    ) -> Vec<&'r str> {
        let mut again = Vec::new();
        let budget = deadline.map(|d| crate::budget::Budget::until(d.into_std()));
        let mut batch = Batch::within(budget);
        // The event queues' records proven to have come off them, before any is claimed: one
        // SQS call per queue and batch (crate::sqs::receipt).
        let mut proofs = match self.bridge {
            Some(bridge) => match crate::fault::hit(crate::fault::Point::ReceiptProof).await {
                Ok(()) => crate::future::rare(bridge.prove(records)).await,
                Err(injected) => records
                    .iter()
                    .map(|_| Some(Err(injected.to_string())))
                    .collect(),
            },
            None => Vec::new(),
        }
        .into_iter();
        for (n, record) in records.iter().enumerate() {
            let proof = proofs.next().flatten();
            let started = Instant::now();
            if n > 0
                && let Err(injected) = crate::fault::hit(crate::fault::Point::DrainRecord).await
            {
                again.push(record.message_id.as_str());
                let failed = Outcome::failed(injected.to_string());
                let via = Via::Spill {
                    sqs_message_id: &record.message_id,
                    receive_count: record.receive_count(),
                    queued_seconds: None,
                };
                self.receiver
                    .log_outcome(via, &failed, started.elapsed().as_secs_f64() * 1000.0);
                continue;
            }
            if !batch.fits(self.receiver.bounds(false)) {
                again.push(record.message_id.as_str());
                self.receiver.log_untried(record);
                continue;
            }
            let arn = record.event_source_arn.as_deref();
            let receive_count = record.receive_count();
            let eventbridge_id;
            let (outcome, via) = match self.bridge {
                Some(bridge) if bridge.takes(arn) => {
                    let outcome;
                    let proof = proof.unwrap_or_else(|| Err("it was not asked of SQS".into()));
                    let queue = EventQueue {
                        receiver: self.receiver,
                        bridge,
                    };
                    (outcome, eventbridge_id) = queue.record(record, proof, &mut batch).await;
                    let via = Via::EventBridge {
                        sqs_message_id: &record.message_id,
                        receive_count,
                        eventbridge_id: eventbridge_id.as_deref(),
                    };
                    (outcome, via)
                }
                _ => {
                    let (outcome, queued_seconds) =
                        self.spill_queue_record(record, &mut batch).await;
                    let via = Via::Spill {
                        sqs_message_id: &record.message_id,
                        receive_count,
                        queued_seconds,
                    };
                    (outcome, via)
                }
            };
            let outcome = outcome.at_answer().await;
            if !outcome.disposition.applied() {
                again.push(record.message_id.as_str());
            }
            self.receiver
                .log_outcome(via, &outcome, started.elapsed().as_secs_f64() * 1000.0);
        }
        again
    }

    /// One spilled delivery's outcome, and how long since it first arrived once it was read.
    async fn spill_queue_record(
        &self,
        record: &crate::sqs::Record,
        batch: &mut Batch,
    ) -> (Outcome, Option<u64>) {
        match self.restore(record).await {
            Err(Refused::Unreadable(why)) => (Outcome::failed(why), None),
            Err(Refused::Unproven(rejection)) => {
                let why = format!("the spilled delivery does not verify: {}", rejection.detail);
                (Outcome::rejected(rejection, Some(why)), None)
            }
            Ok(Reparsed {
                parsed,
                payload_sha256,
                received_at,
            }) => {
                let queued = Some(unix_now().saturating_sub(received_at));
                let delivered = self
                    .receiver
                    .deliver(parsed, Some(payload_sha256), Some(&*batch))
                    .await;
                (batch.outcome(delivered), queued)
            }
        }
    }

    /// A spilled message, proven and parsed again as its webhook was: the same bytes, the
    /// signature headers they arrived with, checked with the current secrets (read again once
    /// if none matches, as for a webhook), and the headers the parser read then.
    async fn restore(&self, record: &crate::sqs::Record) -> Result<Reparsed<P::Event>, Refused> {
        let unreadable = |why: String| Refused::Unreadable(why);
        let Some(spill) = self.spill else {
            return Err(unreadable(
                "this function has no spill queue (SPILL_QUEUE_URL) and drains nothing".into(),
            ));
        };
        if !spill.drains(record.event_source_arn.as_deref()) {
            return Err(unreadable(
                "a record from a queue other than this function's spill queue".into(),
            ));
        }
        let restored = crate::spill::Restored::from_record(record)
            .map_err(|why| unreadable(why.to_owned()))?;
        if restored.provider != P::NAME {
            return Err(unreadable(format!(
                "a message for provider {:?} on {:?}'s queue",
                restored.provider,
                P::NAME
            )));
        }
        let reparsed = self
            .receiver
            .with_fresh_secrets(|| {
                self.receiver
                    .admit_event(&restored.body, &restored.headers, admit::Proof::Spilled)
            })
            .await;
        let (parsed, sha) = reparsed.map_err(|r| match r.problem {
            Problem::InvalidPayload | Problem::UnreadableBody => unreadable(format!(
                "the spilled delivery no longer parses: {}",
                r.detail
            )),
            _ => Refused::Unproven(r),
        })?;
        Ok(Reparsed {
            parsed,
            payload_sha256: sha,
            received_at: restored.received_at,
        })
    }
}
