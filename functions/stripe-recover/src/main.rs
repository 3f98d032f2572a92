//! The `stripe-recover` Lambda function: configuration from the environment, then one
//! recovery run per invocation (an EventBridge schedule, or an operator's invoke with
//! `{"lookback_hours": N}`).

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    stripe_recover::run_from_env().await
}
