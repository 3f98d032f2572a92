//! A loopback TCP proxy in front of PostgreSQL (or PgBouncer) that sees what a pooler sees.
//!
//! - It counts the connections it accepted and the bytes clients sent through it, so a test can
//!   show that a request opened no connection and sent no byte to the database.
//! - It counts round trips: every time the client starts sending after the server has spoken
//!   (or first), that is one more flight, i.e. one more wait for the server. Pipelined
//!   requests sent before any answer count as one flight.
//! - It reads the client's protocol messages and records what would pin a session behind a
//!   transaction pooler: a named prepared statement (`Parse` or `Bind` naming one, or a named
//!   portal) and any `SET`/`RESET`.
//! - It drops a connection at a pinned point, once, when told to: before the next flight
//!   reaches the server, or after the server has answered it completely (committed) but
//!   before the answer reaches the client.
//! - Started with [`WireProxy::like_rds_proxy`], it behaves as RDS Proxy for PostgreSQL does
//!   with cancellation: it sends clients no `BackendKeyData` and drops every `CancelRequest`
//!   (AWS documents that RDS Proxy supports no query cancellation). Plain connections only
//!   (`sslmode=disable`), as the suite's servers use.

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

const NONE: u8 = 0;
const CLIENT: u8 = 1;
const SERVER: u8 = 2;

/// A fault to inject once, on the next flight of any connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Close the connection instead of forwarding the next flight: the statement never
    /// reaches the server.
    DropRequest,
    /// Forward the next flight, let the server answer it to the end (`ReadyForQuery`, so the
    /// implicit transaction has committed), and close the connection instead of forwarding
    /// the answer.
    DropAnswer,
    /// As `DropRequest`, for the first flight that sends a statement containing the text.
    DropRequestWith(&'static str),
    /// As `DropAnswer`, for the first flight that sends a statement containing the text (a
    /// `COMMIT` among several flights of one transaction).
    DropAnswerTo(&'static str),
}

const NO_FAULT: u8 = 0;
const DROP_REQUEST: u8 = 1;
const DROP_ANSWER: u8 = 2;
/// `DropAnswer` taken by a flight: the server's answer to it is being withheld.
const ANSWER_HELD: u8 = 3;

#[derive(Debug, Default)]
struct Shared {
    /// Connections accepted, ever.
    connections: AtomicU64,
    /// Bytes read from clients, ever (forwarded or not).
    client_bytes: AtomicU64,
    flights: AtomicU64,
    fault: AtomicU8,
    /// What a pooler would have to pin a session for, as readable notes.
    pinning: Mutex<Vec<String>>,
    /// Every statement text the clients sent (simple and extended protocol).
    statements: Mutex<Vec<String>>,
    /// Faults that fired.
    fired: AtomicU64,
    /// A fault armed for the flight that sends a statement containing the text: `DROP_REQUEST`
    /// or `DROP_ANSWER`, and the text.
    armed_for: Mutex<Option<(u8, &'static str)>>,
    /// Behave as RDS Proxy does: no `BackendKeyData` to clients, cancels dropped.
    like_rds_proxy: bool,
    /// `BackendKeyData` messages withheld from clients.
    keys_withheld: AtomicU64,
    /// `CancelRequest`s dropped.
    cancels_dropped: AtomicU64,
}

/// The code of a `CancelRequest` packet (PostgreSQL protocol, "Message Formats").
const CANCEL_REQUEST_CODE: u32 = 80_877_102;

/// True when a connection's first packet, as far as it has arrived, is a `CancelRequest`
/// (length 16, then its code). Waits for its first 8 bytes, at most a second.
async fn is_cancel_request(client: &TcpStream) -> bool {
    let mut head = [0u8; 8];
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(1);
    loop {
        match client.peek(&mut head).await {
            Ok(8) => {
                let length = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
                let code = u32::from_be_bytes([head[4], head[5], head[6], head[7]]);
                return length == 16 && code == CANCEL_REQUEST_CODE;
            }
            Ok(0) | Err(_) => return false,
            Ok(_) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
            Ok(_) => return false,
        }
    }
}

/// The running proxy.
#[derive(Debug)]
pub struct WireProxy {
    /// The port to connect to instead of the server's.
    pub port: u16,
    shared: Arc<Shared>,
}

fn cstring(bytes: &[u8]) -> (String, &[u8]) {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    let text = String::from_utf8_lossy(&bytes[..end]).into_owned();
    (text, bytes.get(end + 1..).unwrap_or(&[]))
}

/// True when `sql` holds a `SET` or `RESET` statement (of any kind: session, LOCAL, ROLE).
fn sets_something(sql: &str) -> bool {
    sql.split(';').any(|statement| {
        let words: Vec<String> = statement
            .split_whitespace()
            .take(1)
            .map(str::to_ascii_uppercase)
            .collect();
        matches!(words.first().map(String::as_str), Some("SET" | "RESET"))
    })
}

impl Shared {
    /// The fault armed for a statement among `sent`, taken (it fires once).
    fn take_armed(&self, sent: &[String]) -> Option<u8> {
        let mut armed = self.armed_for.lock().ok()?;
        let (kind, text) = (*armed)?;
        if sent.iter().any(|sql| sql.contains(text)) {
            *armed = None;
            return Some(kind);
        }
        None
    }

    /// Reads one complete frontend message; returns the statement text it carries (a `Query`
    /// or a `Parse`).
    fn frontend_message(&self, tag: u8, body: &[u8]) -> Option<String> {
        match tag {
            b'Q' => {
                let (sql, _) = cstring(body);
                return Some(self.record(sql));
            }
            b'P' => {
                let (name, rest) = cstring(body);
                let (sql, _) = cstring(rest);
                if !name.is_empty() {
                    self.pin(format!("named Parse {name:?}: {sql}"));
                }
                return Some(self.record(sql));
            }
            b'B' => {
                let (portal, rest) = cstring(body);
                let (statement, _) = cstring(rest);
                if !portal.is_empty() || !statement.is_empty() {
                    self.pin(format!(
                        "Bind of portal {portal:?} to statement {statement:?}"
                    ));
                }
            }
            _ => {}
        }
        None
    }

    fn pin(&self, note: String) {
        if let Ok(mut p) = self.pinning.lock() {
            p.push(note);
        }
    }

    /// Keeps a statement the client sent (simple or extended protocol), noting a `SET` in it;
    /// returns it.
    fn record(&self, sql: String) -> String {
        if sets_something(&sql) {
            self.pin(format!("SET on the wire: {sql}"));
        }
        if let Ok(mut s) = self.statements.lock() {
            s.push(sql.clone());
        }
        sql
    }
}

/// Splits a stream into protocol messages. `startup` is true for the client's side, whose
/// first packets (SSLRequest, StartupMessage, CancelRequest) carry no type byte.
struct Framer {
    buf: Vec<u8>,
    startup: bool,
}

impl Framer {
    /// Feeds bytes; returns the complete messages as (tag, body), tag 0 for a startup packet.
    fn feed(&mut self, bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
        self.buf.extend_from_slice(bytes);
        let mut out = Vec::new();
        loop {
            let (header, tag) = if self.startup { (0, 0) } else { (1, 0) };
            if self.buf.len() < header + 4 {
                break;
            }
            let tag = if self.startup { tag } else { self.buf[0] };
            let len = u32::from_be_bytes([
                self.buf[header],
                self.buf[header + 1],
                self.buf[header + 2],
                self.buf[header + 3],
            ]) as usize;
            let total = header + len;
            if len < 4 || self.buf.len() < total {
                break;
            }
            let body = self.buf[header + 4..total].to_vec();
            if self.startup {
                // SSLRequest and GSSENCRequest are followed by another untyped packet;
                // a StartupMessage is the last one.
                let code = body
                    .get(..4)
                    .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
                if !matches!(code, Some(80_877_103 | 80_877_104)) {
                    self.startup = false;
                }
            }
            out.push((tag, body));
            self.buf.drain(..total);
        }
        out
    }
}

async fn client_to_server(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    last: Arc<AtomicU8>,
    shared: Arc<Shared>,
    close: Arc<tokio::sync::Notify>,
) {
    let mut framer = Framer {
        buf: Vec::new(),
        startup: true,
    };
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = tokio::select! {
            read = from.read(&mut buf) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            },
            () = close.notified() => break,
        };
        shared.client_bytes.fetch_add(n as u64, Ordering::SeqCst);
        let before = last.swap(CLIENT, Ordering::SeqCst);
        if before != CLIENT {
            shared.flights.fetch_add(1, Ordering::SeqCst);
            // A fault applies to a flight of an established session, never to the startup.
            if !framer.startup {
                match shared.fault.load(Ordering::SeqCst) {
                    DROP_REQUEST => {
                        shared.fault.store(NO_FAULT, Ordering::SeqCst);
                        shared.fired.fetch_add(1, Ordering::SeqCst);
                        close.notify_waiters();
                        break;
                    }
                    DROP_ANSWER => shared.fault.store(ANSWER_HELD, Ordering::SeqCst),
                    _ => {}
                }
            }
        }
        let sent: Vec<String> = framer
            .feed(&buf[..n])
            .into_iter()
            .filter_map(|(tag, body)| shared.frontend_message(tag, &body))
            .collect();
        match shared.take_armed(&sent) {
            Some(DROP_REQUEST) => {
                shared.fired.fetch_add(1, Ordering::SeqCst);
                close.notify_waiters();
                break;
            }
            // Counted as fired once the withheld answer is complete.
            Some(_) => shared.fault.store(ANSWER_HELD, Ordering::SeqCst),
            None => {}
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

async fn server_to_client(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    last: Arc<AtomicU8>,
    shared: Arc<Shared>,
    close: Arc<tokio::sync::Notify>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut held = Framer {
        buf: Vec::new(),
        startup: false,
    };
    // Until the first ReadyForQuery, the server's messages are framed so that its
    // BackendKeyData can be left out (RDS Proxy mode only).
    let mut greeting = shared.like_rds_proxy.then(|| Framer {
        buf: Vec::new(),
        startup: false,
    });
    loop {
        let n = tokio::select! {
            read = from.read(&mut buf) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            },
            () = close.notified() => break,
        };
        last.store(SERVER, Ordering::SeqCst);
        if let Some(framer) = greeting.as_mut() {
            let mut out = Vec::with_capacity(n);
            let mut ready = false;
            for (tag, body) in framer.feed(&buf[..n]) {
                if tag == b'K' {
                    shared.keys_withheld.fetch_add(1, Ordering::SeqCst);
                    continue;
                }
                ready |= tag == b'Z';
                out.push(tag);
                out.extend_from_slice(
                    &u32::try_from(body.len() + 4)
                        .unwrap_or(u32::MAX)
                        .to_be_bytes(),
                );
                out.extend_from_slice(&body);
            }
            if ready {
                // Whatever followed in the same read is forwarded as it came.
                out.extend_from_slice(&framer.buf);
                greeting = None;
            }
            if to.write_all(&out).await.is_err() {
                break;
            }
            continue;
        }
        if shared.fault.load(Ordering::SeqCst) == ANSWER_HELD {
            // Withhold the answer until it is complete, then close without forwarding it.
            if held.feed(&buf[..n]).iter().any(|(tag, _)| *tag == b'Z') {
                shared.fault.store(NO_FAULT, Ordering::SeqCst);
                shared.fired.fetch_add(1, Ordering::SeqCst);
                close.notify_waiters();
                break;
            }
            continue;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

impl WireProxy {
    /// Starts a proxy to `127.0.0.1:upstream`.
    pub async fn start(upstream: u16) -> Self {
        Self::start_with(upstream, Shared::default()).await
    }

    /// Starts a proxy to `127.0.0.1:upstream` that handles cancellation as RDS Proxy for
    /// PostgreSQL does: no `BackendKeyData` reaches a client, and a `CancelRequest` is closed
    /// unanswered and never forwarded.
    pub async fn like_rds_proxy(upstream: u16) -> Self {
        Self::start_with(
            upstream,
            Shared {
                like_rds_proxy: true,
                ..Shared::default()
            },
        )
        .await
    }

    async fn start_with(upstream: u16, shared: Shared) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let shared = Arc::new(shared);
        let accepted = Arc::clone(&shared);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                accepted.connections.fetch_add(1, Ordering::SeqCst);
                if accepted.like_rds_proxy && is_cancel_request(&client).await {
                    accepted.cancels_dropped.fetch_add(1, Ordering::SeqCst);
                    drop(client);
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let last = Arc::new(AtomicU8::new(NONE));
                let close = Arc::new(tokio::sync::Notify::new());
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                tokio::spawn(client_to_server(
                    cr,
                    sw,
                    Arc::clone(&last),
                    Arc::clone(&accepted),
                    Arc::clone(&close),
                ));
                tokio::spawn(server_to_client(sr, cw, last, Arc::clone(&accepted), close));
            }
        });
        Self { port, shared }
    }

    /// Starts a proxy in front of the server `url` names (`127.0.0.1:<port>`); returns it and
    /// the same URL through it.
    pub async fn in_front_of(url: &str) -> (Self, String) {
        use std::str::FromStr;
        let config = tokio_postgres::Config::from_str(url).expect("a PostgreSQL URL");
        let upstream = config.get_ports().first().copied().expect("a port");
        let proxy = Self::start(upstream).await;
        let through = url.replace(&format!(":{upstream}/"), &format!(":{}/", proxy.port));
        assert_ne!(through, url, "the URL names its port as :{upstream}/");
        (proxy, through)
    }

    /// Everything clients ever did through the proxy: (connections opened, bytes sent). Not
    /// touched by [`reset`](Self::reset).
    pub fn traffic(&self) -> (u64, u64) {
        (
            self.shared.connections.load(Ordering::SeqCst),
            self.shared.client_bytes.load(Ordering::SeqCst),
        )
    }

    /// Flights counted since the last reset.
    pub fn flights(&self) -> u64 {
        self.shared.flights.load(Ordering::SeqCst)
    }

    /// Starts counting from zero, and forgets the statements seen.
    pub fn reset(&self) {
        self.shared.flights.store(0, Ordering::SeqCst);
        if let Ok(mut s) = self.shared.statements.lock() {
            s.clear();
        }
    }

    /// Everything seen so far that would pin a session behind a transaction pooler.
    pub fn pinning(&self) -> Vec<String> {
        self.shared
            .pinning
            .lock()
            .map(|p| p.clone())
            .unwrap_or_default()
    }

    /// The statement texts sent since the last reset.
    pub fn statements(&self) -> Vec<String> {
        self.shared
            .statements
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default()
    }

    /// Arms `fault` for the next flight of an established connection.
    pub fn inject(&self, fault: Fault) {
        let (code, armed) = match fault {
            Fault::DropRequest => (DROP_REQUEST, None),
            Fault::DropAnswer => (DROP_ANSWER, None),
            Fault::DropRequestWith(text) => (NO_FAULT, Some((DROP_REQUEST, text))),
            Fault::DropAnswerTo(text) => (NO_FAULT, Some((DROP_ANSWER, text))),
        };
        if let Ok(mut slot) = self.shared.armed_for.lock() {
            *slot = armed;
        }
        self.shared.fault.store(code, Ordering::SeqCst);
    }

    /// How many injected faults have fired.
    pub fn fired(&self) -> u64 {
        self.shared.fired.load(Ordering::SeqCst)
    }

    /// In RDS Proxy mode: (`BackendKeyData` messages withheld, `CancelRequest`s dropped).
    pub fn cancellation(&self) -> (u64, u64) {
        (
            self.shared.keys_withheld.load(Ordering::SeqCst),
            self.shared.cancels_dropped.load(Ordering::SeqCst),
        )
    }
}

#[cfg(test)]
mod tests {
    use claimonce::jobs::CLAIM_FUNCTION;

    use super::*;

    #[test]
    fn set_statements_are_recognised_wherever_they_stand() {
        assert!(sets_something("SET statement_timeout = 1"));
        assert!(sets_something("BEGIN; set local lock_timeout = 5"));
        assert!(sets_something("  RESET ALL"));
        assert!(!sets_something(
            "INSERT INTO t VALUES (1) ON CONFLICT (k) DO UPDATE SET v = 2"
        ));
        assert!(!sets_something(&format!(
            "SELECT c.won FROM {CLAIM_FUNCTION}($1, $2, $3, $4) AS c"
        )));
    }
}
