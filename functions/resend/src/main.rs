//! The `resend-webhook` Lambda function: configuration from the environment, then the shared
//! receiver loop.

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_http::Error> {
    claimonce::run_from_env("RESEND_WEBHOOK_SECRET", resend_webhook::Resend::from_secret).await
}
