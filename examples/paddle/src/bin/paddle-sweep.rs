//! This deployment's retention sweep (daily): claimonce's, built from this workspace so that
//! `sam build` (cargo-lambda, which builds only a workspace's own binaries) can build it.

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    retention_sweep::run_from_env().await
}
