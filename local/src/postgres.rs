//! A private PostgreSQL server for tests and the local run: `initdb` into a directory, started
//! on a free loopback port, and stopped when the process that started it exits.
//!
//! PostgreSQL refuses to run as root, so when we are root the server commands run as the
//! `postgres` user (created by Debian's postgresql packages).

use std::io;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A running private server.
#[derive(Debug)]
pub struct Postgres {
    /// Loopback port it listens on.
    pub port: u16,
    /// Its directory (data, socket, log).
    pub dir: PathBuf,
}

/// How to start the server.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Extra `-c name=value` settings.
    pub settings: Vec<(String, String)>,
    /// Keep the data directory when the process exits (the local run), instead of removing it.
    pub keep: bool,
    /// Listen on this port instead of a free one.
    pub port: Option<u16>,
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

/// The directory holding `initdb`, `postgres` and `pg_isready`: `PG_BIN` when set, else the
/// newest `/usr/lib/postgresql/<version>/bin`, else whatever is on `PATH`.
pub fn bin_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("PG_BIN") {
        return Some(PathBuf::from(dir));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

/// The path of the PostgreSQL program `name` (`PG_BIN`, the newest `/usr/lib/postgresql/<v>/bin`, or
/// `PATH`).
pub fn tool(name: &str) -> PathBuf {
    bin_dir().map_or_else(|| PathBuf::from(name), |dir| dir.join(name))
}

/// Runs `program args` as the server's user.
fn server_command(program: &Path, args: &[&str]) -> Command {
    if running_as_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program).args(args);
        c
    } else {
        let mut c = Command::new(program);
        c.args(args);
        c
    }
}

fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn check(status: io::Result<std::process::Output>, what: &str) -> io::Result<()> {
    let output = status.map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("{what}: {e} (are the PostgreSQL server binaries installed? set PG_BIN)"),
        )
    })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "{what} failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }
}

impl Postgres {
    /// Initialises (if needed) and starts a server in `dir`, and waits until it accepts
    /// connections. User `postgres`, trust authentication, loopback only.
    pub fn start(dir: &Path, options: &Options) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let dir = dir.canonicalize()?;
        let data = dir.join("data");
        hand_to_server_user(&dir)?;
        stop_a_stale_server(&data)?;
        if !data.join("PG_VERSION").exists() {
            let data_arg = data.to_string_lossy().into_owned();
            check(
                server_command(
                    &tool("initdb"),
                    &[
                        "-D",
                        &data_arg,
                        "-U",
                        "postgres",
                        "--auth=trust",
                        "-E",
                        "UTF8",
                        "--no-locale",
                        "--no-sync",
                    ],
                )
                .output(),
                "initdb",
            )?;
        }
        let port = match options.port {
            Some(p) => p,
            None => free_port()?,
        };
        let mut args = vec![
            "-D".to_owned(),
            data.to_string_lossy().into_owned(),
            "-p".to_owned(),
            port.to_string(),
            "-k".to_owned(),
            dir.to_string_lossy().into_owned(),
            "-c".to_owned(),
            "listen_addresses=127.0.0.1".to_owned(),
            "-c".to_owned(),
            "max_connections=200".to_owned(),
        ];
        for (name, value) in &options.settings {
            args.push("-c".to_owned());
            args.push(format!("{name}={value}"));
        }
        let cleanup = if options.keep {
            String::new()
        } else {
            format!("rm -rf {}", shell_quote(&dir.to_string_lossy()))
        };
        supervise(&tool("postgres"), &args, &dir.join("server.log"), &cleanup)?;
        let server = Self { port, dir };
        server.wait_ready(Duration::from_secs(30))?;
        Ok(server)
    }

    fn wait_ready(&self, limit: Duration) -> io::Result<()> {
        let started = Instant::now();
        loop {
            let ready = Command::new(tool("pg_isready"))
                .args(["-q", "-h", "127.0.0.1", "-p", &self.port.to_string()])
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return Ok(());
            }
            if started.elapsed() > limit {
                let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
                return Err(io::Error::other(format!(
                    "PostgreSQL did not start within {limit:?}: {log}"
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops the server (fast shutdown: open transactions roll back) and waits for it. With
    /// `Options::keep` the data stays, and `start` on the same directory and port brings the
    /// same database back.
    pub fn stop(&self) -> io::Result<()> {
        stop_server(&self.dir.join("data"), "pg_ctl stop")
    }

    /// A `postgres://` URL for database `db` as user `postgres`, plain TCP on loopback.
    pub fn url(&self, db: &str) -> String {
        self.url_as("postgres", db)
    }

    /// A URL to database `db` as `user` (trust authentication: no password).
    pub fn url_as(&self, user: &str, db: &str) -> String {
        format!(
            "postgres://{user}@127.0.0.1:{}/{db}?sslmode=disable",
            self.port
        )
    }
}

/// A server an earlier run left on `data` (one whose watchdog was killed with it, or from a
/// version before the watchdog held a pipe) is stopped, so that this start does not wait on
/// its `postmaster.pid` and fail: told on stderr, since it was not this run's.
fn stop_a_stale_server(data: &Path) -> io::Result<()> {
    let Ok(pid_file) = std::fs::read_to_string(data.join("postmaster.pid")) else {
        return Ok(());
    };
    let Some(pid) = pid_file
        .lines()
        .next()
        .and_then(|l| l.trim().parse::<u32>().ok())
    else {
        return Ok(());
    };
    let alive = Command::new("kill")
        .args(["-0", &pid.to_string()])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !alive {
        // PostgreSQL replaces a pid file whose process is gone by itself.
        return Ok(());
    }
    eprintln!(
        "claimonce-local: stopping the PostgreSQL (pid {pid}) an earlier run left on {}",
        data.display()
    );
    stop_server(data, "pg_ctl stop (a server an earlier run left)")
}

/// Stops the server on `data` (fast shutdown) and waits for it; `what` names the step in an
/// error.
fn stop_server(data: &Path, what: &str) -> io::Result<()> {
    let data = data.to_string_lossy().into_owned();
    check(
        server_command(&tool("pg_ctl"), &["-D", &data, "stop", "-m", "fast", "-w"]).output(),
        what,
    )
}

/// Starts `program args` in the background as the server user, under a watchdog that stops it
/// (SIGINT: PostgreSQL's fast shutdown, PgBouncer's safe one) once the process that started
/// it is gone, however that process ended, then runs `cleanup`. Nothing outlives its run.
///
/// How the watchdog knows: this process holds the write end of the watchdog's stdin and never
/// writes to it, so the watchdog's read ends when this process is gone, whether it exited, was
/// killed (SIGKILL included) or lost its terminal; no `/proc`, nothing Linux-only. The
/// watchdog and the server run in a process group of their own, so the signals a terminal
/// sends its foreground job (SIGHUP when it closes, SIGINT on Ctrl-C) reach only this process,
/// and the watchdog outlives it to stop the server.
pub fn supervise(program: &Path, args: &[String], log: &Path, cleanup: &str) -> io::Result<()> {
    watch(program, args, log, cleanup, true)
}

/// [`supervise`], with `program` run as this process's own user (an emulator from a private
/// virtualenv the server user cannot read) in the folder `dir`, which is its working
/// directory and its `TMPDIR` and holds its log (`dir/log`); the folder, and the files
/// `leftovers` names (what it writes elsewhere whatever `TMPDIR` says), are removed once it has
/// stopped.
pub fn supervise_as_self(
    program: &Path,
    args: &[String],
    dir: &Path,
    leftovers: &[&str],
) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let quoted = shell_quote(&dir.to_string_lossy());
    let inside = format!("cd {quoted} && TMPDIR={quoted} exec");
    let mut cleanup = format!("rm -rf {quoted}");
    for leftover in leftovers {
        cleanup.push(' ');
        cleanup.push_str(&shell_quote(leftover));
    }
    watch_in(program, args, &dir.join("log"), &cleanup, false, &inside)
}

fn watch(
    program: &Path,
    args: &[String],
    log: &Path,
    cleanup: &str,
    as_server_user: bool,
) -> io::Result<()> {
    watch_in(program, args, log, cleanup, as_server_user, "")
}

/// [`watch`], the program started after `prefix` (a `cd` and variables, ending in `exec`).
fn watch_in(
    program: &Path,
    args: &[String],
    log: &Path,
    cleanup: &str,
    as_server_user: bool,
    prefix: &str,
) -> io::Result<()> {
    use std::os::unix::process::CommandExt as _;
    let quoted: Vec<String> = args.iter().map(|a| shell_quote(a)).collect();
    let script = format!(
        "({prefix} {program} {args}) >{log} 2>&1 </dev/null & child=$!\n\
         cat >/dev/null\n\
         kill -INT $child 2>/dev/null; wait $child; {cleanup}",
        program = shell_quote(&program.to_string_lossy()),
        args = quoted.join(" "),
        log = shell_quote(&log.to_string_lossy()),
    );
    let mut watchdog = if as_server_user && running_as_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--", "sh", "-c", &script]);
        c
    } else {
        let mut c = Command::new("sh");
        c.args(["-c", &script]);
        c
    };
    let mut child = watchdog
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    // Held, unwritten, for as long as this process lives: its end is the watchdog's signal.
    // (Rust opens it close-on-exec, so no other child inherits it and keeps it open.)
    if let Some(stdin) = child.stdin.take() {
        HELD.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(stdin);
    }
    Ok(())
}

/// The watchdogs' stdin write ends, kept until the process exits.
static HELD: std::sync::Mutex<Vec<std::process::ChildStdin>> = std::sync::Mutex::new(Vec::new());

/// Makes `dir` (recursively) owned by the server user when we are root.
pub fn hand_to_server_user(dir: &Path) -> io::Result<()> {
    if !running_as_root() {
        return Ok(());
    }
    check(
        Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(dir)
            .output(),
        "chown to the postgres user",
    )?;
    let reachable = Command::new("runuser")
        .args(["-u", "postgres", "--", "test", "-x"])
        .arg(dir)
        .status()
        .is_ok_and(|s| s.success());
    if reachable {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "PostgreSQL runs as the postgres user (it refuses root), which cannot reach {}: a \
             folder above it is not searchable by others (a home folder of mode 0700, such as \
             /root). Set CLAIMONCE_LOCAL_DIR (the local run) or TMPDIR (the tests) to a folder \
             it can reach, such as /tmp/claimonce-dev, or clone the project elsewhere",
            dir.display()
        )))
    }
}

/// SQL that makes `login` a provider's own database login, as a deployment has it (DEPLOY.md):
/// granted only `claimonce_<provider>`, with the statement and idle-in-transaction bounds the
/// migrate function gives (3 s). Idempotent. The names are ours (a provider's ledger name and a
/// login built from it), plain identifiers, so writing them into the SQL is safe.
pub fn provider_login_sql(login: &str, provider: &str) -> String {
    format!(
        "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{login}') \
         THEN CREATE ROLE {login} LOGIN IN ROLE claimonce_{provider}; END IF; END $$; \
         ALTER ROLE {login} SET statement_timeout = '3s'; \
         ALTER ROLE {login} SET idle_in_transaction_session_timeout = '3s'; \
         ALTER ROLE {login} SET lock_timeout = '2s';"
    )
}

pub fn free_loopback_port() -> io::Result<u16> {
    free_port()
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}
