//! A database that can be stopped, started and slowed down under running functions: a
//! loopback TCP forwarder in front of PostgreSQL on a port of its own (the tests' outages, and
//! the local run's `--spill` switch). [`Outage::down`] stops listening and cuts every connection
//! through it, as a stopped server does (connects are refused, open connections are lost);
//! [`Outage::up`] listens on the same port again. [`Outage::hold`] keeps every byte a client
//! sends from the server until [`Outage::release`], and counts what it holds, so a test can
//! see a delivery waiting on a slow database and decide when it goes on.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Mutex, watch};
use tokio::task::JoinSet;

/// The forwarder.
#[derive(Debug)]
pub struct Outage {
    /// The port to connect to instead of the server's.
    pub port: u16,
    upstream: u16,
    running: Mutex<Option<JoinSet<()>>>,
    held: watch::Sender<bool>,
    waiting: Arc<AtomicU64>,
    /// Flights let through while held, one each ([`Outage::release_one`]).
    passes: Arc<AtomicU64>,
}

impl Outage {
    /// Starts forwarding to the server `url` names (`host:<port>/` with the host on the
    /// loopback); returns it and the same URL through it.
    pub async fn in_front_of(url: &str) -> Result<(Self, String), String> {
        use std::str::FromStr;
        let config = tokio_postgres::Config::from_str(url).map_err(|e| e.to_string())?;
        let upstream = config
            .get_ports()
            .first()
            .copied()
            .ok_or("the URL names no port")?;
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| e.to_string())?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        let (held, _) = watch::channel(false);
        let outage = Self {
            port,
            upstream,
            running: Mutex::new(None),
            held,
            waiting: Arc::new(AtomicU64::new(0)),
            passes: Arc::new(AtomicU64::new(0)),
        };
        outage.serve(listener).await;
        let through = outage.through(url);
        if through == url {
            return Err(format!("the URL does not name its port as :{upstream}/"));
        }
        Ok((outage, through))
    }

    /// `url` (one naming the same server) through the forwarder.
    pub fn through(&self, url: &str) -> String {
        url.replace(&format!(":{}/", self.upstream), &format!(":{}/", self.port))
    }

    async fn serve(&self, listener: TcpListener) {
        let mut tasks = JoinSet::new();
        let upstream = self.upstream;
        let held = self.held.subscribe();
        let waiting = Arc::clone(&self.waiting);
        let passes = Arc::clone(&self.passes);
        tasks.spawn(async move {
            let mut connections = JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                    continue;
                };
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                let hold = Hold {
                    held: held.clone(),
                    waiting: Arc::clone(&waiting),
                    passes: Arc::clone(&passes),
                };
                connections.spawn(forward(cr, sw, Some(hold)));
                connections.spawn(forward(sr, cw, None));
            }
        });
        *self.running.lock().await = Some(tasks);
    }

    /// Stops listening and closes every connection through the forwarder.
    pub async fn down(&self) {
        if let Some(mut tasks) = self.running.lock().await.take() {
            tasks.abort_all();
            while tasks.join_next().await.is_some() {}
        }
    }

    /// Listens on the same port again (nothing when it is up).
    pub async fn up(&self) -> Result<(), String> {
        if self.is_up().await {
            return Ok(());
        }
        let listener = TcpListener::bind(("127.0.0.1", self.port))
            .await
            .map_err(|e| format!("127.0.0.1:{}: {e}", self.port))?;
        self.serve(listener).await;
        Ok(())
    }

    /// True while it listens.
    pub async fn is_up(&self) -> bool {
        self.running.lock().await.is_some()
    }

    /// From now on, holds what clients send until [`release`](Self::release).
    pub fn hold(&self) {
        self.held.send_replace(true);
    }

    /// Lets everything held through, and stops holding.
    pub fn release(&self) {
        self.held.send_replace(false);
    }

    /// Lets one held flight through (the first to take it, or the next to arrive) and keeps
    /// holding the others: a test steps a client through its statements one by one.
    pub fn release_one(&self) {
        self.passes.fetch_add(1, Ordering::SeqCst);
        // Wakes the waiters to look for the pass; the value stays as it is (read first: the
        // borrow must end before the send takes the lock).
        let held = *self.held.borrow();
        self.held.send_replace(held);
    }

    /// How many client writes are being held now.
    pub fn waiting(&self) -> u64 {
        self.waiting.load(Ordering::SeqCst)
    }
}

/// Copies one direction; a client-to-server copy waits while `hold` says so, counted in its
/// counter. Dropping the task (the forwarder going down) closes both halves.
/// What a client-to-server forward waits on while the outage holds: the switch, the count of
/// flights waiting, and the passes [`Outage::release_one`] hands out.
struct Hold {
    held: watch::Receiver<bool>,
    waiting: Arc<AtomicU64>,
    passes: Arc<AtomicU64>,
}

impl Hold {
    /// Takes one pass, if any is left.
    fn take_pass(&self) -> bool {
        self.passes
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |p| p.checked_sub(1))
            .is_ok()
    }
}

async fn forward(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    hold: Option<Hold>,
) {
    let mut buffer = vec![0_u8; 16 * 1024];
    let mut hold = hold;
    loop {
        let n = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some(hold) = hold.as_mut()
            && *hold.held.borrow_and_update()
            && !hold.take_pass()
        {
            hold.waiting.fetch_add(1, Ordering::SeqCst);
            loop {
                if hold.held.changed().await.is_err() || !*hold.held.borrow_and_update() {
                    break;
                }
                if hold.take_pass() {
                    break;
                }
            }
            hold.waiting.fetch_sub(1, Ordering::SeqCst);
        }
        let Some(read) = buffer.get(..n) else { break };
        if to.write_all(read).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}
