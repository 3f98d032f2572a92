//! Events read from their sender's own API (the recover functions), settled through the same
//! claim as a webhook, and the ledger look-up they make first.

use super::*;
use crate::fault::Point;

/// What [`Receiver::recover`] did with one event.
#[derive(Debug)]
pub struct Recovered {
    /// The event's id, when it parsed.
    pub event_id: Option<EventId>,
    /// Processed, ignored, duplicate, rejected (it does not parse) or error.
    pub disposition: Disposition,
    /// Why it was not applied, data-free.
    pub error: Option<String>,
    /// When the database was unavailable (the cause's name, as a spill names it): the caller
    /// stops, and the next run tries again.
    pub unavailable: Option<&'static str>,
}

impl<P: Provider> Receiver<P> {
    // The jobs' and tests', not a provider crate's: out of the documented surface.
    #[doc(hidden)]
    /// Applies an event read from its sender's own API (a recover function's: Stripe's
    /// `GET /v1/events`) through the same claim and effect as its webhook. `body` is the
    /// event's JSON as the API returned it, parsed by the provider's parser with no headers;
    /// no signature covers it (the API was reached over verified TLS with the account's key:
    /// ARCHITECTURE.md "Recovery from the senders' records"), and the claim stores no payload
    /// fingerprint, because the API's JSON is not the bytes the webhook carried. An event that
    /// did arrive is a duplicate; one that did not is applied once. One log line per event
    /// (`recovered`); the run's counts are the caller's report.
    pub async fn recover(&self, body: &[u8]) -> Recovered {
        let started = Instant::now();
        let mut unavailable = None;
        let outcome = match self.admit_event(body, &http::HeaderMap::new(), admit::Proof::Origin) {
            Err(r) => Outcome::unparsed(r),
            Ok((parsed, _)) if let Err(injected) = crate::fault::hit(Point::Admitted).await => {
                Outcome::injected(parsed, injected)
            }
            // Completed as a webhook's would be (a thin event from its sender's API), so no
            // way of arriving claims an event its effect cannot read.
            Ok((parsed, sha)) => match self.complete(parsed, sha).await {
                Err(outcome) => outcome,
                Ok((parsed, _)) => {
                    let settled = self.settle(&parsed, None).await;
                    let (outcome, cause) = Outcome::settled(parsed, settled);
                    unavailable = cause;
                    outcome
                }
            },
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
            unavailable,
        }
    }
}

impl<P: Provider> Receiver<P> {
    // The jobs' and tests', not a provider crate's: out of the documented surface.
    #[doc(hidden)]
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
