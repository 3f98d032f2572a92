//! Where and how to connect: the settings' three modes (a URL, IAM tokens, a Secrets Manager
//! secret), read from the environment at cold start, and the client's bounds on waits.

use std::path::Path;
use std::str::FromStr;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, SystemTime};

use tokio_postgres::Config;
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::error::ConnectError;
use super::tls::{Trust, normalize_sslmode, tls_connector};
use crate::auth::{AuthError, IamTokens, fetch_secret};
use crate::config::{self, ConfigError};

/// The client's bounds on database waits. The server's own bounds are not sent on the wire
/// (a `SET` would pin the session to one server connection behind RDS Proxy): the login role's
/// `statement_timeout`, set by the migrate function, and each function's `lock_timeout`.
#[derive(Debug, Clone)]
pub struct Timeouts {
    /// Establishing a connection (TCP, TLS and authentication together).
    pub connect: Duration,
    /// The whole of one delivery on our side, its one reconnect and retry included: it also
    /// covers a server or network that stops answering, which server-side bounds cannot.
    pub delivery: Duration,
}

impl Timeouts {
    /// How long a cancel request may take once the delivery's deadline has passed: a new
    /// connection that carries only the cancel (no authentication), so it is quick when the
    /// server is reachable at all.
    pub const CANCEL: Duration = Duration::from_secs(1);

    /// The bounds for connecting and for one whole delivery.
    pub fn new(connect: Duration, delivery: Duration) -> Self {
        Self { connect, delivery }
    }

    /// From `DB_CONNECT_TIMEOUT_MS` (3000) and `DB_DELIVERY_TIMEOUT_MS` (5000).
    pub fn from_env() -> Result<Self, ConfigError> {
        let ms = |name, default| config::number(name, default).map(Duration::from_millis);
        let t = Self::new(
            ms("DB_CONNECT_TIMEOUT_MS", 3000)?,
            ms("DB_DELIVERY_TIMEOUT_MS", 5000)?,
        );
        if t.connect.is_zero() || t.delivery.is_zero() {
            return Err(ConfigError::new(
                "DB_CONNECT_TIMEOUT_MS and DB_DELIVERY_TIMEOUT_MS must be greater than 0".into(),
            ));
        }
        Ok(t)
    }

    /// The `BEGIN` of a scheduled job's transaction (the retention sweep, the outbox relay):
    /// its statements and lock waits are bounded by the delivery timeout on the server too.
    /// Deliveries send no `SET`; a job runs once a minute on one connection, which may well be
    /// pinned for that minute without costing the proxy anything.
    pub fn job_begin(&self) -> String {
        let ms = self.delivery.as_millis();
        format!("BEGIN; SET LOCAL statement_timeout = {ms}; SET LOCAL lock_timeout = {ms}")
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
    /// When set, the user and password come from this Secrets Manager secret.
    secret: Option<Arc<SecretSource>>,
}

/// A Secrets Manager secret that holds the database credentials: read at cold start, and read
/// again when the server refuses them (the secret was rotated since).
struct SecretSource {
    aws: aws_config::SdkConfig,
    arn: String,
    /// The user and password last read.
    current: std::sync::Mutex<(String, String)>,
}

impl SecretSource {
    async fn read(aws: &aws_config::SdkConfig, arn: &str) -> Result<(String, String), AuthError> {
        let secret = fetch_secret(aws, arn).await?;
        Ok((secret.username, secret.password))
    }

    fn current(&self) -> (String, String) {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Config's own Debug redacts the password; the TLS setup has nothing to show.
        f.debug_struct("Settings")
            .field("hosts", &self.config.get_hosts())
            .field("tls", &self.tls.is_some())
            .field("iam", &self.iam.as_ref().map(IamTokens::user))
            .field("secret", &self.secret.as_ref().map(|s| s.arn.as_str()))
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
            return Err(ConfigError::new(
                "set DATABASE_URL, or DB_HOST and DB_NAME with DB_IAM_AUTH=true or DB_SECRET_ARN"
                    .into(),
            ));
        }
        let aws = crate::auth::aws_config().load().await;
        let port = u16::try_from(config::number("DB_PORT", 5432)?)
            .map_err(|_| ConfigError::new("DB_PORT must be a port number".into()))?;
        let mut settings =
            Self::verified(config::required("DB_HOST")?, port, timeouts, root.into())?;
        settings.config.dbname(config::required("DB_NAME")?);
        if iam {
            let user = config::required("DB_USER")?;
            let region = aws
                .region()
                .map(ToString::to_string)
                .ok_or_else(|| ConfigError::new("AWS_REGION must be set for DB_IAM_AUTH".into()))?;
            let credentials = aws.credentials_provider().ok_or_else(|| {
                ConfigError::new("no AWS credential provider is configured for DB_IAM_AUTH".into())
            })?;
            let host = settings.host();
            settings.config.user(&user);
            settings.iam = Some(IamTokens::new(credentials, &host, port, &user, &region));
        } else if let Some(arn) = secret_arn {
            settings
                .use_secret(aws, arn)
                .await
                .map_err(|e| ConfigError::caused(format!("DB_SECRET_ARN: {e}"), e))?;
        }
        Ok(settings)
    }

    /// Verified-TLS settings for `host:port`, user and database still to be set.
    fn verified(
        host: String,
        port: u16,
        timeouts: Timeouts,
        trust: Trust<'_>,
    ) -> Result<Self, ConfigError> {
        let mut config = Config::new();
        config
            .host(&host)
            .port(port)
            .ssl_mode(SslMode::Require)
            .connect_timeout(timeouts.connect);
        Ok(Self {
            config,
            tls: Some(tls_connector(trust)?),
            timeouts,
            iam: None,
            secret: None,
        })
    }

    /// Verified-TLS settings whose user and password come from the Secrets Manager secret
    /// `arn` (the standard RDS secret), read now and again when the server refuses them.
    pub async fn with_secret(
        host: &str,
        port: u16,
        dbname: &str,
        aws: aws_config::SdkConfig,
        arn: &str,
        trust: Trust<'_>,
        timeouts: Timeouts,
    ) -> Result<Self, ConfigError> {
        let mut settings = Self::verified(host.to_owned(), port, timeouts, trust)?;
        settings.config.dbname(dbname);
        settings
            .use_secret(aws, arn.to_owned())
            .await
            .map_err(|e| ConfigError::caused(format!("DB_SECRET_ARN: {e}"), e))?;
        Ok(settings)
    }

    async fn use_secret(
        &mut self,
        aws: aws_config::SdkConfig,
        arn: String,
    ) -> Result<(), AuthError> {
        let current = SecretSource::read(&aws, &arn).await?;
        self.secret = Some(Arc::new(SecretSource {
            aws,
            arn,
            current: std::sync::Mutex::new(current),
        }));
        Ok(())
    }

    /// Reads the credentials secret again, after the server refused the ones read before.
    /// Returns false when these settings take no secret.
    pub(super) async fn reread_secret(&self) -> Result<bool, AuthError> {
        let Some(source) = &self.secret else {
            return Ok(false);
        };
        let fresh = SecretSource::read(&source.aws, &source.arn).await?;
        *source
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = fresh;
        Ok(true)
    }

    /// The first host's name (empty when the host is a socket path).
    pub(super) fn host(&self) -> String {
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
        let mut settings = Self::verified(host.to_owned(), port, timeouts, root_cert.into())?;
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
            ConfigError::new("DATABASE_URL is not a valid PostgreSQL connection string".into())
        })?;
        config.connect_timeout(timeouts.connect);
        let tls = match mode {
            SslMode::Disable => None,
            _ => {
                config.ssl_mode(SslMode::Require);
                Some(tls_connector(root_cert.into())?)
            }
        };
        Ok(Self {
            config,
            tls,
            timeouts,
            iam: None,
            secret: None,
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
        if let Some(secret) = &self.secret {
            let (user, password) = secret.current();
            config.user(&user).password(password.as_bytes());
        }
        if let Some(iam) = &self.iam {
            let token = iam
                .token(SystemTime::now())
                .await
                .map_err(ConnectError::Credentials)?;
            config.password(token.as_bytes());
        }
        Ok(config)
    }

    /// The first host's port (5432 when none is set).
    pub(super) fn port(&self) -> u16 {
        self.config.get_ports().first().copied().unwrap_or(5432)
    }

    /// The TLS connector, when TLS is on.
    pub(super) fn tls(&self) -> Option<&MakeRustlsConnect> {
        self.tls.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_errors_never_echo_the_url() {
        let t = Timeouts::new(Duration::from_secs(1), Duration::from_secs(1));
        let err = Settings::from_url("postgres://u:hunter2@h:notaport/db", None, t)
            .expect_err("invalid port");
        assert!(!err.to_string().contains("hunter2"));
    }
}
