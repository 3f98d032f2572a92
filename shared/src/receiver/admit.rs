//! One admission for every way in: the bytes a delivery arrived with, proven by what vouches
//! for them ([`Proof`]), then the provider's handshake or parser on what was proven. A
//! webhook, a drained spill message, an EventBridge record and an event read from the sender's
//! API differ only in their proof.

use super::*;

/// What vouches for a delivery's bytes.
#[derive(Debug, Clone, Copy)]
pub(super) enum Proof {
    /// A webhook: its signature, within the scheme's tolerance of `now`.
    Webhook { now: u64 },
    /// A spilled delivery: its signature checked again without the tolerance, but no older
    /// than any spilled message can be ([`crate::spill::SPILLED_SIGNATURE_MAX_AGE`]).
    Spilled,
    /// Where it came from, with no signature to check: an EventBridge record SQS vouched for
    /// ([`crate::sqs::receipt`]), or an event read from the sender's API over verified TLS.
    Origin,
}

/// `body` and `headers` proven by `proof`, then answered by `provider`'s handshake (a
/// webhook's only) or parsed: the event with its body's SHA-256. `unsigned` is how the parser
/// reads the headers (noting them, for a spill queue's copy, or not).
pub(super) fn admit_bytes<P: Provider>(
    provider: &P,
    body: &[u8],
    headers: &http::HeaderMap,
    unsigned: &Unsigned<'_>,
    proof: Proof,
) -> Result<Admission<P::Event>, Rejection> {
    let verified = match proof {
        Proof::Webhook { now } => provider
            .verifier()
            .ok_or_else(takes_no_webhooks)?
            .verify(headers, body, now)?,
        Proof::Spilled => {
            let verified = provider
                .verifier()
                .ok_or_else(takes_no_webhooks)?
                .authenticate(headers, body)?;
            if verified.signed_at.is_some_and(|at| {
                unix_now().saturating_sub(at) > crate::spill::SPILLED_SIGNATURE_MAX_AGE
            }) {
                return Err(Rejection::new(
                    Problem::StaleTimestamp,
                    "the signature is older than any spilled message can be (the spill \
                     queues' 14 days and the largest tolerance)",
                ));
            }
            verified
        }
        Proof::Origin => crate::verify::Verified::default(),
    };
    let signed = Signed::new(body, verified);
    if let Proof::Webhook { .. } = proof
        && let Some(answer) = provider.handshake(&signed, unsigned)
    {
        return answer.map(Admission::Handshake);
    }
    let parsed = provider.parse(&signed, unsigned)?;
    Ok(Admission::Delivery(Admitted {
        parsed,
        payload_sha256: *signed.sha256(),
        read_headers: Vec::new(),
    }))
}

impl<P: Provider> Receiver<P> {
    /// [`admit_bytes`] for a way in that answers no handshake: the event and its
    /// body's SHA-256.
    pub(super) fn admit_event(
        &self,
        body: &[u8],
        headers: &http::HeaderMap,
        proof: Proof,
    ) -> Result<(Parsed<P::Event>, [u8; 32]), Rejection> {
        let provider = self.provider();
        match admit_bytes(&*provider, body, headers, &Unsigned::new(headers), proof)? {
            Admission::Delivery(admitted) => Ok((admitted.parsed, admitted.payload_sha256)),
            Admission::Handshake(_) => Err(Rejection::new(
                Problem::InvalidPayload,
                "a handshake is answered only to a webhook",
            )),
        }
    }
}
