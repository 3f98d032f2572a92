//! Signing as the senders sign, and event bodies shaped as they send them.

use std::time::{SystemTime, UNIX_EPOCH};

use claimonce::verify::timestamp_v1;
use serde_json::{Value, json};

/// The Stripe secret the tests configure.
pub const STRIPE_SECRET: &str = "whsec_test_secret";

/// Unix seconds now.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs()
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
