//! This deployment's outbox relay (every minute): claimonce's, a binary of this workspace
//! because `sam build` (cargo-lambda) builds only a workspace's own binaries.

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    outbox_relay::run_from_env().await
}
