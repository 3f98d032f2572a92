//! A PostgreSQL server with TLS, its certificate issued by a throwaway test CA for the host
//! name `localhost` only, plus a second, unrelated CA to prove verification refuses it.

use std::path::{Path, PathBuf};
use std::process::Command;

use claimonce_local::postgres::{Options, Postgres};

/// The running TLS server and the files a client needs.
#[derive(Debug)]
pub struct TlsServer {
    /// The server (listening on 127.0.0.1, certificate for `localhost`).
    pub server: Postgres,
    /// The CA that issued the server's certificate.
    pub ca: PathBuf,
    /// A CA that did not.
    pub other_ca: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl is installed");
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn new_ca(dir: &Path, name: &str) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.crt"),
            "-days",
            "2",
            "-subj",
            &format!("/CN={name}"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    );
}

impl TlsServer {
    /// Generates the certificates and starts the server.
    pub fn start() -> Self {
        let dir = std::env::temp_dir().join(format!(
            "claimonce-tls-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        let certs = dir.join("certs");
        std::fs::create_dir_all(&certs).expect("cert dir");
        new_ca(&certs, "test-ca");
        new_ca(&certs, "other-ca");
        openssl(
            &certs,
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
                "-subj",
                "/CN=localhost",
            ],
        );
        std::fs::write(
            certs.join("server.ext"),
            "subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n",
        )
        .expect("ext file");
        openssl(
            &certs,
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "test-ca.crt",
                "-CAkey",
                "test-ca.key",
                "-CAcreateserial",
                "-out",
                "server.crt",
                "-days",
                "2",
                "-extfile",
                "server.ext",
            ],
        );
        let server_key = certs.join("server.key");
        let chmod = Command::new("chmod")
            .arg("600")
            .arg(&server_key)
            .status()
            .expect("chmod");
        assert!(chmod.success());
        let options = Options {
            settings: vec![
                ("ssl".into(), "on".into()),
                (
                    "ssl_cert_file".into(),
                    certs.join("server.crt").to_string_lossy().into_owned(),
                ),
                (
                    "ssl_key_file".into(),
                    server_key.to_string_lossy().into_owned(),
                ),
                ("fsync".into(), "off".into()),
            ],
            ..Options::default()
        };
        let server = Postgres::start(&dir, &options).expect("start TLS PostgreSQL");
        Self {
            server,
            ca: certs.join("test-ca.crt"),
            other_ca: certs.join("other-ca.crt"),
        }
    }

    /// A URL for `host` with `sslmode`.
    pub fn url(&self, host: &str, sslmode: Option<&str>) -> String {
        let mode = sslmode.map_or(String::new(), |m| format!("?sslmode={m}"));
        format!(
            "postgres://postgres@{host}:{}/postgres{mode}",
            self.server.port
        )
    }

    /// From now on, `user` must authenticate with its password (SCRAM) over TLS; every other
    /// login keeps the test server's trust. The rule goes first, so it wins.
    pub async fn require_password(&self, admin: &tokio_postgres::Client, user: &str) {
        let hba = self.server.dir.join("data").join("pg_hba.conf");
        let rules = std::fs::read_to_string(&hba).expect("pg_hba.conf");
        std::fs::write(
            &hba,
            format!("hostssl all {user} all scram-sha-256\nhost all {user} all reject\n{rules}"),
        )
        .expect("pg_hba.conf");
        admin
            .batch_execute("SELECT pg_reload_conf()")
            .await
            .expect("reload");
    }

    /// A plain superuser connection to its `postgres` database, for set-up and assertions.
    pub async fn superuser(&self) -> claimonce::db::Connection {
        claimonce::db::Settings::from_url(
            &self.url("127.0.0.1", Some("disable")),
            None,
            crate::db::test_timeouts(),
        )
        .expect("settings")
        .connect()
        .await
        .expect("connect")
    }

    /// Starts the server and applies the project's migrations; returns it with a plain
    /// superuser connection for set-up and assertions.
    pub async fn migrated() -> (Self, claimonce::db::Connection) {
        let tls = tokio::task::spawn_blocking(Self::start)
            .await
            .expect("start");
        let mut admin = tls.superuser().await;
        claimonce::migrate::apply(&mut admin, claimonce_local::migrations::ALL)
            .await
            .expect("migrate");
        (tls, admin)
    }
}
