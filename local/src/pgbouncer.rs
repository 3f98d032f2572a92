//! PgBouncer in transaction pooling mode in front of a private server: the local stand-in for
//! RDS Proxy's multiplexing. Anything that relies on session state (named prepared
//! statements, session `SET`, advisory locks, temp tables) breaks or misbehaves behind it.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::postgres::{free_loopback_port, hand_to_server_user, supervise};

/// A running PgBouncer.
#[derive(Debug)]
pub struct PgBouncer {
    /// Loopback port clients connect to.
    pub port: u16,
}

fn binary() -> PathBuf {
    ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("pgbouncer"))
}

/// The installed PgBouncer's (major, minor) version.
pub fn version() -> Option<(u32, u32)> {
    let output = Command::new(binary()).arg("--version").output().ok()?;
    let text = String::from_utf8_lossy(&output.stdout);
    let number = text.lines().next()?.strip_prefix("PgBouncer ")?;
    let mut parts = number.split('.').map(|p| p.parse::<u32>().ok());
    Some((parts.next()??, parts.next()??))
}

impl PgBouncer {
    /// Starts PgBouncer in `dir`, pooling every database of the server on `upstream_port`
    /// in transaction mode, for any user of that server (trust authentication; a user not in
    /// the auth file is looked up in the server as `postgres`), so a function's own login
    /// goes through it as it goes through RDS Proxy.
    pub fn start(dir: &Path, upstream_port: u16) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let port = free_loopback_port()?;
        let d = dir.to_string_lossy();
        // RDS Proxy pins a session that prepares a named statement; PgBouncer 1.21 and newer
        // could instead track them for the client (max_prepared_statements > 0), which would
        // hide that. Off, as in every version before 1.21, which refuses the setting.
        let prepared = if version().is_some_and(|v| v >= (1, 21)) {
            "max_prepared_statements = 0\n"
        } else {
            ""
        };
        std::fs::write(dir.join("userlist.txt"), "\"postgres\" \"\"\n")?;
        std::fs::write(
            dir.join("pgbouncer.ini"),
            format!(
                "[databases]\n\
                 * = host=127.0.0.1 port={upstream_port}\n\
                 [pgbouncer]\n\
                 listen_addr = 127.0.0.1\n\
                 listen_port = {port}\n\
                 unix_socket_dir =\n\
                 auth_type = trust\n\
                 auth_file = {d}/userlist.txt\n\
                 auth_user = postgres\n\
                 pool_mode = transaction\n\
                 max_client_conn = 2000\n\
                 default_pool_size = 40\n\
                 server_reset_query =\n\
                 ignore_startup_parameters = extra_float_digits\n\
                 pidfile = {d}/pgbouncer.pid\n\
                 {prepared}"
            ),
        )?;
        hand_to_server_user(dir)?;
        supervise(
            &binary(),
            &[dir.join("pgbouncer.ini").to_string_lossy().into_owned()],
            &dir.join("pgbouncer.log"),
            "",
        )?;
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if started.elapsed() > Duration::from_secs(15) {
                let log = std::fs::read_to_string(dir.join("pgbouncer.log")).unwrap_or_default();
                return Err(io::Error::other(format!(
                    "PgBouncer did not start (is it installed? apt-get install pgbouncer): {log}"
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(Self { port })
    }

    /// True when a PgBouncer binary is installed.
    pub fn installed() -> bool {
        Command::new(binary())
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    }
}
