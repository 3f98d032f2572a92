//! Rendered by `scripts/template` from the provider registry: every provider crate, with
//! the constructor its `main.rs` hands to `claimonce::run_from_env`. Do not edit; CI fails
//! when it is not what the registry renders.

/// Adds every registered provider to `builder`.
pub(crate) fn add_all(builder: &mut crate::Builder) {
    builder.add(github_webhook::GitHub::from_secret);
    builder.add(resend_webhook::Resend::from_secret);
    builder.add(shopify_webhook::Shopify::from_secret);
    builder.add(stripe_webhook::Stripe::from_secret);
}
