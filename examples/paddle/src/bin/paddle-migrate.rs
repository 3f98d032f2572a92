//! This deployment's migrate function (a custom resource on every deploy, or a one-shot
//! invoke): claimonce's shared migrations, then Paddle's, in one version sequence.

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    claimonce_migrate::run_from_env_with(
        claimonce_migrations::SHARED,
        &[(
            <paddle_webhook::Paddle as claimonce::prelude::ProviderName>::NAME,
            paddle_webhook::MIGRATIONS,
        )],
    )
    .await
}
