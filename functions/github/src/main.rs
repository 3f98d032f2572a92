//! The `github-webhook` Lambda function: configuration from the environment, then the shared
//! receiver loop.

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    // The secret variable and the provider's name come from the registry entry in Cargo.toml.
    claimonce::run_from_env(github_webhook::GitHub::from_secret).await
}
