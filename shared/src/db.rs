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
use crate::pipeline::{self, Claim, Effect, Finished};

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
            return Err(ConfigError(
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
        match self.current.lock() {
            Ok(c) => c.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
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
            settings
                .use_secret(aws, arn)
                .await
                .map_err(|e| ConfigError(format!("DB_SECRET_ARN: {e}")))?;
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
        root_cert: Option<&Path>,
        timeouts: Timeouts,
    ) -> Result<Self, ConfigError> {
        let mut settings = Self::verified(host.to_owned(), port, timeouts, root_cert)?;
        settings.config.dbname(dbname);
        settings
            .use_secret(aws, arn.to_owned())
            .await
            .map_err(|e| ConfigError(format!("DB_SECRET_ARN: {e}")))?;
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
    async fn reread_secret(&self) -> Result<bool, AuthError> {
        let Some(source) = &self.secret else {
            return Ok(false);
        };
        let fresh = SecretSource::read(&source.aws, &source.arn).await?;
        match source.current.lock() {
            Ok(mut c) => *c = fresh,
            Err(poisoned) => *poisoned.into_inner() = fresh,
        }
        Ok(true)
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

    /// Opens a connection within the connect timeout and drives it on its own task. With a
    /// Secrets Manager secret, credentials the server refuses make it read the secret again,
    /// once, and try again (the password was rotated since the secret was read).
    pub async fn connect(&self) -> Result<Connection, ConnectError> {
        match self.connect_once().await {
            Err(e) if e.refused_credentials() => match self.reread_secret().await {
                Ok(true) => self.connect_once().await,
                Ok(false) => Err(e),
                Err(auth) => Err(ConnectError::Credentials(auth)),
            },
            other => other,
        }
    }

    async fn connect_once(&self) -> Result<Connection, ConnectError> {
        let connecting = async {
            let config = self.connection_config().await?;
            let (client, task) = match &self.tls {
                Some(tls) => {
                    let (client, connection) = config
                        .connect(tls.clone())
                        .await
                        .map_err(ConnectError::Failed)?;
                    (client, tokio::spawn(drive(connection)))
                }
                None => {
                    let (client, connection) =
                        config.connect(NoTls).await.map_err(ConnectError::Failed)?;
                    (client, tokio::spawn(drive(connection)))
                }
            };
            Ok(Connection::new(client, task))
        };
        tokio::time::timeout(self.timeouts.connect, connecting)
            .await
            .unwrap_or(Err(ConnectError::TimedOut))
    }

    /// Asks the server to cancel whatever the connection `token` belongs to is running.
    /// Returns true when the request was delivered (the server does not say whether a
    /// statement was running).
    ///
    /// tokio-postgres' own `cancel_query` closes its socket as soon as the request is written;
    /// PostgreSQL acts on it anyway, but a pooler (PgBouncer, and so possibly RDS Proxy) drops
    /// a cancel whose client has gone before the cancel was forwarded. So the request goes
    /// over a socket of ours that, once written, waits for the other end to close, as libpq
    /// does.
    async fn cancel(&self, token: &tokio_postgres::CancelToken) -> bool {
        let host = self.host();
        let port = self.config.get_ports().first().copied().unwrap_or(5432);
        let Ok(socket) = tokio::net::TcpStream::connect((host.as_str(), port)).await else {
            return false;
        };
        let stream = UntilClosed(socket);
        match &self.tls {
            Some(tls) => {
                let mut make = tls.clone();
                match tokio_postgres::tls::MakeTlsConnect::<UntilClosed>::make_tls_connect(
                    &mut make, &host,
                ) {
                    Ok(connect) => token.cancel_query_raw(stream, connect).await.is_ok(),
                    Err(_) => false,
                }
            }
            None => token.cancel_query_raw(stream, NoTls).await.is_ok(),
        }
    }
}

/// A TCP stream whose shutdown waits for the other end to close instead of closing first:
/// what was written has then been read and acted on. Reads during that wait are discarded.
struct UntilClosed(tokio::net::TcpStream);

impl tokio::io::AsyncRead for UntilClosed {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for UntilClosed {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::task::Poll;
        use tokio::io::AsyncRead;
        // No FIN of ours first: a pooler reads the end of our side as the client going away
        // and gives up on the cancel (PgBouncer 1.18 even crashes on it). The other end
        // closes once it has the request; the socket closes when this stream is dropped.
        let mut scratch = [0u8; 64];
        loop {
            let mut buf = tokio::io::ReadBuf::new(&mut scratch);
            match std::pin::Pin::new(&mut self.0).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) if buf.filled().is_empty() => return Poll::Ready(Ok(())),
                Poll::Ready(Ok(())) => {}
                // Reset by the other end: it has read the request and gone.
                Poll::Ready(Err(_)) => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// Drives a connection's socket until it closes. Its outcome is seen by the client's next
/// request (`Error::is_closed`), so it is not reported here.
async fn drive<F: std::future::Future>(connection: F) {
    let _ = connection.await;
}

/// An open connection: the client, and the task that drives its socket. Dropping it aborts
/// the task, which closes the socket at once: nothing still queued on the client can reach the
/// server afterwards.
pub struct Connection {
    client: Client,
    task: tokio::task::JoinHandle<()>,
    /// Made once per connection: a delivery marks it in flight with a reference count, not a
    /// copy of the socket settings.
    cancel: Arc<tokio_postgres::CancelToken>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

impl Connection {
    fn new(client: Client, task: tokio::task::JoinHandle<()>) -> Self {
        let cancel = Arc::new(client.cancel_token());
        Self {
            client,
            task,
            cancel,
        }
    }
}

impl std::ops::Deref for Connection {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.client
    }
}

impl std::ops::DerefMut for Connection {
    fn deref_mut(&mut self) -> &mut Client {
        &mut self.client
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.task.abort();
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
    /// No credentials: an IAM token could not be made, or the secret could not be read.
    Credentials(AuthError),
    /// Nothing answered within the connect timeout.
    TimedOut,
}

impl ConnectError {
    /// True when the server refused the credentials (SQLSTATE class 28).
    fn refused_credentials(&self) -> bool {
        matches!(self, ConnectError::Failed(e)
            if e.as_db_error().is_some_and(|db| db.code().code().starts_with("28")))
    }
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

impl std::error::Error for ConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConnectError::Failed(e) => Some(e),
            ConnectError::Credentials(e) => Some(e),
            ConnectError::TimedOut => None,
        }
    }
}

/// Why a delivery's statement did not complete.
#[derive(Debug)]
pub enum DeliveryError {
    /// No connection could be made.
    Connect(ConnectError),
    /// The statement failed: the server rolled it back, or the connection was lost after it
    /// was sent and a retry was not possible.
    Failed(tokio_postgres::Error),
    /// The delivery did not finish before its deadline. The statement, if it was sent, was
    /// cancelled on the server and the connection closed; whether it had committed first is
    /// not known here (a retry answers duplicate if it had).
    TimedOut,
}

impl DeliveryError {
    /// A short, data-free description for logs: a category and, for database errors, the
    /// SQLSTATE and constraint name (never the server's message, which can quote values).
    pub fn summary(&self) -> String {
        match self {
            DeliveryError::Connect(e) => e.to_string(),
            DeliveryError::TimedOut => "delivery timed out".into(),
            DeliveryError::Failed(e) => match e.as_db_error() {
                Some(db) => match db.constraint() {
                    Some(c) => format!("sqlstate {} (constraint {c})", db.code().code()),
                    None => format!("sqlstate {}", db.code().code()),
                },
                None if e.is_closed() => "connection closed".into(),
                None if io_error(e) => "connection error".into(),
                None => "a parameter could not be encoded".into(),
            },
        }
    }
}

impl std::fmt::Display for DeliveryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.summary())
    }
}

impl std::error::Error for DeliveryError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DeliveryError::Connect(e) => Some(e),
            DeliveryError::Failed(e) => Some(e),
            DeliveryError::TimedOut => None,
        }
    }
}

fn set<T>(slot: &std::sync::Mutex<T>, value: T) {
    match slot.lock() {
        Ok(mut current) => *current = value,
        Err(poisoned) => *poisoned.into_inner() = value,
    }
}

fn io_error(e: &tokio_postgres::Error) -> bool {
    std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>())
}

/// True when the error says the connection is gone (closed, killed by an administrator or a
/// proxy, or the server restarting), as opposed to the statement failing.
fn connection_lost(e: &tokio_postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.as_db_error() {
        Some(db) => {
            let code = db.code().code();
            code.starts_with("08") || code.starts_with("57P")
        }
        None => io_error(e),
    }
}

/// One execution environment's connection: made at cold start, reused by every invocation,
/// replaced when it is found closed.
#[derive(Debug)]
pub struct Database {
    settings: Settings,
    connection: Mutex<Option<Connection>>,
    /// Connections made by deliveries (the one made at cold start is not counted): each one
    /// replaced a connection found closed or lost.
    reconnects: std::sync::atomic::AtomicU64,
}

impl Database {
    /// A database handle with no connection yet.
    pub fn new(settings: Settings) -> Self {
        Self {
            settings,
            connection: Mutex::new(None),
            reconnects: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Connections deliveries made since the last call, and starts counting again: what the
    /// delivery just finished reports as its `Reconnects` metric.
    pub fn take_reconnects(&self) -> u64 {
        self.reconnects
            .swap(0, std::sync::atomic::Ordering::Relaxed)
    }

    /// Connects now (at cold start), so the first delivery does not pay for it. A failure is
    /// returned for logging; the next delivery tries again.
    pub async fn warm_up(&self) -> Result<(), ConnectError> {
        let mut slot = self.connection.lock().await;
        if slot.as_ref().is_none_or(|c| c.is_closed()) {
            *slot = Some(self.settings.connect().await?);
        }
        Ok(())
    }

    /// Runs one delivery's statement: the claim, and `effect` if the claim is won.
    ///
    /// One deadline (`DB_DELIVERY_TIMEOUT_MS`) covers the whole delivery. If the connection
    /// turns out to be lost (a proxy idle timeout, a failover, an administrator), it reconnects
    /// once and sends the statement again. That is safe because the claim is idempotent: if the
    /// first attempt did commit, the second finds the claim taken and answers duplicate. When
    /// the deadline passes with the statement sent, the statement is cancelled on the server
    /// and the connection closed.
    pub async fn deliver(
        &self,
        claim: &Claim<'_>,
        effect: Option<&Effect>,
    ) -> Result<Finished, DeliveryError> {
        let mut slot = self.connection.lock().await;
        let deadline = tokio::time::Instant::now() + self.settings.timeouts.delivery;
        // The cancel key of the connection a statement is in flight on, while it is.
        let in_flight = std::sync::Mutex::new(None);
        let answered = {
            let attempts = self.attempts(&mut slot, claim, effect, deadline, &in_flight);
            tokio::pin!(attempts);
            let token = match tokio::time::timeout_at(deadline, attempts.as_mut()).await {
                Ok(outcome) => return outcome,
                Err(_) => in_flight.lock().ok().and_then(|token| token.clone()),
            };
            // Past the deadline with a statement on the server: ask the server to cancel it,
            // and wait for its answer to the statement, within Timeouts::CANCEL. Waiting
            // matters behind a pooler, which forwards a cancel only while the client's session
            // exists; and the answer may be that the statement committed just before, which
            // is then the truthful one to give. `attempts` sends nothing more past the
            // deadline.
            match token {
                Some(token) => tokio::time::timeout(Timeouts::CANCEL, async {
                    self.settings.cancel(&token).await;
                    attempts.as_mut().await
                })
                .await
                .ok(),
                None => None,
            }
        };
        // Whatever the connection was doing, it is not trusted again: dropping it aborts its
        // task, so nothing queued on it can reach the server afterwards.
        slot.take();
        match answered {
            Some(Ok(finished)) => Ok(finished),
            _ => Err(DeliveryError::TimedOut),
        }
    }

    async fn attempts(
        &self,
        slot: &mut Option<Connection>,
        claim: &Claim<'_>,
        effect: Option<&Effect>,
        deadline: tokio::time::Instant,
        in_flight: &std::sync::Mutex<Option<Arc<tokio_postgres::CancelToken>>>,
    ) -> Result<Finished, DeliveryError> {
        let mut retried = false;
        loop {
            if tokio::time::Instant::now() >= deadline {
                return Err(DeliveryError::TimedOut);
            }
            let connection = match slot.take().filter(|c| !c.is_closed()) {
                Some(connection) => connection,
                None => {
                    self.reconnects
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    self.settings
                        .connect()
                        .await
                        .map_err(DeliveryError::Connect)?
                }
            };
            let connection = slot.insert(connection);
            if tokio::time::Instant::now() >= deadline {
                return Err(DeliveryError::TimedOut);
            }
            set(in_flight, Some(Arc::clone(&connection.cancel)));
            let outcome = pipeline::run(connection, claim, effect).await;
            set(in_flight, None);
            match outcome {
                Ok(finished) => return Ok(finished),
                Err(error) if connection_lost(&error) => {
                    *slot = None;
                    if retried {
                        return Err(DeliveryError::Failed(error));
                    }
                    retried = true;
                }
                Err(error) => return Err(DeliveryError::Failed(error)),
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
        let t = Timeouts::new(Duration::from_secs(1), Duration::from_secs(1));
        let err = Settings::from_url("postgres://u:hunter2@h:notaport/db", None, t)
            .expect_err("invalid port");
        assert!(!err.to_string().contains("hunter2"));
    }
}
