//! This deployment's outbox relay (every minute): claimonce's, built from this workspace so
//! that `sam build` (cargo-lambda, which builds only a workspace's own binaries) can build it.

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    outbox_relay::run_from_env().await
}
