//! The Lambda boundary: an API Gateway event (HTTP API payload 2.0 or REST API 1.0) in, the
//! matching API Gateway response payload out; an SQS event from the spill queue or the event
//! queue (EventBridge's, [`Queues`]) in, a partial batch response out; and the runtime loop
//! that serves them. It reads the event, hands what it read to the receiver's way in for it,
//! and answers; the receiver never sees a Lambda type.
//!
//! The event is read by `event.rs` rather than by `lambda_http`'s own adapter because that
//! adapter panics on a body flagged `isBase64Encoded` that is not base64; a request that cannot
//! be read must be a 400 like any other bad request, not a crashed execution environment.

use std::time::Instant;

mod answer;
mod event;
pub(crate) mod from_env;
pub(crate) mod runtime;

pub use self::answer::{Answer, BatchResponse, Payload};
pub use self::event::MAX_HEADERS;
use self::event::{ApiRequestId, Format, Incoming, not_an_api_gateway_event, read};
use crate::provider::Provider;
use crate::receiver::{Queues, Receiver};
use crate::response::Rejection;

/// Handles one raw API Gateway event with `receiver` (which keeps nothing on a spill queue)
/// and returns the response payload for it. An SQS event is refused here (400), not drained:
/// only [`handle_invocation`] drains.
pub async fn handle_event<P: Provider>(receiver: &Receiver<P>, event: &str) -> Payload {
    respond(&Queues::default(), receiver, Instant::now(), read(event)).await
}

/// Handles one invocation of the function with `receiver` and its `queues`: an API Gateway
/// event is answered with its response payload; an SQS event (the provider's spill queue, or
/// its event queue of EventBridge events) is applied and answered with the messages to
/// receive again.
pub async fn handle_invocation<P: Provider>(
    receiver: &Receiver<P>,
    queues: &Queues,
    event: &str,
) -> Answer {
    answer(queues, receiver, Instant::now(), read(event), None).await
}

/// The answer to an invocation as read: a batch to its drain, a request to its webhook.
async fn answer<P: Provider>(
    queues: &Queues,
    receiver: &Receiver<P>,
    started: Instant,
    read: Result<Incoming, (Format, Rejection)>,
    deadline: Option<tokio::time::Instant>,
) -> Answer {
    match read {
        Ok(Incoming::Queued(records)) => {
            let again = queues.queued(receiver).drain(&records, deadline).await;
            Answer::Batch(BatchResponse::receive_again(again))
        }
        Ok(Incoming::UnreadableBatch(ids)) => {
            receiver.unreadable_batch(ids.len());
            Answer::Batch(BatchResponse::all_failed(&ids))
        }
        read => Answer::Http(respond(queues, receiver, started, read).await),
    }
}

/// The response payload to an event as read; an SQS event here is not an API Gateway event.
async fn respond<P: Provider>(
    queues: &Queues,
    receiver: &Receiver<P>,
    started: Instant,
    read: Result<Incoming, (Format, Rejection)>,
) -> Payload {
    match read {
        Ok(Incoming::Http(format, request)) => {
            let request_id = request.extensions().get::<ApiRequestId>();
            let request_id = request_id.map(|id| id.0.as_str());
            let webhook = queues.webhook(receiver);
            Payload::of(format, webhook.deliver_request(&request, request_id).await)
        }
        Ok(Incoming::Queued(_) | Incoming::UnreadableBatch(_)) => Payload::of(
            Format::V1,
            receiver.unreadable(started, not_an_api_gateway_event()),
        ),
        Err((format, rejection)) => Payload::of(format, receiver.unreadable(started, rejection)),
    }
}
