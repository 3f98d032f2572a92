//! The `shopify-webhook` Lambda function: configuration from the environment, then the shared
//! receiver loop.

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_http::Error> {
    claimonce::run_from_env(
        "SHOPIFY_WEBHOOK_SECRET",
        shopify_webhook::Shopify::from_secret,
    )
    .await
}
