//! The database connection: settings from the environment, verified TLS through rustls, one
//! connection per execution environment that is reused and re-made when found closed, and a
//! bound on every wait.

use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use tokio::sync::Mutex;
use tokio_postgres::config::SslMode;
use tokio_postgres::{Client, Config, NoTls};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::auth::{AuthError, IamTokens, fetch_secret};
use crate::config::{self, ConfigError};
use crate::pipeline::{self, Applied, Cause, Claim, Finished, Transaction};

/// The bounds on database waits. All are well below the function timeout, so a delivery that
/// cannot finish answers 500 in seconds and the sender's retry heals it.
#[derive(Debug, Clone)]
pub struct Timeouts {
    /// Establishing a connection (TCP, TLS and authentication together).
    pub connect: Duration,
    /// The whole transaction of one delivery, measured on our side: it also covers a server or
    /// network that stops answering, which server-side timeouts cannot.
    pub delivery: Duration,
    begin: String,
}

impl Timeouts {
    /// Builds the bounds. `statement`, `lock` and `idle_in_transaction` are applied with
    /// `SET LOCAL` inside each transaction, so no session state is left behind; a zero one is
    /// left to the login role's default.
    pub fn new(
        connect: Duration,
        delivery: Duration,
        statement: Duration,
        lock: Duration,
        idle_in_transaction: Duration,
    ) -> Self {
        // A zero bound is not set here: the login role's default applies (`ALTER ROLE … SET`),
        // which spares the database one statement per bound on every delivery.
        let mut begin = String::from("BEGIN");
        for (name, bound) in [
            ("statement_timeout", statement),
            ("lock_timeout", lock),
            ("idle_in_transaction_session_timeout", idle_in_transaction),
        ] {
            if !bound.is_zero() {
                begin.push_str(&format!("; SET LOCAL {name} = {}", bound.as_millis()));
            }
        }
        Self {
            connect,
            delivery,
            begin,
        }
    }

    /// From `DB_CONNECT_TIMEOUT_MS` (3000), `DB_DELIVERY_TIMEOUT_MS` (5000),
    /// `DB_STATEMENT_TIMEOUT_MS` (3000), `DB_LOCK_TIMEOUT_MS` (2000) and
    /// `DB_IDLE_IN_TRANSACTION_TIMEOUT_MS` (5000).
    pub fn from_env() -> Result<Self, ConfigError> {
        let ms = |name, default| config::number(name, default).map(Duration::from_millis);
        let t = Self::new(
            ms("DB_CONNECT_TIMEOUT_MS", 3000)?,
            ms("DB_DELIVERY_TIMEOUT_MS", 5000)?,
            ms("DB_STATEMENT_TIMEOUT_MS", 3000)?,
            ms("DB_LOCK_TIMEOUT_MS", 2000)?,
            ms("DB_IDLE_IN_TRANSACTION_TIMEOUT_MS", 5000)?,
        );
        if t.connect.is_zero() || t.delivery.is_zero() {
            return Err(ConfigError(
                "DB_CONNECT_TIMEOUT_MS and DB_DELIVERY_TIMEOUT_MS must be greater than 0".into(),
            ));
        }
        Ok(t)
    }

    /// The statement that opens each transaction.
    pub fn begin_sql(&self) -> &str {
        &self.begin
    }
}

/// Where and how to connect.
#[derive(Clone)]
pub struct Settings {
    config: Config,
    tls: Option<MakeRustlsConnect>,
    timeouts: Timeouts,
    /// When set, every new connection authenticates with a fresh IAM token.
    iam: Option<IamTokens>,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Config's own Debug redacts the password; the TLS setup has nothing to show.
        f.debug_struct("Settings")
            .field("hosts", &self.config.get_hosts())
            .field("tls", &self.tls.is_some())
            .field("iam", &self.iam.as_ref().map(IamTokens::user))
            .field("timeouts", &self.timeouts)
            .finish()
    }
}

impl Settings {
    /// From the environment, in one of three modes:
    ///
    /// - `DATABASE_URL` (a password, if any, in the URL): local development, tests, and any
    ///   setup that keeps the URL itself secret;
    /// - `DB_IAM_AUTH=true` with `DB_HOST`, `DB_PORT` (5432), `DB_NAME`, `DB_USER` and
    ///   `AWS_REGION`: an RDS IAM token from the aws-config credential chain for every new
    ///   connection;
    /// - `DB_SECRET_ARN` (the standard RDS secret) with `DB_HOST`/`DB_PORT`/`DB_NAME`
    ///   overriding what the secret records: read once, here, at cold start.
    ///
    /// The last two always use verified TLS. `PGSSLROOTCERT` and the timeouts apply to all.
    pub async fn from_env() -> Result<Self, ConfigError> {
        let timeouts = Timeouts::from_env()?;
        let root = config::optional("PGSSLROOTCERT");
        let root = root.as_deref().map(Path::new);
        if let Some(url) = config::optional("DATABASE_URL") {
            return Self::from_url(&url, root, timeouts);
        }
        let iam = config::optional("DB_IAM_AUTH").is_some_and(|v| v.eq_ignore_ascii_case("true"));
        let secret_arn = config::optional("DB_SECRET_ARN");
        if !iam && secret_arn.is_none() {
            return Err(ConfigError(
                "set DATABASE_URL, or DB_HOST and DB_NAME with DB_IAM_AUTH=true or DB_SECRET_ARN"
                    .into(),
            ));
        }
        let aws = crate::auth::aws_config().load().await;
        let port = u16::try_from(config::number("DB_PORT", 5432)?)
            .map_err(|_| ConfigError("DB_PORT must be a port number".into()))?;
        let mut settings = Self::verified(config::required("DB_HOST")?, port, timeouts, root)?;
        settings.config.dbname(config::required("DB_NAME")?);
        if iam {
            let user = config::required("DB_USER")?;
            let region = aws
                .region()
                .map(ToString::to_string)
                .ok_or_else(|| ConfigError("AWS_REGION must be set for DB_IAM_AUTH".into()))?;
            let credentials = aws.credentials_provider().ok_or_else(|| {
                ConfigError("no AWS credential provider is configured for DB_IAM_AUTH".into())
            })?;
            let host = settings.host();
            settings.config.user(&user);
            settings.iam = Some(IamTokens::new(credentials, &host, port, &user, &region));
        } else if let Some(arn) = secret_arn {
            let secret = fetch_secret(&aws, &arn)
                .await
                .map_err(|e| ConfigError(format!("DB_SECRET_ARN: {e}")))?;
            settings
                .config
                .user(&secret.username)
                .password(secret.password.as_bytes());
        }
        Ok(settings)
    }

    /// Verified-TLS settings for `host:port`, user and database still to be set.
    fn verified(
        host: String,
        port: u16,
        timeouts: Timeouts,
        root_cert: Option<&Path>,
    ) -> Result<Self, ConfigError> {
        let mut config = Config::new();
        config
            .host(&host)
            .port(port)
            .ssl_mode(SslMode::Require)
            .connect_timeout(timeouts.connect);
        Ok(Self {
            config,
            tls: Some(tls_connector(root_cert)?),
            timeouts,
            iam: None,
        })
    }

    fn host(&self) -> String {
        match self.config.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
            _ => String::new(),
        }
    }

    /// Verified-TLS settings that authenticate with IAM tokens made by `tokens` (for tests
    /// and for callers that build their own credential provider).
    pub fn with_iam(
        host: &str,
        port: u16,
        dbname: &str,
        tokens: IamTokens,
        root_cert: Option<&Path>,
        timeouts: Timeouts,
    ) -> Result<Self, ConfigError> {
        let mut settings = Self::verified(host.to_owned(), port, timeouts, root_cert)?;
        settings.config.dbname(dbname).user(tokens.user());
        settings.iam = Some(tokens);
        Ok(settings)
    }

    /// Parses a `postgres://` URL (or `key=value` string).
    ///
    /// TLS is on unless the URL says `sslmode=disable`, and it always verifies the certificate
    /// chain and the host name: `require`, `verify-ca` and `verify-full` all mean that here,
    /// and an absent `sslmode` means it too. `prefer` and `allow`, which fall back to plain
    /// text silently, are refused. Trust comes from `root_cert` (a PEM bundle) when given,
    /// otherwise from the public web roots that RDS Proxy's certificates chain to.
    pub fn from_url(
        url: &str,
        root_cert: Option<&Path>,
        timeouts: Timeouts,
    ) -> Result<Self, ConfigError> {
        let (url, mode) = normalize_sslmode(url)?;
        let mut config = Config::from_str(&url).map_err(|_| {
            ConfigError("DATABASE_URL is not a valid PostgreSQL connection string".into())
        })?;
        config.connect_timeout(timeouts.connect);
        let tls = match mode {
            SslMode::Disable => None,
            _ => {
                config.ssl_mode(SslMode::Require);
                Some(tls_connector(root_cert)?)
            }
        };
        Ok(Self {
            config,
            tls,
            timeouts,
            iam: None,
        })
    }

    /// The bounds on waits.
    pub fn timeouts(&self) -> &Timeouts {
        &self.timeouts
    }

    /// The connection parameters for the next connection: with IAM auth, a fresh token as
    /// the password (tokens expire after 15 minutes; a connection, once made, outlives it).
    pub async fn connection_config(&self) -> Result<Config, ConnectError> {
        let mut config = self.config.clone();
        if let Some(iam) = &self.iam {
            let token = iam
                .token(SystemTime::now())
                .await
                .map_err(ConnectError::Credentials)?;
            config.password(token.as_bytes());
        }
        Ok(config)
    }

    /// Opens a connection within the connect timeout and drives it on its own task.
    pub async fn connect(&self) -> Result<Client, ConnectError> {
        let connecting = async {
            let config = self.connection_config().await?;
            let client = match &self.tls {
                Some(tls) => {
                    let (client, connection) = config
                        .connect(tls.clone())
                        .await
                        .map_err(ConnectError::Failed)?;
                    tokio::spawn(connection);
                    client
                }
                None => {
                    let (client, connection) =
                        config.connect(NoTls).await.map_err(ConnectError::Failed)?;
                    tokio::spawn(connection);
                    client
                }
            };
            Ok(client)
        };
        tokio::time::timeout(self.timeouts.connect, connecting)
            .await
            .unwrap_or(Err(ConnectError::TimedOut))
    }
}

/// Rewrites `sslmode` to a value tokio-postgres understands, and returns the mode we enforce.
fn normalize_sslmode(url: &str) -> Result<(String, SslMode), ConfigError> {
    let Some(start) = url.find("sslmode=") else {
        return Ok((url.to_owned(), SslMode::Require));
    };
    let value_start = start + "sslmode=".len();
    let rest = url.get(value_start..).unwrap_or("");
    let len = rest
        .find(|c: char| c == '&' || c.is_whitespace())
        .unwrap_or(rest.len());
    let value = rest.get(..len).unwrap_or("");
    let mode = match value {
        "disable" => SslMode::Disable,
        "require" | "verify-ca" | "verify-full" => SslMode::Require,
        "prefer" | "allow" => {
            return Err(ConfigError(format!(
                "sslmode={value} may fall back to an unencrypted connection; use sslmode=require \
                 (verified TLS) or sslmode=disable (local development only)"
            )));
        }
        _ => return Err(ConfigError("sslmode has an unknown value".into())),
    };
    let replacement = if mode == SslMode::Disable {
        "disable"
    } else {
        "require"
    };
    let mut out = String::with_capacity(url.len());
    out.push_str(url.get(..value_start).unwrap_or(""));
    out.push_str(replacement);
    out.push_str(rest.get(len..).unwrap_or(""));
    Ok((out, mode))
}

fn tls_connector(root_cert: Option<&Path>) -> Result<MakeRustlsConnect, ConfigError> {
    let mut roots = rustls::RootCertStore::empty();
    match root_cert {
        Some(path) => {
            let bad =
                || ConfigError("PGSSLROOTCERT is not a readable PEM certificate bundle".into());
            for cert in CertificateDer::pem_file_iter(path).map_err(|_| bad())? {
                roots.add(cert.map_err(|_| bad())?).map_err(|_| bad())?;
            }
            if roots.is_empty() {
                return Err(bad());
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|_| ConfigError("TLS protocol versions unavailable".into()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

/// Why a connection could not be made.
#[derive(Debug)]
pub enum ConnectError {
    /// The server refused, TLS verification failed, or authentication failed.
    Failed(tokio_postgres::Error),
    /// No credentials to make an IAM token with.
    Credentials(AuthError),
    /// Nothing answered within the connect timeout.
    TimedOut,
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // tokio-postgres' messages name the failing step and its cause (for TLS, the
            // certificate problem), never the password.
            ConnectError::Failed(e) => {
                write!(f, "connect failed: {e}")?;
                let mut source = std::error::Error::source(e);
                while let Some(cause) = source {
                    write!(f, ": {cause}")?;
                    source = cause.source();
                }
                Ok(())
            }
            ConnectError::Credentials(e) => write!(f, "connect failed: {e}"),
            ConnectError::TimedOut => f.write_str("connect timed out"),
        }
    }
}

impl std::error::Error for ConnectError {}

/// Why a delivery's transaction did not complete.
#[derive(Debug)]
pub enum DeliveryError {
    /// No connection could be made.
    Connect(ConnectError),
    /// The transaction failed; it was rolled back (or its connection discarded).
    Failed(Cause),
    /// The transaction did not finish within the delivery timeout; the connection was dropped,
    /// which makes the server roll it back.
    TimedOut,
}

impl DeliveryError {
    /// A short, data-free description for logs: a category and, for database errors, the
    /// SQLSTATE and constraint name (never the server's message, which can quote values).
    pub fn summary(&self) -> String {
        match self {
            DeliveryError::Connect(e) => e.to_string(),
            DeliveryError::TimedOut => "delivery timed out".into(),
            DeliveryError::Failed(Cause::Encode) => "parameter could not be encoded".into(),
            DeliveryError::Failed(Cause::Postgres(e)) => match e.as_db_error() {
                Some(db) => match db.constraint() {
                    Some(c) => format!("sqlstate {} (constraint {c})", db.code().code()),
                    None => format!("sqlstate {}", db.code().code()),
                },
                None if e.is_closed() => "connection closed".into(),
                None => "connection error".into(),
            },
        }
    }
}

/// True when the error says the connection is gone (closed, killed by an administrator or a
/// proxy, or the server restarting), as opposed to the statement failing.
fn connection_lost(cause: &Cause) -> bool {
    let Cause::Postgres(e) = cause else {
        return false;
    };
    if e.is_closed() {
        return true;
    }
    match e.as_db_error() {
        Some(db) => {
            let code = db.code().code();
            code.starts_with("08") || code.starts_with("57P")
        }
        // An I/O error with no server answer.
        None => true,
    }
}

/// One execution environment's connection: made at cold start, reused by every invocation,
/// replaced when it is found closed.
#[derive(Debug)]
pub struct Database {
    settings: Settings,
    client: Mutex<Option<Client>>,
}

impl Database {
    /// A database handle with no connection yet.
    pub fn new(settings: Settings) -> Self {
        Self {
            settings,
            client: Mutex::new(None),
        }
    }

    /// Connects now (at cold start), so the first delivery does not pay for it. A failure is
    /// returned for logging; the next delivery tries again.
    pub async fn warm_up(&self) -> Result<(), ConnectError> {
        let mut slot = self.client.lock().await;
        if slot.as_ref().is_none_or(Client::is_closed) {
            *slot = Some(self.settings.connect().await?);
        }
        Ok(())
    }

    /// Runs the claim transaction for one delivery.
    ///
    /// If the connection turns out to be closed (a proxy idle timeout, a failover, an
    /// administrator), it reconnects once and runs the delivery again. That is safe because
    /// the claim is idempotent: if the first attempt did commit, the second finds the claim
    /// taken and answers duplicate.
    pub async fn deliver(
        &self,
        claim: &Claim<'_>,
        effect: impl Fn(&mut Transaction) -> Applied,
    ) -> Result<Finished, DeliveryError> {
        let mut slot = self.client.lock().await;
        let mut retried = false;
        loop {
            let client = match slot.take().filter(|c| !c.is_closed()) {
                Some(client) => client,
                None => self
                    .settings
                    .connect()
                    .await
                    .map_err(DeliveryError::Connect)?,
            };
            let timeouts = &self.settings.timeouts;
            let outcome = tokio::time::timeout(
                timeouts.delivery,
                pipeline::run(&client, timeouts, claim, &effect),
            )
            .await;
            match outcome {
                // Dropping the client closes the connection; the server rolls back.
                Err(_) => return Err(DeliveryError::TimedOut),
                Ok(Ok(finished)) => {
                    *slot = Some(client);
                    return Ok(finished);
                }
                Ok(Err(failed)) => {
                    if failed.connection_reusable {
                        *slot = Some(client);
                    }
                    if !retried && connection_lost(&failed.cause) {
                        retried = true;
                        continue;
                    }
                    return Err(DeliveryError::Failed(failed.cause));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(url: &str) -> Result<(String, SslMode), ConfigError> {
        normalize_sslmode(url)
    }

    #[test]
    fn sslmode_defaults_to_verified_and_never_prefers() {
        assert_eq!(mode("postgres://h/db").map(|m| m.1), Ok(SslMode::Require));
        assert_eq!(
            mode("postgres://h/db?sslmode=verify-full&x=1"),
            Ok((
                "postgres://h/db?sslmode=require&x=1".into(),
                SslMode::Require
            ))
        );
        assert_eq!(
            mode("host=h sslmode=disable").map(|m| m.1),
            Ok(SslMode::Disable)
        );
        assert!(mode("postgres://h/db?sslmode=prefer").is_err());
        assert!(mode("postgres://h/db?sslmode=allow").is_err());
        assert!(mode("postgres://h/db?sslmode=bogus").is_err());
    }

    #[test]
    fn settings_errors_never_echo_the_url() {
        let t = Timeouts::new(
            Duration::from_secs(1),
            Duration::from_secs(1),
            Duration::from_secs(1),
            Duration::from_secs(1),
            Duration::from_secs(1),
        );
        let err = Settings::from_url("postgres://u:hunter2@h:notaport/db", None, t)
            .expect_err("invalid port");
        assert!(!err.to_string().contains("hunter2"));
    }
}
