//! The one outcome of an event, whichever way it arrived, and its one log line. Each entry
//! point (the API Gateway request, a spilled record, an event read from the sender's API) is
//! an adapter that admits the event its own way, settles it through the same claim, and hands
//! the outcome here with what its way of arriving adds to the line.

use super::{Level, Provider, Receiver};
use crate::ids::EventId;
use crate::metrics;
use crate::response::Disposition;

/// What happened to one event.
#[derive(Debug)]
pub(crate) struct Outcome {
    /// The ledger key, once the event parsed.
    pub(crate) event_id: Option<EventId>,
    /// The provider's event type, once it parsed.
    pub(crate) event_type: Option<String>,
    /// The sender's id of this delivery attempt, when it is not the event id.
    pub(crate) delivery_id: Option<EventId>,
    /// Processed, ignored, duplicate, queued, rejected or error.
    pub(crate) disposition: Disposition,
    /// Why it was not applied (or how it was kept), in our own words: never request data.
    pub(crate) error: Option<String>,
    /// Not applied because the database is unavailable (an outage the queue rides out): a
    /// queued event's line says so at WARN, not ERROR.
    pub(crate) waits_for_database: bool,
}

impl Outcome {
    /// Refused before it parsed.
    pub(crate) fn rejected(rejection: crate::response::Rejection, error: Option<String>) -> Self {
        Self {
            event_id: None,
            event_type: None,
            delivery_id: None,
            disposition: Disposition::Rejected(rejection),
            error,
            waits_for_database: false,
        }
    }

    /// An event with no signature to check (from the sender's API, or through EventBridge)
    /// that its provider's parser refused: rejected, saying so.
    pub(crate) fn unparsed(rejection: crate::response::Rejection) -> Self {
        let why = format!("the event does not parse: {}", rejection.detail);
        Self::rejected(rejection, Some(why))
    }

    /// Not applied, for our own reason, before it parsed.
    pub(crate) fn failed(error: String) -> Self {
        Self {
            event_id: None,
            event_type: None,
            delivery_id: None,
            disposition: Disposition::Error,
            error: Some(error),
            waits_for_database: false,
        }
    }

    /// A verified handshake, answered with the provider's own body.
    pub(crate) fn handshake(answer: crate::response::Handshake) -> Self {
        Self {
            event_id: None,
            event_type: None,
            delivery_id: None,
            disposition: Disposition::Handshake(answer),
            error: None,
            waits_for_database: false,
        }
    }

    /// A parsed event failed by a fault point's `error` ([`crate::fault`]).
    pub(crate) fn injected<E>(
        parsed: crate::provider::Parsed<E>,
        injected: crate::fault::Injected,
    ) -> Self {
        Self {
            error: Some(injected.to_string()),
            ..Self::of(parsed, Disposition::Error)
        }
    }

    /// This outcome once the `answer` fault point is passed: its `error` stands for an answer
    /// that failed after the delivery settled.
    pub(crate) async fn at_answer(self) -> Self {
        match crate::fault::hit(crate::fault::Point::Answer).await {
            Ok(()) => self,
            Err(injected) => Self {
                disposition: Disposition::Error,
                error: Some(injected.to_string()),
                ..self
            },
        }
    }

    /// A parsed event's outcome, named by its id, type and delivery id.
    pub(crate) fn of<E>(parsed: crate::provider::Parsed<E>, disposition: Disposition) -> Self {
        Self {
            event_id: Some(parsed.event_id),
            event_type: Some(parsed.event_type),
            delivery_id: parsed.delivery_id,
            disposition,
            error: None,
            waits_for_database: false,
        }
    }
}

/// How the event arrived, with what the line says of that.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Via<'a> {
    /// A webhook through API Gateway: a `delivery` line with the answer's status, and the
    /// `Deliveries` and `LatencyMs` metrics.
    Webhook {
        /// API Gateway's request id, as in its access log.
        request_id: Option<&'a str>,
    },
    /// A record of the spill queue: a `drained` line with the `Drained` metric.
    Spill {
        /// SQS's id of the message.
        sqs_message_id: &'a str,
        /// How many times SQS has handed it out.
        receive_count: u64,
        /// How long since the delivery first arrived, once the record was read.
        queued_seconds: Option<u64>,
    },
    /// A record of the event queue, an event of the provider's partner event source through
    /// EventBridge: a `bridged` line.
    EventBridge {
        /// SQS's id of the message.
        sqs_message_id: &'a str,
        /// How many times SQS has handed it out.
        receive_count: u64,
        /// EventBridge's id of the event, once its envelope opened.
        eventbridge_id: Option<&'a str>,
    },
    /// An event read from the sender's own API (a recover function): a `recovered` line.
    #[cfg(feature = "jobs")]
    SenderApi,
}

impl Via<'_> {
    /// The line's message.
    fn message(&self) -> &'static str {
        match self {
            Via::Webhook { .. } => "delivery",
            Via::Spill { .. } => "drained",
            Via::EventBridge { .. } => "bridged",
            #[cfg(feature = "jobs")]
            Via::SenderApi => "recovered",
        }
    }

    /// The line's level for `outcome`: ERROR for our own failure (a refused webhook is the
    /// sender's; an event that arrived any other way and was not applied will come back, or
    /// is left for an operator), WARN for a queued event that waits for the database, which
    /// is what the queue is for; INFO otherwise.
    fn level(&self, outcome: &Outcome) -> Level {
        let failed = match self {
            Via::Webhook { .. } => matches!(outcome.disposition, Disposition::Error),
            _ => !outcome.disposition.applied(),
        };
        let queued = matches!(self, Via::Spill { .. } | Via::EventBridge { .. });
        match (failed, queued && outcome.waits_for_database) {
            (false, _) => Level::Info,
            (true, true) => Level::Warn,
            (true, false) => Level::Error,
        }
    }
}

/// What a line's way in writes into it: its own ids, the answer, and its metric.
struct ViaFields<'v, 'o> {
    via: Via<'v>,
    outcome: &'o Outcome,
    provider: &'static str,
    latency_ms: f64,
}

impl crate::log::Fields for ViaFields<'_, '_> {
    fn entries<M: crate::log::SerializeMap>(&self, map: &mut M) -> Result<(), M::Error> {
        let disposition = self.outcome.disposition.name();
        match self.via {
            Via::Webhook { request_id } => {
                if let Some(id) = request_id {
                    map.serialize_entry("request_id", id)?;
                }
                let status = self.outcome.disposition.status().as_u16();
                map.serialize_entry("status", &status)?;
                if let Disposition::Rejected(r) = &self.outcome.disposition {
                    map.serialize_entry("problem", r.problem.slug())?;
                }
                metrics::Delivery::new(self.provider, disposition, self.latency_ms).entries(map)
            }
            Via::Spill {
                sqs_message_id,
                receive_count,
                queued_seconds,
            } => {
                map.serialize_entry("sqs_message_id", sqs_message_id)?;
                map.serialize_entry("receive_count", &receive_count)?;
                if let Some(queued) = queued_seconds {
                    map.serialize_entry("queued_seconds", &queued)?;
                }
                metrics::Drained::new(self.provider, disposition).entries(map)
            }
            Via::EventBridge {
                sqs_message_id,
                receive_count,
                eventbridge_id,
            } => {
                map.serialize_entry("sqs_message_id", sqs_message_id)?;
                if let Some(id) = eventbridge_id {
                    map.serialize_entry("eventbridge_id", id)?;
                }
                map.serialize_entry("receive_count", &receive_count)
            }
            #[cfg(feature = "jobs")]
            Via::SenderApi => Ok(()),
        }
    }
}

impl<P: Provider> Receiver<P> {
    /// Logs an event's one line, as its way in names it ([`Via`]): `delivery`, `drained`,
    /// `bridged` or `recovered`.
    pub(crate) fn log_outcome(&self, via: Via<'_>, outcome: &Outcome, latency_ms: f64) {
        let line = crate::log::fields! {
            provider: P::NAME,
            event_id: outcome.event_id.as_ref().map(EventId::as_str),
            event_type: outcome.event_type.as_deref(),
            delivery_id: outcome.delivery_id.as_ref().map(EventId::as_str),
            disposition: outcome.disposition.name(),
            error: outcome.error.as_deref(),
            latency_ms: latency_ms;
            ..ViaFields { via, outcome, provider: P::NAME, latency_ms }
        };
        self.log.write(via.level(outcome), via.message(), line);
    }
}
