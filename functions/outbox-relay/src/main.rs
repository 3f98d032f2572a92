//! The `outbox-relay` Lambda function: configuration from the environment, then one relay run
//! per invocation (an EventBridge schedule, every minute).

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    claimonce_outbox_relay::run_from_env().await
}
