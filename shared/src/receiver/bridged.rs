//! Events of the provider's partner event source, through EventBridge and the function's event
//! queue (`bridge.rs`), settled through the same claim as a webhook.

use super::*;
use crate::bridge::Bridge;

/// The event queue's way in, for each of its records in a [`Queued`](super::drain::Queued)
/// batch: proven by its receipt handle and its envelope's source and account, never by a
/// signature; on the database unavailable the rest of the batch is not tried. Its lines are
/// `bridged`.
pub(super) struct EventQueue<'q, P> {
    pub(super) receiver: &'q Receiver<P>,
    pub(super) bridge: &'q Bridge,
}

impl<P: Provider> EventQueue<'_, P> {
    /// One event queue record's outcome, and EventBridge's id of the event once its envelope
    /// opened. The record must be proven to have come off the queue (`proof`; nothing of it is read
    /// otherwise), and the envelope must name the configured partner source and the queue's account;
    /// the provider unwraps its `detail` into what its webhook would carry and its own parser
    /// reads that. No signature covers it (the sender wrote it into EventBridge itself), and
    /// the claim stores no payload fingerprint: the JSON is EventBridge's, not the bytes a
    /// webhook carried. An event that also arrived by webhook is a duplicate under the same
    /// ledger key.
    pub(super) async fn record<'r>(
        &self,
        record: &'r crate::sqs::Record,
        proof: Result<(), String>,
        batch: &mut Batch,
    ) -> (Outcome, Option<std::borrow::Cow<'r, str>>) {
        if let Err(why) = proof {
            let why = format!("not proven to have come off the event queue: {why}");
            return (Outcome::failed(why), None);
        }
        let envelope = match self.bridge.open(record.body()) {
            Ok(envelope) => envelope,
            Err(why) => return (Outcome::failed(why.to_owned()), None),
        };
        let provider = self.receiver.provider();
        let parsed = match provider.bridged(envelope.detail.get()) {
            None => Err(Outcome::failed(
                "this provider takes no EventBridge events".to_owned(),
            )),
            Some(unwrapped) => unwrapped
                .and_then(|u| {
                    self.receiver.admit_event(
                        u.body.as_bytes(),
                        &u.headers,
                        super::admit::Proof::Origin,
                    )
                })
                .map_err(Outcome::unparsed),
        };
        let outcome = match parsed {
            Err(outcome) => outcome,
            Ok((parsed, _)) => {
                let delivered = self.receiver.deliver(parsed, None, Some(&*batch)).await;
                batch.outcome(delivered)
            }
        };
        (outcome, Some(envelope.id))
    }
}
