//! What the Shopify suites share: the secret, a delivery signed by the scheme's own signer, and
//! an order body.

use claimonce::Receiver;
use claimonce::prelude::Provider;
use claimonce::prelude::Sign;
use claimonce::verify::body_hmac::{BodyHmac, Encoding};
use claimonce_tests::apigw::{outcome, post_to};
use serde_json::{Value, json};
use shopify_webhook::Shopify;

/// The client secret the suites' receivers accept.
pub const SECRET: &str = "test-shopify-client-secret";

/// A Shopify provider accepting [`SECRET`].
pub fn shopify() -> Shopify {
    Shopify::new(&[SECRET]).expect("secret")
}

/// Shopify's verifier for [`SECRET`].
pub fn verifier() -> BodyHmac {
    BodyHmac::new("x-shopify-hmac-sha256", "", Encoding::Base64, &[SECRET]).expect("secret")
}

/// Delivers `body` under `topic` and webhook id `webhook`, signed by the scheme's own signer;
/// answers (status, disposition or problem slug).
pub async fn deliver<P: Provider>(
    receiver: &Receiver<P>,
    topic: &str,
    webhook: &str,
    body: &[u8],
) -> (u16, String) {
    let signed = verifier().sign(body, 0, "");
    let mut headers: Vec<(&str, &str)> = signed
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    headers.extend([
        ("x-shopify-topic", topic),
        ("x-shopify-webhook-id", webhook),
        ("x-shopify-shop-domain", "jsmith.myshopify.com"),
        ("content-type", "application/json"),
    ]);
    outcome(&post_to(receiver, "/webhooks/shopify", &headers, body).await)
}

/// An order body as Shopify sends one.
pub fn order(id: i64, updated_at: &str, cancelled: bool, status: &str) -> Vec<u8> {
    json!({
        "id": id,
        "email": "jon@example.com",
        "updated_at": updated_at,
        "cancelled_at": if cancelled { Value::from(updated_at) } else { Value::Null },
        "financial_status": status,
        "total_price": "199.65",
        "currency": "USD",
        "line_items": [{"id": 866550311766439020_i64, "quantity": 1}],
    })
    .to_string()
    .into_bytes()
}
