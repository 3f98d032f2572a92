//! The `stripe-webhook` Lambda function: configuration from the environment, then the shared
//! receiver loop.

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_http::Error> {
    claimonce::run_from_env("STRIPE_WEBHOOK_SECRET", stripe_webhook::Stripe::from_secret).await
}
