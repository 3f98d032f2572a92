//! Databases for a provider crate's own tests, in this repository or out of it: one private
//! server per test process, the crate's migrations applied once to a template, and a database
//! of its own copied from it for each test, with the provider's own login on it as a
//! deployment has it. Nothing here knows a provider; the claimonce suite's harness is built on
//! the same server ([`crate::postgres`]).
//!
//! ```no_run
//! # async fn example() -> std::io::Result<()> {
//! use claimonce_local::scratch::Scratch;
//! let migrations = claimonce::migrate::sequence(&[claimonce_migrations::SHARED])
//!     .map_err(std::io::Error::other)?;
//! let scratch = Scratch::start("my-provider-tests", migrations).await?;
//! let db = scratch.migrated().await?;
//! let login_url = db.login("my_provider").await?; // the receiver connects with this
//! let admin = db.admin().await?; // a superuser client, for assertions
//! # Ok(()) }
//! ```

use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use claimonce::migrate::Migration;
use tokio::sync::OnceCell;
use tokio_postgres::{Client, NoTls};

use crate::postgres::{Options, Postgres, provider_login_sql};

/// A private server and the migrated template its test databases are copied from.
#[derive(Debug)]
pub struct Scratch {
    server: Postgres,
    prefix: String,
    migrations: Vec<Migration>,
    template: OnceCell<String>,
    next: AtomicU32,
}

/// One test's database.
#[derive(Debug)]
pub struct ScratchDb<'a> {
    scratch: &'a Scratch,
    /// Its name.
    pub name: String,
}

fn io_error(context: &str, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("{context}: {e}"))
}

async fn connect(url: &str) -> io::Result<Client> {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .map_err(|e| io_error("connect to the scratch server", e))?;
    tokio::spawn(connection);
    Ok(client)
}

impl Scratch {
    /// Starts a private server (fsync off, removed when the process exits) in a folder of the
    /// system's temporary directory named after `name` and the process; `migrations` (one
    /// sequence: `claimonce::migrate::sequence`) are what each migrated database holds.
    pub async fn start(name: &str, migrations: Vec<Migration>) -> io::Result<Self> {
        let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        let options = Options {
            settings: vec![("fsync".into(), "off".into())],
            ..Options::default()
        };
        let server = tokio::task::spawn_blocking(move || Postgres::start(&dir, &options))
            .await
            .map_err(|e| io_error("the server's start", e))??;
        let prefix: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .collect();
        Ok(Self {
            server,
            prefix: format!("{prefix}_{}", std::process::id()),
            migrations,
            template: OnceCell::new(),
            next: AtomicU32::new(0),
        })
    }

    /// The server.
    pub fn server(&self) -> &Postgres {
        &self.server
    }

    fn next_name(&self) -> String {
        format!(
            "{}_{}",
            self.prefix,
            self.next.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// The template, migrated on first use. Once per process: roles belong to the server, not
    /// to a database, so two databases migrating side by side would race to create them.
    async fn template(&self) -> io::Result<&str> {
        self.template
            .get_or_try_init(|| async {
                let name = self.next_name();
                connect(&self.server.url("postgres"))
                    .await?
                    .batch_execute(&format!("CREATE DATABASE {name}"))
                    .await
                    .map_err(|e| io_error("create the template", e))?;
                let mut admin = connect(&self.server.url(&name)).await?;
                claimonce::migrate::apply(&mut admin, &self.migrations)
                    .await
                    .map_err(|e| io_error("the migrations", e))?;
                Ok(name)
            })
            .await
            .map(String::as_str)
    }

    /// A database of its own with the migrations applied.
    pub async fn migrated(&self) -> io::Result<ScratchDb<'_>> {
        let template = self.template().await?.to_owned();
        self.copy_of(&template).await
    }

    /// A database of its own with nothing applied (for a migrate function's own test). The
    /// roles the migrations create exist already once a migrated database has been made.
    pub async fn empty(&self) -> io::Result<ScratchDb<'_>> {
        self.template().await?;
        self.copy_of("template0").await
    }

    async fn copy_of(&self, template: &str) -> io::Result<ScratchDb<'_>> {
        let name = self.next_name();
        let admin = connect(&self.server.url("postgres")).await?;
        // A template is briefly busy while another test copies it.
        for attempt in 0.. {
            match admin
                .batch_execute(&format!("CREATE DATABASE {name} TEMPLATE {template}"))
                .await
            {
                Ok(()) => break,
                Err(e) if attempt < 100 && e.code().map(|c| c.code()) == Some("55006") => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => return Err(io_error("create a test database", e)),
            }
        }
        Ok(ScratchDb {
            scratch: self,
            name,
        })
    }
}

impl ScratchDb<'_> {
    /// Its URL as the server's superuser.
    pub fn admin_url(&self) -> String {
        self.scratch.server.url(&self.name)
    }

    /// A superuser client on it, for setting up and asserting.
    pub async fn admin(&self) -> io::Result<Client> {
        connect(&self.admin_url()).await
    }

    /// Creates `provider`'s own login on it (granted only `claimonce_<provider>`, with a
    /// deployment's bounds: [`provider_login_sql`]) and returns the URL a receiver connects
    /// with.
    pub async fn login(&self, provider: &str) -> io::Result<String> {
        let login = format!("{}_{provider}", self.name);
        self.admin()
            .await?
            .batch_execute(&provider_login_sql(&login, provider))
            .await
            .map_err(|e| io_error("create the provider's login", e))?;
        Ok(self.scratch.server.url_as(&login, &self.name))
    }
}
