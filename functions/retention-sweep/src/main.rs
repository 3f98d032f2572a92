//! The `retention-sweep` Lambda function: configuration from the environment, then one sweep
//! per invocation (an EventBridge schedule, or a manual `aws lambda invoke`).

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    claimonce_retention_sweep::run_from_env().await
}
