//! The `migrate` Lambda function: applies `migrations/` to the database, for a CloudFormation
//! custom resource on every deploy or for a one-shot `aws lambda invoke`.

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    claimonce_migrate::run_from_env().await
}
