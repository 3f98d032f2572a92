//! The `slack-webhook` Lambda function: configuration from the environment, then claimonce's
//! receiver loop.

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    // The secret variable and the provider's name come from the registry entry in Cargo.toml.
    claimonce::run_from_env(slack_webhook::Slack::from_secret).await
}
