//! moto's server, a real emulator of AWS's Secrets Manager (and SQS) from PyPI, started once
//! per test process on a free loopback port and stopped with it, as the private PostgreSQL
//! is. Its pinned version comes from `scripts/test-tools.txt`, installed by `scripts/test-tools`
//! into a private virtualenv the first time; the functions reach it through the SDK's standard
//! endpoint override (`AWS_ENDPOINT_URL_SECRETS_MANAGER`).

use tokio::sync::OnceCell;

/// The running server, stopped by `claimonce_local::postgres::supervise_as_self`'s watchdog
/// when this process ends (however it ends), as the private PostgreSQL is.
#[derive(Debug)]
pub struct Moto {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
}

static MOTO: OnceCell<Moto> = OnceCell::const_new();

/// The server, started on first use.
pub async fn moto() -> &'static Moto {
    MOTO.get_or_init(|| async {
        Moto {
            url: claimonce_local::moto::start().await.expect("moto's server"),
        }
    })
    .await
}

impl Moto {
    /// An SDK configuration for the server (any credentials: moto checks none).
    pub async fn aws_config(&self) -> aws_config::SdkConfig {
        crate::recorder::aws_config_at(&self.url).await
    }
}
