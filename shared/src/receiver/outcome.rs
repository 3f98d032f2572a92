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
    SenderApi,
}

impl<P: Provider> Receiver<P> {
    /// Logs an event's one line: `delivery` (at ERROR only for our own failure: a refused
    /// webhook is the sender's), `drained`, `bridged` or `recovered` (at ERROR whenever it was
    /// not applied: it will come back, or is left for an operator; at WARN for a queued event
    /// that waits for the database, which is what the queue is for).
    pub(crate) fn log_outcome(&self, via: Via<'_>, outcome: &Outcome, latency_ms: f64) {
        let disposition = outcome.disposition.name();
        let (mut request_id, mut status, mut problem) = (None, None, None);
        let (mut sqs_message_id, mut receive_count) = (None, None);
        let (mut queued_seconds, mut eventbridge_id) = (None, None);
        let (mut delivery, mut drained) = (None, None);
        let (message, level) = match via {
            Via::Webhook { request_id: id } => {
                request_id = id;
                status = Some(outcome.disposition.status().as_u16());
                if let Disposition::Rejected(r) = &outcome.disposition {
                    problem = Some(r.problem.slug());
                }
                delivery = Some(metrics::Delivery::new(P::NAME, disposition, latency_ms));
                let error = matches!(outcome.disposition, Disposition::Error);
                ("delivery", error)
            }
            Via::Spill {
                sqs_message_id: id,
                receive_count: count,
                queued_seconds: queued,
            } => {
                (sqs_message_id, receive_count, queued_seconds) = (Some(id), Some(count), queued);
                drained = Some(metrics::Drained::new(P::NAME, disposition));
                ("drained", !outcome.disposition.applied())
            }
            Via::EventBridge {
                sqs_message_id: id,
                receive_count: count,
                eventbridge_id: bridged,
            } => {
                (sqs_message_id, receive_count, eventbridge_id) = (Some(id), Some(count), bridged);
                ("bridged", !outcome.disposition.applied())
            }
            Via::SenderApi => ("recovered", !outcome.disposition.applied()),
        };
        let queued = matches!(via, Via::Spill { .. } | Via::EventBridge { .. });
        let level = match (level, queued && outcome.waits_for_database) {
            (false, _) => Level::Info,
            (true, true) => Level::Warn,
            (true, false) => Level::Error,
        };
        let line = crate::fields! {
            provider: P::NAME,
            request_id: request_id,
            sqs_message_id: sqs_message_id,
            eventbridge_id: eventbridge_id,
            event_id: outcome.event_id.as_ref().map(EventId::as_str),
            event_type: outcome.event_type.as_deref(),
            delivery_id: outcome.delivery_id.as_ref().map(EventId::as_str),
            disposition: disposition,
            status: status,
            problem: problem,
            receive_count: receive_count,
            queued_seconds: queued_seconds,
            error: outcome.error.as_deref(),
            latency_ms: latency_ms;
            ..(delivery, drained)
        };
        self.log.write(level, message, line);
    }
}
