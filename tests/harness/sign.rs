//! Signing as the senders sign, event bodies shaped as they send them, and the providers
//! configured with the suite's secrets.

use std::time::{SystemTime, UNIX_EPOCH};

use claimonce::verify::timestamp_v1;
use resend_webhook::Resend;
use serde_json::{Value, json};
use stripe_webhook::Stripe;

/// The Stripe secret the tests configure.
pub const STRIPE_SECRET: &str = "whsec_test_secret";

/// The Stripe provider as the tests configure it: [`STRIPE_SECRET`], 300 s tolerance.
pub fn stripe() -> Stripe {
    Stripe::new(&[STRIPE_SECRET], 300).expect("secret")
}

/// The Resend provider as the tests configure it: [`RESEND_SECRET`], 300 s tolerance.
pub fn resend() -> Resend {
    Resend::new(&[RESEND_SECRET], 300).expect("secret")
}

/// Unix seconds now.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs()
}

/// `seconds_ago` before now as RFC 3339 in UTC with milliseconds, as Stripe's v2 API writes a
/// time (`2026-12-02T10:00:00.000Z`): a fixture a test compares with the clock is made from it.
pub fn rfc3339_ago(seconds_ago: u64) -> String {
    let at = i64::try_from(now() - seconds_ago).expect("seconds fit");
    let text = claimonce::timestamp::rfc3339_from_unix(at).expect("a year from 1 to 9999");
    format!("{}.000Z", text.trim_end_matches('Z'))
}

/// A `Stripe-Signature` header value for `body` at `t` with `secret`.
pub fn stripe_header(secret: &str, t: u64, body: &[u8]) -> String {
    format!("t={t},v1={}", timestamp_v1::sign(secret, t, body))
}

/// A Stripe event body in the snapshot format.
pub fn stripe_event(id: &str, event_type: &str, created: i64, object: Value) -> Vec<u8> {
    serde_json::to_vec_pretty(&json!({
        "id": id,
        "object": "event",
        "api_version": "2024-06-20",
        "created": created,
        "livemode": false,
        "pending_webhooks": 1,
        "request": { "id": null, "idempotency_key": null },
        "type": event_type,
        "data": { "object": object }
    }))
    .expect("serialisable")
}

/// An `invoice.paid` event crediting `customer` with `amount` cents.
pub fn invoice_paid(id: &str, customer: &str, amount: i64) -> Vec<u8> {
    stripe_event(
        id,
        "invoice.paid",
        1_700_000_000,
        json!({
            "id": format!("in_{id}"),
            "object": "invoice",
            "customer": customer,
            "customer_email": format!("{customer}@example.com"),
            "amount_paid": amount,
            "amount_due": amount,
            "currency": "usd",
            "status": "paid"
        }),
    )
}

/// A `checkout.session.completed` event for `customer`.
pub fn checkout_completed(id: &str, customer: &str, email: &str) -> Vec<u8> {
    stripe_event(
        id,
        "checkout.session.completed",
        1_700_000_000,
        json!({
            "id": format!("cs_{id}"),
            "object": "checkout.session",
            "customer": customer,
            "customer_details": { "email": email, "name": "Jenny Rosen", "phone": null },
            "mode": "subscription",
            "payment_status": "paid",
            "status": "complete"
        }),
    )
}

/// A `customer.subscription.*` event.
pub fn subscription(id: &str, kind: &str, sub: &str, status: &str, created: i64) -> Vec<u8> {
    stripe_event(
        id,
        &format!("customer.subscription.{kind}"),
        created,
        json!({
            "id": sub,
            "object": "subscription",
            "customer": "cus_sub",
            "status": status,
            "items": { "object": "list", "data": [] }
        }),
    )
}

/// The Resend secret the tests configure (the Standard Webhooks specification's example).
pub const RESEND_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// Standard Webhooks headers (`svix-*` or `webhook-*`) signing `body` as message `id` at `t`.
pub fn svix_headers(
    prefix: &str,
    secret: &str,
    id: &str,
    t: u64,
    body: &[u8],
) -> Vec<(String, String)> {
    let signature =
        claimonce::verify::standard_webhooks::sign(secret, id, t, body).expect("valid secret");
    vec![
        (format!("{prefix}-id"), id.to_owned()),
        (format!("{prefix}-timestamp"), t.to_string()),
        (format!("{prefix}-signature"), signature),
    ]
}

/// A Resend `email.*` body as Resend documents it.
pub fn resend_email(kind: &str, email_id: &str, to: &[&str]) -> Vec<u8> {
    let mut data = json!({
        "broadcast_id": null,
        "created_at": "2026-11-29T10:00:00.000000+00:00",
        "email_id": email_id,
        "from": "Acme <onboarding@resend.dev>",
        "to": to,
        "subject": "Welcome to Acme",
        "tags": { "category": "welcome" }
    });
    if kind == "bounced" {
        data["bounce"] = json!({
            "message": "The recipient's mailbox does not exist.",
            "subType": "General",
            "type": "Permanent"
        });
    }
    serde_json::to_vec(&json!({
        "type": format!("email.{kind}"),
        "created_at": "2026-11-29T10:00:01.126Z",
        "data": data
    }))
    .expect("serialisable")
}
