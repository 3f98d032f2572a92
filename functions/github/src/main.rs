//! The `github-webhook` Lambda function: configuration from the environment, then the shared
//! receiver loop.

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_http::Error> {
    claimonce::run_from_env(github_webhook::GitHub::from_env).await
}
