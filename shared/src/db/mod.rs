//! The database connections: settings from the environment, verified TLS through rustls, at
//! most one connection per delivery in flight in the execution environment (one, classically;
//! up to [`Database::with_connections`] on Lambda Managed Instances), each reused and re-made
//! when found closed, and a bound on every wait. It runs a delivery's `Work` with its
//! deadline, reconnect and cancel, and knows nothing of claims: what the work sends is the
//! claim layer's.

mod error;
mod settings;
mod tls;

use std::sync::{Arc, PoisonError};

use tokio_postgres::{Client, NoTls};

pub use self::error::{ConnectError, DeliveryError};
pub use self::settings::{Settings, Timeouts};
pub use self::tls::Trust;
use crate::pg_error::connection_lost;

impl Settings {
    /// A connection of its own, for a job (feature `jobs`), opened within the connect timeout
    /// and driven on its own task. A receiver's provider is never handed one: its work runs on
    /// the claim's transaction.
    #[cfg(feature = "jobs")]
    pub async fn connect(&self) -> Result<Connection, ConnectError> {
        self.open().await
    }

    /// Opens a connection within the connect timeout and drives it on its own task. With a
    /// Secrets Manager secret, credentials the server refuses make it read the secret again,
    /// once, and try again (the password was rotated since the secret was read).
    pub(crate) async fn open(&self) -> Result<Connection, ConnectError> {
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
            let serving = crate::log::Serving::default();
            let (client, task) = match self.tls() {
                Some(tls) => {
                    let (client, connection) = config
                        .connect(tls.clone())
                        .await
                        .map_err(ConnectError::Failed)?;
                    (client, tokio::spawn(drive(connection, serving.clone())))
                }
                None => {
                    let (client, connection) =
                        config.connect(NoTls).await.map_err(ConnectError::Failed)?;
                    (client, tokio::spawn(drive(connection, serving.clone())))
                }
            };
            Ok(Connection::new(client, task, serving))
        };
        tokio::time::timeout(self.timeouts().connect, connecting)
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
        let port = self.port();
        let Ok(socket) = tokio::net::TcpStream::connect((host.as_str(), port)).await else {
            return false;
        };
        let stream = UntilClosed(socket);
        match self.tls() {
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

/// Drives a connection's socket until it closes, reporting what the server sends beside the
/// answers: a notice at `WARNING` reaches the log ([`crate::log::notice`]), under the
/// invocation whose delivery is using the connection (`serving`): this task outlives
/// deliveries and names none of its own. Awaiting the connection itself would do the same
/// work but log every notice at INFO, below what a function writes. Its outcome is seen by the
/// client's next request (`Error::is_closed`), so it is not reported here.
async fn drive<S, T>(mut connection: tokio_postgres::Connection<S, T>, serving: crate::log::Serving)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    while let Some(Ok(message)) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
        if let tokio_postgres::AsyncMessage::Notice(notice) = message {
            serving.scope(|| crate::log::notice(&notice));
        }
    }
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
    /// The invocation whose delivery is using it, for the lines its task writes.
    serving: crate::log::Serving,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

impl Connection {
    fn new(
        client: Client,
        task: tokio::task::JoinHandle<()>,
        serving: crate::log::Serving,
    ) -> Self {
        let cancel = Arc::new(client.cancel_token());
        Self {
            client,
            task,
            cancel,
            serving,
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

/// One attempt of a delivery's work, and whether its connection may carry the next one.
#[derive(Debug)]
pub(crate) struct Attempted<T> {
    /// What the attempt came to.
    pub(crate) outcome: Result<T, DeliveryError>,
    /// True only when nothing the work began is left open on the connection (one statement in
    /// its implicit transaction always is; an explicit transaction only once its `COMMIT` or
    /// `ROLLBACK` was answered). A connection that is not reusable is discarded: the server
    /// rolls back a transaction whose connection closes.
    pub(crate) reusable: bool,
}

/// What a delivery does on the connection, given the delivery's deadline: the claim layer's
/// statements. It may be attempted twice, on a fresh connection after a lost one.
pub(crate) trait Work: Sync {
    /// What the work answers.
    type Output: Send;

    /// One attempt on `client`, sending nothing once `deadline` has passed.
    fn attempt<'c>(
        &'c self,
        client: &'c Client,
        deadline: tokio::time::Instant,
    ) -> futures_util::future::BoxFuture<'c, Attempted<Self::Output>>;
}

/// How the server bounds one statement of this login: read once, at cold start. Behind RDS
/// Proxy, which supports no query cancellation, the login's `statement_timeout` is the only
/// bound on a statement the client's deadline gave up on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatementBound {
    /// The session's login (`session_user`): a role name, not a secret.
    pub login: String,
    /// Its `statement_timeout`; zero is none.
    pub statement_timeout: std::time::Duration,
}

/// The one statement of [`StatementBound`]: `pg_settings` gives the setting in milliseconds
/// whatever unit it was set in.
const STATEMENT_BOUND: &str = "SELECT setting::bigint, session_user::text FROM pg_settings \
                               WHERE name = 'statement_timeout'";

/// One connection slot of an environment: its connection while it is open and idle, and
/// whether one was ever made in it. A connection made where one was made before replaces a
/// connection found closed, lost or discarded: a reconnect. A slot's first is not one (the
/// environment's connections growing to the deliveries in flight, on Managed Instances).
#[derive(Debug, Default)]
struct Slot {
    connection: Option<Connection>,
    made: bool,
}

/// A slot held by one delivery: its connection between attempts, given back (or `None`, when
/// it was discarded) when the delivery ends, however it ends. While an attempt runs, the
/// attempt owns the connection and puts it back here only when it ended clean (no transaction
/// open, nothing unread): a panic or a dropped future mid-attempt drops it instead, which
/// closes the socket, and the server rolls back whatever it left open.
struct Held<'d> {
    database: &'d Database,
    slot: Slot,
    _permit: tokio::sync::SemaphorePermit<'d>,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.database
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(std::mem::take(&mut self.slot));
    }
}

/// What one delivery's work came to, and how many connections the delivery made to replace
/// ones it found closed or lost: its own, not another delivery's in flight beside it.
#[derive(Debug)]
pub(crate) struct Ran<T> {
    /// The work's answer, or why it failed.
    pub(crate) outcome: Result<T, DeliveryError>,
    /// Reconnects this delivery made ([`Slot`]).
    pub(crate) reconnects: u64,
}

/// One execution environment's connections: the first made at cold start, each reused by one
/// delivery at a time and replaced when it is found closed. A delivery holds a connection of
/// its own from its first statement to its last: no other delivery's statement or transaction
/// shares it, so a cancel at its deadline, or a connection discarded with a transaction
/// possibly open, touches that delivery alone (docs/decisions/0048).
#[derive(Debug)]
pub struct Database {
    settings: Settings,
    /// The slots not in use (a slot with no connection: one yet to be made).
    idle: std::sync::Mutex<Vec<Slot>>,
    /// One permit per slot: a delivery waits for one within its deadline.
    slots: tokio::sync::Semaphore,
}

impl Database {
    /// A database handle with no connection yet.
    pub fn new(settings: Settings) -> Self {
        Self {
            settings,
            idle: std::sync::Mutex::new(vec![Slot::default()]),
            slots: tokio::sync::Semaphore::new(1),
        }
    }

    /// With `connections` slots (at least one): as many deliveries at once, each on a
    /// connection of its own, made when first needed.
    pub fn with_connections(self, connections: usize) -> Self {
        let size = connections.max(1);
        Self {
            idle: std::sync::Mutex::new((0..size).map(|_| Slot::default()).collect()),
            slots: tokio::sync::Semaphore::new(size),
            ..self
        }
    }

    /// A slot, its connection (or `None`, to be made) in hand, waiting for a free one until
    /// `deadline`.
    async fn acquire(&self, deadline: tokio::time::Instant) -> Option<Held<'_>> {
        let permit = tokio::time::timeout_at(deadline, self.slots.acquire())
            .await
            .ok()?
            .ok()?;
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        // An open connection first, so that slots are re-made only when none is.
        let open = idle
            .iter()
            .position(|s| s.connection.as_ref().is_some_and(|c| !c.is_closed()))
            .unwrap_or(0);
        // None left (a delivery's future dropped with its slot): a slot to be made.
        let slot = if open < idle.len() {
            idle.swap_remove(open)
        } else {
            Slot::default()
        };
        Some(Held {
            database: self,
            slot,
            _permit: permit,
        })
    }

    /// The bounds on its waits.
    pub fn timeouts(&self) -> &Timeouts {
        self.settings.timeouts()
    }

    /// Connects now (at cold start), so the first delivery does not pay for it, and reads the
    /// login's [`StatementBound`] on the new connection (one statement; `None` when it could
    /// not be read). A connect failure is returned for logging; the next delivery tries again.
    pub async fn warm_up(&self) -> Result<Option<StatementBound>, ConnectError> {
        let far = tokio::time::Instant::now() + self.settings.timeouts().connect;
        let Some(mut held) = self.acquire(far).await else {
            return Ok(None);
        };
        if held
            .slot
            .connection
            .as_ref()
            .is_some_and(|c| !c.is_closed())
        {
            return Ok(None);
        }
        let connection = self.settings.open().await?;
        held.slot.made = true;
        let read = tokio::time::timeout(
            self.settings.timeouts().delivery,
            connection.query_typed(STATEMENT_BOUND, &[]),
        )
        .await;
        // Kept only when its statement was answered: one left in flight is not clean.
        if matches!(read, Ok(Ok(_))) {
            held.slot.connection = Some(connection);
        }
        let bound = match read {
            Ok(Ok(rows)) => rows.first().and_then(|row| {
                let ms: i64 = row.try_get(0).ok()?;
                Some(StatementBound {
                    login: row.try_get(1).ok()?,
                    statement_timeout: std::time::Duration::from_millis(
                        u64::try_from(ms).unwrap_or(0),
                    ),
                })
            }),
            _ => None,
        };
        Ok(bound)
    }

    /// Runs one delivery's `work` on this environment's connection.
    ///
    /// One deadline (`DB_DELIVERY_TIMEOUT_MS`) covers the whole delivery. If the connection
    /// turns out to be lost (a proxy idle timeout, a failover, an administrator), it reconnects
    /// once and runs the work again: the work must be safe to repeat (a claim is: if the first
    /// attempt did commit, the second finds the claim taken and answers duplicate). When the
    /// deadline passes with a statement sent, the statement is cancelled on the server and the
    /// connection closed; so is a connection the work reports it may have left in a
    /// transaction ([`Attempted::reusable`]).
    #[cfg(feature = "jobs")]
    pub(crate) async fn run<W: Work>(&self, work: &W) -> Result<W::Output, DeliveryError> {
        self.run_counted(work).await.outcome
    }

    /// [`Database::run`], with the reconnects the delivery made ([`Ran`]).
    pub(crate) async fn run_counted<W: Work>(&self, work: &W) -> Ran<W::Output> {
        let reconnects = std::sync::atomic::AtomicU64::new(0);
        let outcome = self.run_once(work, &reconnects).await;
        Ran {
            outcome,
            reconnects: reconnects.into_inner(),
        }
    }

    async fn run_once<W: Work>(
        &self,
        work: &W,
        reconnects: &std::sync::atomic::AtomicU64,
    ) -> Result<W::Output, DeliveryError> {
        let deadline = tokio::time::Instant::now() + self.settings.timeouts().delivery;
        // A free slot, within the delivery's own deadline: with more deliveries in flight
        // than slots, one waits for another to finish. It goes back when this ends, however.
        let Some(mut held) = self.acquire(deadline).await else {
            return Err(DeliveryError::TimedOut);
        };
        let slot = &mut held.slot;
        // The cancel key of the connection a statement is in flight on, while it is.
        let in_flight = std::sync::Mutex::new(None);
        let answered = {
            let attempts = self.attempts(slot, work, deadline, &in_flight, reconnects);
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
                    crate::future::rare(self.settings.cancel(&token)).await;
                    attempts.as_mut().await
                })
                .await
                .ok(),
                None => None,
            }
        };
        // Whatever the connection was doing, it is not trusted again: dropping it aborts its
        // task, so nothing queued on it can reach the server afterwards.
        slot.connection.take();
        match answered {
            Some(Ok(finished)) => Ok(finished),
            _ => Err(DeliveryError::TimedOut),
        }
    }

    async fn attempts<W: Work>(
        &self,
        slot: &mut Slot,
        work: &W,
        deadline: tokio::time::Instant,
        in_flight: &std::sync::Mutex<Option<Arc<tokio_postgres::CancelToken>>>,
        reconnects: &std::sync::atomic::AtomicU64,
    ) -> Result<W::Output, DeliveryError> {
        let mut retried = false;
        loop {
            if tokio::time::Instant::now() >= deadline {
                return Err(DeliveryError::TimedOut);
            }
            let connection = match slot.connection.take().filter(|c| !c.is_closed()) {
                Some(connection) => connection,
                None => {
                    let opened = crate::future::rare(self.settings.open())
                        .await
                        .map_err(DeliveryError::Connect)?;
                    // Counted once made, and only where one was made before: a connect that
                    // failed is the delivery's error, and a slot's first is no reconnect.
                    if std::mem::replace(&mut slot.made, true) {
                        reconnects.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    opened
                }
            };
            if tokio::time::Instant::now() >= deadline {
                slot.connection = Some(connection);
                return Err(DeliveryError::TimedOut);
            }
            *in_flight.lock().unwrap_or_else(PoisonError::into_inner) =
                Some(Arc::clone(&connection.cancel));
            // What the connection's task writes meanwhile (a server notice) names this
            // delivery's invocation.
            connection.serving.begin();
            // The attempt owns the connection: should it panic or its future be dropped, the
            // connection goes with it, never back to the slot.
            let Attempted { outcome, reusable } = work.attempt(&connection.client, deadline).await;
            connection.serving.end();
            *in_flight.lock().unwrap_or_else(PoisonError::into_inner) = None;
            // One that may still hold this delivery's transaction open is never reused:
            // dropped here, it closes its socket, and the server rolls the transaction back.
            if reusable {
                slot.connection = Some(connection);
            }
            match outcome {
                Ok(finished) => return Ok(finished),
                Err(DeliveryError::Failed(error)) if connection_lost(&error) => {
                    slot.connection = None;
                    if retried {
                        return Err(DeliveryError::Failed(error));
                    }
                    retried = true;
                }
                Err(error) => return Err(error),
            }
        }
    }
}
