//! The webhook way in: a request the boundary read, admitted by its signature, completed,
//! settled (or kept on the spill queue when the database cannot take it), and logged as its
//! `delivery` line; the boundary answers its disposition.

use super::*;
use crate::fault::{self, Point};

/// The webhook way in: an API Gateway request, proven by its signature. On the database
/// unavailable it keeps the delivery on its spill queue (200 `queued`), when it has one. Its
/// line is `delivery`.
pub(crate) struct Webhook<'w, P> {
    pub(crate) receiver: &'w Receiver<P>,
    pub(crate) spill: Option<&'w crate::spill::Spill>,
}

impl<P: Provider> Webhook<'_, P> {
    /// One webhook, admitted, completed, settled and logged: the disposition to answer.
    /// `request_id` is API Gateway's id for it, which its line carries. Never panics and
    /// never fails.
    pub(crate) async fn deliver_request<B: AsRef<[u8]>>(
        &self,
        request: &http::Request<B>,
        request_id: Option<&str>,
    ) -> Disposition {
        let started = Instant::now();
        let receiver = self.receiver;
        let noting = self.spill.is_some();
        let admitted = receiver
            .with_fresh_secrets(|| receiver.admit_noting(request, unix_now(), noting))
            .await;
        let outcome = match admitted {
            Err(r) => Outcome::rejected(r, None),
            Ok(Admission::Handshake(answer)) => Outcome::handshake(answer),
            Ok(Admission::Delivery(admitted)) => {
                let fingerprint = Some(admitted.payload_sha256);
                let delivered = receiver.deliver(admitted.parsed, fingerprint, None).await;
                let body = request.body().as_ref();
                self.keep_if_unavailable(delivered, body, &admitted.read_headers)
                    .await
            }
        };
        let outcome = outcome.at_answer().await;
        receiver.log_delivery(started, request_id, outcome)
    }

    /// A delivered webhook's outcome; one the database could not take is put on the spill
    /// queue when there is one (`queued`), else an error; the error text says which.
    async fn keep_if_unavailable(
        &self,
        delivered: Delivered<P::Event>,
        body: &[u8],
        read_headers: &[(String, String)],
    ) -> Outcome {
        let (parsed, error, reason) = match delivered {
            Delivered::Settled(outcome) => return outcome,
            Delivered::Unavailable {
                parsed,
                error,
                reason,
            } => (parsed, error, reason),
        };
        let kept = match self.spill {
            None => Err(error),
            Some(spill) => match fault::hit(Point::SpillSend).await {
                Err(injected) => Err(format!("{error}; not queued: {injected}")),
                Ok(()) => {
                    let spilled = crate::spill::Spilled {
                        provider: P::NAME,
                        event_id: parsed.event_id.as_str(),
                        body,
                        headers: read_headers,
                        received_at: unix_now(),
                    };
                    match crate::future::rare(spill.put(&spilled)).await {
                        Ok(()) => Ok(format!("{error}; queued ({reason})")),
                        Err(why) => Err(format!("{error}; not queued: {why}")),
                    }
                }
            },
        };
        let (disposition, error) = match kept {
            Ok(why) => (Disposition::Queued, why),
            Err(why) => (Disposition::Error, why),
        };
        Outcome {
            error: Some(error),
            ..Outcome::of(parsed, disposition)
        }
    }
}

impl<P: Provider> Receiver<P> {
    /// A request the boundary refused before it could be read, logged as its `delivery`
    /// line: the disposition to answer.
    pub(crate) fn unreadable(&self, started: Instant, rejection: Rejection) -> Disposition {
        self.log_delivery(started, None, Outcome::rejected(rejection, None))
    }

    /// Everything before the database: method, size, signature, parsing. Pure but for the
    /// clock; a request it refuses never reaches the database.
    pub fn admit<B: AsRef<[u8]>>(
        &self,
        request: &http::Request<B>,
        now: u64,
    ) -> Result<Admission<P::Event>, Rejection> {
        self.admit_noting(request, now, false)
    }

    /// [`Receiver::admit`], noting with `noting` the headers the scheme and the parser read:
    /// what a spilled copy of the delivery carries.
    fn admit_noting<B: AsRef<[u8]>>(
        &self,
        request: &http::Request<B>,
        now: u64,
        noting: bool,
    ) -> Result<Admission<P::Event>, Rejection> {
        if request.method() != http::Method::POST {
            return Err(Rejection::new(
                Problem::MethodNotAllowed,
                "webhooks are delivered with POST",
            ));
        }
        let body = request.body().as_ref();
        if body.len() > self.limits.max_body_bytes {
            return Err(Rejection::new(
                Problem::PayloadTooLarge,
                "the body is larger than this receiver accepts",
            ));
        }
        // The headers the scheme and the parser read are kept only for a spill queue's
        // message, which the drain verifies and parses again.
        let read = std::cell::RefCell::new(Vec::new());
        let provider = self.provider();
        let unsigned = match (noting, provider.verifier()) {
            (true, Some(verifier)) => {
                let signature = verifier.signature_headers().iter().filter_map(|name| {
                    let value = crate::verify::one_header(request.headers(), name).ok()??;
                    Some(((*name).to_owned(), value.to_owned()))
                });
                read.borrow_mut().extend(signature);
                Unsigned::noting(request.headers(), &read)
            }
            _ => Unsigned::new(request.headers()),
        };
        let admission = admit::admit_bytes(
            &*provider,
            body,
            request.headers(),
            &unsigned,
            admit::Proof::Webhook { now },
        )?;
        Ok(match admission {
            Admission::Delivery(admitted) => Admission::Delivery(Admitted {
                read_headers: read.into_inner(),
                ..admitted
            }),
            handshake => handshake,
        })
    }

    /// Logs the delivery's one line (and, at DEBUG, why it was rejected): its disposition.
    fn log_delivery(
        &self,
        started: Instant,
        request_id: Option<&str>,
        delivery: Outcome,
    ) -> Disposition {
        let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
        if self.log.enabled(Level::Debug)
            && let Disposition::Rejected(r) = &delivery.disposition
        {
            // Why, beyond the problem's slug: our own words, never request data.
            self.log.write(
                Level::Debug,
                "rejected",
                crate::log::fields! { problem: r.problem.slug(), detail: r.detail },
            );
        }
        self.log_outcome(Via::Webhook { request_id }, &delivery, latency_ms);
        delivery.disposition
    }
}
