//! What a TLS connection to the database costs the function with the crypto provider it is built
//! with: `--times` full handshakes to the tests' TLS PostgreSQL (`claimonce_tests::tls`, a
//! throwaway CA, the certificate for `localhost`), two ways.
//!
//! - **Handshake alone**: the PostgreSQL `SSLRequest`, then a rustls handshake to its end, on a
//!   blocking socket, with the configuration the crate builds (the build's one provider, the
//!   safe default protocol versions, the CA as the only root). The wall time of each, this
//!   thread's CPU per handshake (`/proc/thread-self/schedstat`), and what was negotiated:
//!   version, cipher suite, key exchange group, and whether the server asked for another key
//!   share (a HelloRetryRequest, one more round trip). Twice: *first*, each with a new
//!   configuration, as a cold start's first connection, which knows nothing of the server; and
//!   *again*, all on one configuration, as the crate's connector reconnects: rustls remembers
//!   the group the server took (and a session, if the server gives one) and offers it first.
//! - **The crate's connection**: `claimonce::db::Settings::connect` with `sslmode=require` and
//!   the CA, beside the same with `sslmode=disable`: TCP, TLS, PostgreSQL's start-up; the
//!   difference of the medians is what TLS adds to the connection a cold start opens.
//!
//! PostgreSQL's TLS is its OpenSSL's, which decides the group among those the client offers.
//!
//! ```text
//! cargo build --release -p claimonce-bench --bins
//! ./target/release/handshake --times 200
//! ```

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use claimonce_bench::fleet::task_usage;
use claimonce_tests::tls::TlsServer;
use rustls_pki_types::pem::PemObject;

const USAGE: &str = "usage: handshake [--times 200]
  --times N    handshakes (and connections) of each kind";

/// `--times`, or the message to print and the exit code.
fn args() -> Result<usize, (String, u8)> {
    use lexopt::prelude::*;
    let mut times = 200;
    let mut parser = lexopt::Parser::from_env();
    let bad = |e: lexopt::Error| (format!("handshake: {e}\n{USAGE}"), 2);
    while let Some(arg) = parser.next().map_err(bad)? {
        match arg {
            Long("times") => times = parser.value().map_err(bad)?.parse().map_err(bad)?,
            Short('h') | Long("help") => return Err((USAGE.to_owned(), 0)),
            other => return Err(bad(other.unexpected())),
        }
    }
    if times == 0 {
        return Err((format!("handshake: --times must be at least 1\n{USAGE}"), 2));
    }
    Ok(times)
}

/// This thread's CPU so far, in nanoseconds.
fn thread_cpu_ns() -> u64 {
    task_usage(std::path::Path::new("/proc/thread-self")).0
}

/// Median and 99th percentile of `times`, in milliseconds.
fn median_p99(mut times: Vec<Duration>) -> (f64, f64) {
    times.sort();
    let at = |q: f64| {
        let i = ((times.len() as f64 * q).ceil() as usize).saturating_sub(1);
        times.get(i).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    (at(0.5), at(0.99))
}

/// What one handshake negotiated, as text.
fn negotiated(tls: &rustls::ClientConnection) -> String {
    format!(
        "{:?}, {:?}, {:?}, {:?}",
        tls.protocol_version(),
        tls.negotiated_cipher_suite().map(|s| s.suite()),
        tls.negotiated_key_exchange_group().map(|g| g.name()),
        tls.handshake_kind(),
    )
}

/// One `SSLRequest` and rustls handshake to `port`; what was negotiated.
fn handshake(config: &Arc<rustls::ClientConfig>, port: u16) -> Result<String, String> {
    let mut tcp = std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    tcp.set_nodelay(true).map_err(|e| e.to_string())?;
    // PostgreSQL's SSLRequest: length 8, code 80877103; the server answers one byte, `S`.
    tcp.write_all(&[0, 0, 0, 8, 4, 210, 22, 47])
        .map_err(|e| e.to_string())?;
    let mut answer = [0u8; 1];
    tcp.read_exact(&mut answer).map_err(|e| e.to_string())?;
    if answer != *b"S" {
        return Err(format!("the server refused TLS: {answer:?}"));
    }
    let name = rustls_pki_types::ServerName::try_from("localhost").map_err(|e| e.to_string())?;
    let mut tls =
        rustls::ClientConnection::new(Arc::clone(config), name).map_err(|e| e.to_string())?;
    while tls.is_handshaking() {
        tls.complete_io(&mut tcp).map_err(|e| e.to_string())?;
    }
    let said = negotiated(&tls);
    tls.send_close_notify();
    let _ = tls.complete_io(&mut tcp);
    Ok(said)
}

/// The handshakes alone, each with a new configuration (`again` false) or all on one:
/// (wall times, CPU µs per handshake, what the last one negotiated, the groups offered).
fn handshakes(
    server: &TlsServer,
    times: usize,
    again: bool,
) -> Result<(Vec<Duration>, f64, String, Vec<String>), String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in
        rustls_pki_types::CertificateDer::pem_file_iter(&server.ca).map_err(|e| e.to_string())?
    {
        roots
            .add(cert.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    // The provider the build's crate features name, as the crate's own connector uses.
    let config = || {
        Arc::new(
            rustls::ClientConfig::builder()
                .with_root_certificates(roots.clone())
                .with_no_client_auth(),
        )
    };
    let one = config();
    let offered = one
        .crypto_provider()
        .kx_groups
        .iter()
        .map(|g| format!("{:?}", g.name()))
        .collect();
    // Warm-up: the first handshake pays for lazily built tables (and, `again`, leaves what
    // rustls remembers of the server). The process's first is a cold start's.
    let started = Instant::now();
    let mut said = handshake(&one, server.server.port)?;
    if !again {
        println!(
            "the process's first handshake: {:.3} ms",
            started.elapsed().as_secs_f64() * 1000.0
        );
    }
    // Made before the clock starts, so that only the handshakes are counted.
    let configs: Vec<_> = (0..times)
        .map(|_| if again { Arc::clone(&one) } else { config() })
        .collect();
    let mut walls = Vec::with_capacity(times);
    // The kernel adds a running thread's time to its count when it stops running: a short
    // sleep before each reading settles it (see lambda-loop).
    let settled = || {
        std::thread::sleep(Duration::from_millis(2));
        thread_cpu_ns()
    };
    let cpu = settled();
    for config in &configs {
        let started = Instant::now();
        said = handshake(config, server.server.port)?;
        walls.push(started.elapsed());
    }
    let cpu_us = (settled() - cpu) as f64 / 1000.0 / times as f64;
    Ok((walls, cpu_us, said, offered))
}

/// The crate's own connections, `times` of them, each opened and closed: (wall times, CPU µs
/// of this thread, which drives them, per connection).
async fn connections(
    url: &str,
    ca: Option<&std::path::Path>,
    times: usize,
) -> Result<(Vec<Duration>, f64), String> {
    let settings = claimonce::db::Settings::from_url(url, ca, claimonce_tests::db::test_timeouts())
        .map_err(|e| e.to_string())?;
    drop(settings.connect().await.map_err(|e| e.to_string())?);
    let mut walls = Vec::with_capacity(times);
    std::thread::sleep(Duration::from_millis(2));
    let cpu = thread_cpu_ns();
    for _ in 0..times {
        let started = Instant::now();
        let connection = settings.connect().await.map_err(|e| e.to_string())?;
        walls.push(started.elapsed());
        drop(connection);
    }
    std::thread::sleep(Duration::from_millis(2));
    Ok((
        walls,
        (thread_cpu_ns() - cpu) as f64 / 1000.0 / times as f64,
    ))
}

fn main() -> std::process::ExitCode {
    let times = match args() {
        Ok(times) => times,
        Err(stop) => return claimonce_bench::exit_with(stop),
    };
    let server = TlsServer::start();
    let run = || -> Result<(), String> {
        for again in [false, true] {
            let (walls, cpu, said, offered) = handshakes(&server, times, again)?;
            let (median, p99) = median_p99(walls);
            let what = if again { "again" } else { "first" };
            if !again {
                println!(
                    "offered key exchange groups, in order: {}",
                    offered.join(", ")
                );
            }
            println!("{what}: negotiated {said}");
            println!(
                "{what}: handshake alone (SSLRequest + TLS), {times}: median {median:.3} ms, p99 {p99:.3} ms, client CPU {cpu:.1} µs each"
            );
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let (tls, tls_cpu) = runtime.block_on(connections(
            &server.url("localhost", Some("require")),
            Some(&server.ca),
            times,
        ))?;
        let (plain, plain_cpu) = runtime.block_on(connections(
            &server.url("127.0.0.1", Some("disable")),
            None,
            times,
        ))?;
        let ((tls_median, tls_p99), (plain_median, plain_p99)) =
            (median_p99(tls), median_p99(plain));
        println!(
            "the crate's connection, sslmode=require, {times}: median {tls_median:.3} ms, p99 {tls_p99:.3} ms, client CPU {tls_cpu:.1} µs each"
        );
        println!(
            "the crate's connection, sslmode=disable, {times}: median {plain_median:.3} ms, p99 {plain_p99:.3} ms, client CPU {plain_cpu:.1} µs each"
        );
        println!(
            "TLS adds: {:.3} ms at the median, {:.1} µs of client CPU",
            tls_median - plain_median,
            tls_cpu - plain_cpu
        );
        Ok(())
    };
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("handshake: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
