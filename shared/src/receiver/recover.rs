//! Events read from their sender's own API (the recover functions), settled through the same
//! claim as a webhook, and the ledger look-up they make first.

use super::*;

/// What [`Receiver::recover`] did with one event.
#[derive(Debug)]
pub struct Recovered {
    /// The event's id, when it parsed.
    pub event_id: Option<EventId>,
    /// Processed, ignored, duplicate, rejected (it does not parse) or error.
    pub disposition: Disposition,
    /// Why it was not applied, data-free.
    pub error: Option<String>,
}

impl<P: Provider> Receiver<P> {
    /// Applies an event read from its sender's own API (a recover function's: Stripe's
    /// `GET /v1/events`) through the same claim and effect as its webhook. `body` is the
    /// event's JSON as the API returned it, parsed by the provider's parser with no headers;
    /// no signature covers it (the API was reached over verified TLS with the account's key:
    /// ARCHITECTURE.md "Recovery from the senders' records"), and the claim stores no payload
    /// fingerprint, because the API's JSON is not the bytes the webhook carried. An event that
    /// did arrive is a duplicate; one that did not is applied once. One log line per event
    /// (`recovered`); the run's counts are the caller's report.
    ///
    /// The run's events are one [`Batch`]: once one finds the database unavailable, the
    /// batch says so, and the caller stops; the next run tries again.
    pub async fn recover(&self, body: &[u8], batch: &mut Batch) -> Recovered {
        let started = Instant::now();
        let outcome = match self.admit_event(body, &http::HeaderMap::new(), admit::Proof::Origin) {
            Err(r) => Outcome::unparsed(r),
            // Completed as a webhook's would be (a thin event from its sender's API), so no
            // way of arriving claims an event its effect cannot read.
            Ok((parsed, _)) => {
                let delivered = self.deliver(parsed, None, Some(&*batch)).await;
                batch.outcome(delivered)
            }
        };
        self.log_outcome(
            Via::SenderApi,
            &outcome,
            started.elapsed().as_secs_f64() * 1000.0,
        );
        Recovered {
            event_id: outcome.event_id,
            disposition: outcome.disposition,
            error: outcome.error,
        }
    }
}

impl<P: Provider> Receiver<P> {
    /// The ids among `event_ids` already in this provider's ledger: applied by a webhook, a
    /// drain or an earlier run. A recover function asks before it applies what it listed, so
    /// its cap counts only events still to apply. An error is the database's, data-free.
    pub async fn claimed(
        &self,
        event_ids: &[&str],
    ) -> Result<std::collections::HashSet<String>, crate::db::DeliveryError> {
        self.database
            .run(&crate::claim::Claimed {
                provider: P::NAME,
                event_ids,
            })
            .await
    }
}
