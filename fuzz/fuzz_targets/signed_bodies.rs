//! Arbitrary bodies behind a VALID signature: each input is signed with the receiver's own
//! secret at the current time, then admitted by every receiver. This fuzzes the Stripe,
//! Resend and GitHub parsers, which only ever see signed bodies, and the effects they queue.
//!
//! A signed body may be any event or none, so `Ok` and `Err` are both fine; but the signature
//! must always pass (the only refusal left is `InvalidPayload`, a 400), an accepted event has
//! a usable ledger key, and an effect queues statements exactly when it says it processed.
#![no_main]

use claimonce::verify::{body_hmac, standard_webhooks, timestamp_v1};
use claimonce::pipeline::statement;
use claimonce::{Admitted, Effect, Parsed, Problem, Rejection};
use claimonce_fuzz::{GITHUB_SECRET, RECEIVERS, RESEND_SECRET, STRIPE_SECRET, unix_now};
use lambda_http::http::Method;
use lambda_http::{Body, Request};
use libfuzzer_sys::fuzz_target;

const MESSAGE_ID: &str = "msg_fuzzSignedBody0000000001";

fn request(headers: &[(&str, String)], body: &[u8]) -> Request {
    let mut builder = lambda_http::http::Request::builder()
        .method(Method::POST)
        .uri("https://example.execute-api.us-east-1.amazonaws.com/webhooks/fuzz");
    for (name, value) in headers {
        builder = builder.header(*name, value);
    }
    builder.body(Body::Binary(body.to_vec())).expect("request")
}

fn check<E>(
    admitted: Result<Admitted<E>, Rejection>,
    effect: impl Fn(&Parsed<E>) -> Option<Effect>,
) {
    match admitted {
        Err(rejection) => {
            assert_eq!(rejection.problem, Problem::InvalidPayload, "{rejection:?}");
            assert_eq!(rejection.problem.status(), 400);
        }
        Ok(Admitted { parsed, .. }) => {
            let id = parsed.event_id.as_str();
            assert!(!id.is_empty() && id.len() <= 255 && !id.contains('\0'));
            // The delivery statement composes for whatever effect the event has, and calls
            // that effect under the claim.
            let effect = effect(&parsed);
            let sql = statement(effect.as_ref());
            if let Some(function) = effect.as_ref().and_then(Effect::function) {
                assert!(sql.contains(&format!("CASE WHEN c.won THEN {function}(")));
            }
        }
    }
}

fuzz_target!(|body: &[u8]| {
    let receivers = &*RECEIVERS;
    let now = unix_now();

    let stripe_signature = format!(
        "t={now},v1={}",
        timestamp_v1::sign(STRIPE_SECRET, now, body)
    );
    let stripe = request(&[("stripe-signature", stripe_signature)], body);
    check(receivers.stripe.admit(&stripe, now), |parsed| {
        stripe_webhook::effect(parsed.event_id.as_str(), &parsed.event)
    });

    let signature = standard_webhooks::sign(RESEND_SECRET, MESSAGE_ID, now, body).expect("secret");
    for prefix in ["svix", "webhook"] {
        let resend = request(
            &[
                (&format!("{prefix}-id"), MESSAGE_ID.to_owned()),
                (&format!("{prefix}-timestamp"), now.to_string()),
                (&format!("{prefix}-signature"), signature.clone()),
            ],
            body,
        );
        let admitted = receivers.resend.admit(&resend, now);
        if let Ok(a) = &admitted {
            assert_eq!(a.parsed.event_id.as_str(), MESSAGE_ID);
        }
        check(admitted, |parsed| {
            resend_webhook::effect(parsed.event_id.as_str(), &parsed.event_type, &parsed.event)
        });
    }

    // GitHub: the event name is an unsigned header; each one reads the body its own way.
    let signature = body_hmac::sign(GITHUB_SECRET, body);
    for event in ["installation", "installation_repositories", "ping", "push"] {
        let github = request(
            &[
                ("x-hub-signature-256", signature.clone()),
                ("x-github-event", event.to_owned()),
                ("x-github-delivery", "fuzz-delivery".to_owned()),
            ],
            body,
        );
        check(receivers.github.admit(&github, now), |parsed| {
            github_webhook::effect(&parsed.event)
        });
    }
    receivers.take_log();
});
