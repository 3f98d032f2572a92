//! The `acme-webhook` Lambda function: configuration from the environment, then claimonce's
//! receiver loop.

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_http::Error> {
    claimonce::run_from_env("ACME_WEBHOOK_SECRET", acme_webhook::Acme::from_secret).await
}
