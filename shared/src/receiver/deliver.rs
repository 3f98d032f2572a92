//! The one step after admission, whichever way an event came in: completed from its sender's
//! API when its provider says so (within the batch's deadline, when there is one), then claimed
//! and applied in one transaction. It comes to an outcome, or to the database being
//! unavailable, which each way in meets its own way: the webhook spills the delivery, a batch
//! and a recover run stop trying the rest ([`Batch`]).

use super::*;
use crate::fault::{self, Point};

/// What an admitted event came to.
pub(crate) enum Delivered<E> {
    /// Settled (processed, ignored or duplicate), or failed for a reason of its own: the
    /// outcome to answer and log.
    Settled(Outcome),
    /// Not taken: the database is unavailable. The event, the failure's summary, and the
    /// reason [`crate::db::DeliveryError::unavailable`] names.
    Unavailable {
        parsed: Parsed<E>,
        error: String,
        reason: &'static str,
    },
}

/// What the events of one invocation share, when it takes several one after another (the
/// spill queue's and the event queue's records, a recover run's events): the invocation's
/// budget, and once one of them found the database unavailable, why; the rest are then not
/// tried, since each would wait out its own connect or deadline.
#[derive(Debug, Default)]
pub struct Batch {
    budget: Option<crate::budget::Budget>,
    unavailable: Option<&'static str>,
}

impl Batch {
    /// A batch that must be done within `budget` (none: no deadline).
    pub fn within(budget: Option<crate::budget::Budget>) -> Self {
        Self {
            budget,
            unavailable: None,
        }
    }

    /// Why the database was found unavailable, once an event of the batch found it so.
    pub fn unavailable(&self) -> Option<&'static str> {
        self.unavailable
    }

    /// Whether `need` still fits in the batch's budget (always, without one).
    pub(crate) fn fits(&self, need: std::time::Duration) -> bool {
        self.budget.is_none_or(|budget| budget.allows(need))
    }

    /// The outcome an event comes to in the batch, noting the database's unavailability.
    pub(crate) fn outcome<E>(&mut self, delivered: Delivered<E>) -> Outcome {
        match delivered {
            Delivered::Settled(outcome) => outcome,
            Delivered::Unavailable {
                parsed,
                error,
                reason,
            } => {
                self.unavailable = Some(reason);
                Outcome {
                    error: Some(error),
                    waits_for_database: true,
                    ..Outcome::of(parsed, Disposition::Error)
                }
            }
        }
    }

    /// An event not tried because an earlier one found the database unavailable (`reason`).
    fn not_tried<E>(parsed: Parsed<E>, reason: &str) -> Outcome {
        Outcome {
            error: Some(format!("not tried: the database is unavailable ({reason})")),
            waits_for_database: true,
            ..Outcome::of(parsed, Disposition::Error)
        }
    }
}

impl<P: Provider> Receiver<P> {
    /// An admitted event, completed (within `batch`'s budget) and settled. `fingerprint` is
    /// the SHA-256 of the bytes its sender signed, which its claim stores; none when the event
    /// was not read from such bytes (EventBridge's JSON, the sender's API).
    pub(super) async fn deliver(
        &self,
        parsed: Parsed<P::Event>,
        fingerprint: Option<[u8; 32]>,
        batch: Option<&Batch>,
    ) -> Delivered<P::Event> {
        if let Err(injected) = fault::hit(Point::Admitted).await {
            return Delivered::Settled(Outcome::injected(parsed, injected));
        }
        if let Some(reason) = batch.and_then(Batch::unavailable) {
            return Delivered::Settled(Batch::not_tried(parsed, reason));
        }
        let (parsed, fingerprint) = match self.complete(parsed, fingerprint, batch).await {
            Ok(completed) => completed,
            Err(outcome) => return Delivered::Settled(outcome),
        };
        match self.claim_and_apply(&parsed, fingerprint).await {
            Ok(disposition) => Delivered::Settled(Outcome::of(parsed, disposition)),
            Err(e) => match e.unavailable() {
                Some(reason) => Delivered::Unavailable {
                    parsed,
                    error: e.summary(),
                    reason,
                },
                None => Delivered::Settled(Outcome {
                    error: Some(e.summary()),
                    ..Outcome::of(parsed, Disposition::Error)
                }),
            },
        }
    }

    /// The provider's [`Provider::complete`] on a parsed event, with the fingerprint its claim
    /// stores: the one given, unless the event was replaced by another (a thin event by the
    /// snapshot it stands for), whose bytes those are not. In a batch, an event its provider
    /// completes from the sender's API is put off when that read's bound no longer fits the
    /// batch's budget. A failure is this delivery's error, named by the parsed event.
    async fn complete(
        &self,
        parsed: Parsed<P::Event>,
        fingerprint: Option<[u8; 32]>,
        batch: Option<&Batch>,
    ) -> Result<(Parsed<P::Event>, Option<[u8; 32]>), Outcome> {
        let provider = self.provider();
        if let Some(batch) = batch
            && provider.completes(&parsed)
            && !batch.fits(self.bounds(true))
        {
            return Err(Outcome {
                error: Some(
                    "not completed: the sender's API bound no longer fits before the \
                     invocation's deadline; received again"
                        .into(),
                ),
                ..Outcome::of(parsed, Disposition::Error)
            });
        }
        match crate::future::rare(provider.complete(&parsed, self.api.as_ref())).await {
            Ok(None) => Ok((parsed, fingerprint)),
            Ok(Some(completed)) => Ok((completed, None)),
            Err(crate::complete::Incomplete(why)) => Err(Outcome {
                error: Some(format!("the event could not be completed: {why}")),
                ..Outcome::of(parsed, Disposition::Error)
            }),
        }
    }

    /// How long one event may take: the database's bounds (connect, delivery, a cancel's
    /// wait), and with `api` the sender's API's too.
    pub(super) fn bounds(&self, api: bool) -> std::time::Duration {
        let timeouts = self.database.timeouts();
        let mut need = timeouts.connect + timeouts.delivery + crate::db::Timeouts::CANCEL;
        if api {
            need += self.api.as_ref().map_or(
                std::time::Duration::ZERO,
                crate::complete::SenderApi::timeout,
            );
        }
        need
    }

    /// The claim and the effect of a parsed event, on the database: processed, ignored or
    /// duplicate, or why it failed.
    async fn claim_and_apply(
        &self,
        parsed: &Parsed<P::Event>,
        payload_sha256: Option<[u8; 32]>,
    ) -> Result<Disposition, crate::db::DeliveryError> {
        let claim = Claim {
            provider: P::NAME,
            event_id: parsed.event_id.as_str(),
            event_type: &parsed.event_type,
            payload_sha256,
        };
        let provider = self.provider();
        let ran = self
            .database
            .run_counted(&crate::claim::Settle {
                claim: &claim,
                plan: provider.plan(parsed),
            })
            .await;
        self.report_reconnects(&parsed.event_id, ran.reconnects);
        match ran.outcome? {
            Finished::Processed => Ok(Disposition::Processed),
            Finished::Ignored => Ok(Disposition::Ignored),
            Finished::Duplicate { stored_sha256 } => {
                // An event from the sender's API has no fingerprint, and a webhook after one
                // finds none stored: neither is compared.
                let differs = match (&stored_sha256, &claim.payload_sha256) {
                    (Some(stored), Some(ours)) => stored.as_slice() != ours.as_slice(),
                    _ => false,
                };
                if differs {
                    let fields = crate::log::fields! {
                        provider: claim.provider,
                        event_id: parsed.event_id.as_str(),
                    };
                    self.log.write(
                        crate::log::Level::Warn,
                        "duplicate event id with a different payload; the first one was kept",
                        fields,
                    );
                }
                Ok(Disposition::Duplicate)
            }
        }
    }
}
