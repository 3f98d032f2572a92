//! The `github-webhook` Lambda function: configuration from the environment, then the shared
//! receiver loop.

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_http::Error> {
    claimonce::run_from_env("GITHUB_WEBHOOK_SECRET", github_webhook::GitHub::from_secret).await
}
