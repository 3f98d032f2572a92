//! moto's server, a real emulator of AWS's Secrets Manager (and SQS) from PyPI, started once
//! per test process on a free loopback port and stopped with it, as the private PostgreSQL
//! is. Its pinned version comes from `scripts/test-tools.txt`, installed by `scripts/test-tools`
//! into a private virtualenv the first time; the functions reach it through the SDK's standard
//! endpoint override (`AWS_ENDPOINT_URL_SECRETS_MANAGER`).

use std::path::PathBuf;
use std::time::Duration;

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
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        let tools = tokio::process::Command::new(root.join("scripts/test-tools"))
            .output()
            .await
            .expect("scripts/test-tools runs");
        assert!(
            tools.status.success(),
            "scripts/test-tools: {}",
            String::from_utf8_lossy(&tools.stderr)
        );
        let bin = PathBuf::from(String::from_utf8_lossy(&tools.stdout).trim());
        let port = claimonce_local::postgres::free_loopback_port().expect("a free port");
        let log = std::env::temp_dir().join(format!("claimonce-moto-{}.log", std::process::id()));
        claimonce_local::postgres::supervise_as_self(
            &bin.join("moto_server"),
            &[
                "-H".into(),
                "127.0.0.1".into(),
                "-p".into(),
                port.to_string(),
            ],
            &log,
        )
        .expect("start moto_server");
        // Up once it accepts a connection; bounded, so a server that never starts fails here.
        let up = tokio::time::timeout(Duration::from_secs(60), async {
            while tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_err()
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await;
        assert!(
            up.is_ok(),
            "moto_server did not listen on {port}; see {}",
            log.display()
        );
        Moto {
            url: format!("http://127.0.0.1:{port}"),
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
