//! The `resend-recover` Lambda function: configuration from the environment, then one
//! recovery run per invocation (an EventBridge schedule, or an operator's invoke).

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    resend_recover::run_from_env().await
}
