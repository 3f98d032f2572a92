//! A loopback TCP proxy that counts round trips: every time the client starts sending after
//! the server has spoken (or first), that is one more flight, i.e. one more wait for the
//! server. Pipelined requests sent before any answer count as one flight.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const NONE: u8 = 0;
const CLIENT: u8 = 1;
const SERVER: u8 = 2;

/// The running proxy.
#[derive(Debug)]
pub struct FlightCounter {
    /// The port to connect to instead of the server's.
    pub port: u16,
    flights: Arc<AtomicU64>,
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    side: u8,
    last: Arc<AtomicU8>,
    flights: Arc<AtomicU64>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let before = last.swap(side, Ordering::SeqCst);
        if side == CLIENT && before != CLIENT {
            flights.fetch_add(1, Ordering::SeqCst);
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

impl FlightCounter {
    /// Starts a proxy to `127.0.0.1:upstream`.
    pub async fn start(upstream: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let flights = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&flights);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let last = Arc::new(AtomicU8::new(NONE));
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                tokio::spawn(pump(
                    cr,
                    sw,
                    CLIENT,
                    Arc::clone(&last),
                    Arc::clone(&counted),
                ));
                tokio::spawn(pump(sr, cw, SERVER, last, Arc::clone(&counted)));
            }
        });
        Self { port, flights }
    }

    /// Flights counted since the last reset.
    pub fn flights(&self) -> u64 {
        self.flights.load(Ordering::SeqCst)
    }

    /// Starts counting from zero.
    pub fn reset(&self) {
        self.flights.store(0, Ordering::SeqCst);
    }
}
