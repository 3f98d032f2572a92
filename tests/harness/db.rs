//! One PostgreSQL server per test process, one database per test.
//!
//! Without `DATABASE_URL` the harness starts a private server (initdb into a temp dir, a free
//! loopback port) that stops when the test process exits. With it, the URL's server is used
//! and each test gets a database created on it. Either way every test database is a copy of
//! a template that has the project's migrations applied, so a test starts in milliseconds.
//! Test databases are not dropped, so a failed test's data can be inspected.
//!
//! With `CLAIMONCE_TEST_POOLER=pgbouncer` the receivers and function binaries (the code under
//! test) connect through PgBouncer in transaction pooling mode, the local stand-in for RDS
//! Proxy, while set-up and assertions still connect directly. In that pass a test whose code
//! under test never took the pooled URL ([`TestDb::function_url`], [`TestDb::receiver`], ...)
//! fails when its database is dropped, unless it said why with [`TestDb::direct_because`]:
//! so every test either runs through the pooler or names its reason, and the reasons are one
//! `grep direct_because` away.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use claimonce::db::{Database, Settings, Timeouts};
use claimonce::log::{Captured, Log};
use claimonce::prelude::Provider;
use claimonce::{Limits, Receiver};
use claimonce_local::pgbouncer::PgBouncer;
use claimonce_local::postgres::{Options, Postgres};
use tokio::sync::OnceCell;
use tokio_postgres::{Client, NoTls};

struct Server {
    /// URL of the maintenance database, ending in the database name.
    admin_url: String,
    /// Kept so the private server's handle lives as long as the process.
    _private: Option<Postgres>,
    template: String,
    /// The same server through PgBouncer, when the pooled pass is on.
    pooled_admin_url: Option<String>,
}

/// True when this run goes through PgBouncer (`CLAIMONCE_TEST_POOLER=pgbouncer`).
pub fn pooled() -> bool {
    std::env::var("CLAIMONCE_TEST_POOLER").is_ok_and(|v| v == "pgbouncer")
}

/// Starts PgBouncer in front of the server at `admin_url` and returns the pooled URL.
fn start_pooler(admin_url: &str) -> String {
    use std::str::FromStr;
    let config = tokio_postgres::Config::from_str(admin_url).expect("valid DATABASE_URL");
    let upstream = config.get_ports().first().copied().unwrap_or(5432);
    let dir = std::env::temp_dir().join(format!("claimonce-pgbouncer-{}", std::process::id()));
    let pooler = PgBouncer::start(&dir, upstream).expect("start PgBouncer");
    format!(
        "postgres://postgres@127.0.0.1:{}/postgres?sslmode=disable",
        pooler.port
    )
}

static SERVER: OnceCell<Server> = OnceCell::const_new();
static NEXT: AtomicU32 = AtomicU32::new(0);

/// Replaces the database name of a URL (the path segment after the authority).
pub fn with_database(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let authority_end = base.find("://").map_or(0, |i| i + 3);
    let base = match base[authority_end..].find('/') {
        Some(slash) => &base[..authority_end + slash],
        None => base,
    };
    match query {
        Some(q) => format!("{base}/{db}?{q}"),
        None => format!("{base}/{db}"),
    }
}

async fn admin(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .expect("connect to the test server");
    tokio::spawn(connection);
    client
}

async fn server() -> &'static Server {
    SERVER
        .get_or_init(|| async {
            let (admin_url, private) = match std::env::var("DATABASE_URL") {
                Ok(url) if !url.is_empty() => (url, None),
                _ => {
                    let dir =
                        std::env::temp_dir().join(format!("claimonce-test-{}", std::process::id()));
                    let options = Options {
                        settings: vec![
                            ("fsync".into(), "off".into()),
                            ("synchronous_commit".into(), "off".into()),
                            ("full_page_writes".into(), "off".into()),
                            // In the pooled pass every test database and login has a PgBouncer
                            // pool of its own, which keeps its server connections open after
                            // the test (server_idle_timeout); with the migrate tests pooled too
                            // they passed 200 and refused logins.
                            ("max_connections".into(), "1000".into()),
                        ],
                        ..Options::default()
                    };
                    let pg = tokio::task::spawn_blocking(move || Postgres::start(&dir, &options))
                        .await
                        .expect("start task")
                        .expect("start a private PostgreSQL");
                    (pg.url("postgres"), Some(pg))
                }
            };
            let template = format!("claimonce_template_{}", std::process::id());
            let client = admin(&admin_url).await;
            client
                .batch_execute(&format!("CREATE DATABASE {template}"))
                .await
                .expect("create the template database");
            let mut tpl = admin(&with_database(&admin_url, &template)).await;
            claimonce::migrate::apply(&mut tpl, claimonce_local::migrations::ALL)
                .await
                .expect("migrations apply to a fresh database");
            drop(tpl);
            let pooled_admin_url = if pooled() {
                let url = admin_url.clone();
                Some(
                    tokio::task::spawn_blocking(move || start_pooler(&url))
                        .await
                        .expect("pooler task"),
                )
            } else {
                None
            };
            Server {
                admin_url,
                _private: private,
                template,
                pooled_admin_url,
            }
        })
        .await
}

/// A fresh, migrated database for one test.
#[derive(Debug)]
pub struct TestDb {
    /// Its name.
    pub name: String,
    /// A URL to it (as the server's superuser), direct: for set-up and assertions.
    pub url: String,
    /// The URL the code under test uses: through PgBouncer in the pooled pass, else `url`.
    function_url: String,
    /// Whether the code under test took the pooled URL, or why it runs direct.
    route: std::sync::Mutex<Route>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Unused,
    Pooled,
    Direct(&'static str),
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let route = *self
            .route
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if pooled() && route == Route::Unused && !std::thread::panicking() {
            panic!(
                "{}: in the pooled pass nothing under test connected through the pooler; use \
                 function_url(), receiver() or function_url_as(), or say why not with \
                 direct_because()",
                self.name
            );
        }
    }
}

/// Short bounds, so that tests of failures finish quickly.
pub fn test_timeouts() -> Timeouts {
    Timeouts::new(Duration::from_secs(2), Duration::from_secs(5))
}

impl TestDb {
    /// Creates the database from the migrated template.
    pub async fn new() -> Self {
        let server = server().await;
        let name = format!(
            "claimonce_test_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let client = admin(&server.admin_url).await;
        // The template may be briefly busy while another test copies it; retry a few times.
        let mut attempts = 0;
        loop {
            let created = client
                .batch_execute(&format!(
                    "CREATE DATABASE {name} TEMPLATE {}",
                    server.template
                ))
                .await;
            match created {
                Ok(()) => break,
                Err(_) if attempts < 50 => {
                    attempts += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("create test database: {e}"),
            }
        }
        // Each registered provider's own login, as a deployment has it: what `receiver` and
        // `function_url_as` connect as.
        let registry = claimonce_local::functions::all().expect("the provider registry");
        let logins: String = registry
            .iter()
            .map(|f| {
                claimonce_local::postgres::provider_login_sql(
                    &crate::roles::login_name(&name, f.provider),
                    f.provider,
                )
            })
            .collect();
        client
            .batch_execute(&logins)
            .await
            .unwrap_or_else(|e| panic!("create the providers' logins: {e}"));
        let url = with_database(&server.admin_url, &name);
        let function_url = match &server.pooled_admin_url {
            Some(pooled) => with_database(pooled, &name),
            None => url.clone(),
        };
        Self::at(name, url, function_url)
    }

    fn at(name: String, url: String, function_url: String) -> Self {
        Self {
            name,
            url,
            function_url,
            route: std::sync::Mutex::new(Route::Unused),
        }
    }

    /// A handle on a database another part of the test made (a migrate function's target), for
    /// assertions only: it runs nothing under test, so it asks nothing of the pooled pass.
    pub fn for_assertions(url: &str) -> Self {
        let db = Self::at(String::new(), url.to_owned(), url.to_owned());
        db.direct_because("a handle for assertions only");
        db
    }

    /// The URL the code under test uses: through PgBouncer in the pooled pass, else `url`.
    pub fn function_url(&self) -> &str {
        self.mark(Route::Pooled);
        &self.function_url
    }

    /// The URL straight to the server, in either pass, for code under test that must not go
    /// through the pooler, saying why.
    pub fn direct_url(&self, reason: &'static str) -> &str {
        self.direct_because(reason);
        &self.url
    }

    /// Says why this test's code under test connects directly in the pooled pass too.
    pub fn direct_because(&self, reason: &'static str) {
        self.mark(Route::Direct(reason));
    }

    fn mark(&self, route: Route) {
        let mut held = self
            .route
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if *held == Route::Unused {
            *held = route;
        }
    }

    /// The URL the code under test uses as `provider`'s own login (granted only
    /// `claimonce_<provider>`): through PgBouncer in the pooled pass.
    pub fn function_url_as(&self, provider: &str) -> String {
        crate::roles::url_as(
            self.function_url(),
            &crate::roles::login_name(&self.name, provider),
        )
    }

    /// A database migrated from nothing (`template0`), beside this one, as a deployment's is:
    /// what a migration grants or revokes on the database itself (its TEMP privilege) is not
    /// copied with a template. `prepare` runs on the empty database first, as its superuser.
    pub async fn migrated_beside(&self, suffix: &str, prepare: &str) -> TestDb {
        let name = format!("{}_{suffix}", self.name);
        self.direct_because("the code under test runs on the database migrated beside it");
        self.client()
            .await
            .batch_execute(&format!("CREATE DATABASE {name} TEMPLATE template0"))
            .await
            .unwrap_or_else(|e| panic!("create {name}: {e}"));
        let url = with_database(&self.url, &name);
        let function_url = with_database(&self.function_url, &name);
        let db = TestDb::at(name, url, function_url);
        let mut admin = db.client().await;
        admin
            .batch_execute(prepare)
            .await
            .unwrap_or_else(|e| panic!("{prepare}: {e}"));
        claimonce::migrate::apply(&mut admin, claimonce_local::migrations::ALL)
            .await
            .expect("the migrations apply to an empty database");
        db
    }

    /// A plain connection for setting up and checking state.
    pub async fn client(&self) -> Client {
        admin(&self.url).await
    }

    /// Connection settings as a function would build them, with test timeouts.
    pub fn settings(&self) -> Settings {
        Settings::from_url(self.function_url(), None, test_timeouts()).expect("valid test URL")
    }

    /// A receiver for `provider` with its own connection, like one Lambda execution
    /// environment, logging into memory. It logs in as the provider's own login, as in
    /// production, so every delivery of the suite passes the database's claim gate.
    pub fn receiver<P: Provider>(&self, provider: P) -> (Receiver<P>, Captured) {
        let url = self.function_url_as(P::NAME);
        receiver_at(&url, provider)
    }

    /// The first column of the first row of `sql`, as i64.
    pub async fn count(&self, sql: &str) -> i64 {
        let client = self.client().await;
        client
            .query_one(sql, &[])
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .get(0)
    }
}

/// A receiver for `provider` connecting to `url` (a login of one role, say), with test
/// timeouts, logging into memory.
pub fn receiver_at<P: Provider>(url: &str, provider: P) -> (Receiver<P>, Captured) {
    let settings = Settings::from_url(url, None, test_timeouts()).expect("valid test URL");
    receiver_with(settings, provider)
}

/// A receiver for `provider` on connection `settings` (TLS, IAM, a secret, its own bounds),
/// logging into memory: one Lambda execution environment as a function's `main` wires it.
pub fn receiver_with<P: Provider>(settings: Settings, provider: P) -> (Receiver<P>, Captured) {
    pooled_receiver(settings, provider, 1)
}

/// [`receiver_with`] holding up to `connections` connections: one execution environment
/// serving that many deliveries at once (Lambda Managed Instances).
pub fn pooled_receiver<P: Provider>(
    settings: Settings,
    provider: P,
    connections: usize,
) -> (Receiver<P>, Captured) {
    let (log, lines) = Log::capture();
    let database = Database::new(settings).with_connections(connections);
    let receiver = Receiver::new(provider, database, Limits::default(), log);
    (receiver, lines)
}

/// Runs `deliver` once per environment, all released together, as simultaneous deliveries to
/// separate Lambda execution environments would be. Each environment connects first, so the
/// race is between transactions, not connection set-ups. Results come back in order.
pub async fn all_at_once<P, F, Fut, T>(environments: Vec<Receiver<P>>, deliver: F) -> Vec<T>
where
    P: Provider,
    F: Fn(std::sync::Arc<Receiver<P>>) -> Fut,
    Fut: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let mut shared = Vec::with_capacity(environments.len());
    for environment in environments {
        environment.warm_up().await;
        shared.push(std::sync::Arc::new(environment));
    }
    released_together(shared, deliver).await
}

/// Runs `deliver` once per item of `workers`, all released together, and returns the results
/// in order: each its own environment ([`all_at_once`]), or the same one many times, as
/// several invocations at once in one environment of Lambda Managed Instances.
pub async fn released_together<P, F, Fut, T>(
    workers: Vec<std::sync::Arc<Receiver<P>>>,
    deliver: F,
) -> Vec<T>
where
    P: Provider,
    F: Fn(std::sync::Arc<Receiver<P>>) -> Fut,
    Fut: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(workers.len()));
    let mut tasks = Vec::with_capacity(workers.len());
    for environment in workers {
        let delivery = deliver(environment);
        let barrier = std::sync::Arc::clone(&barrier);
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            delivery.await
        }));
    }
    let mut results = Vec::with_capacity(tasks.len());
    for task in tasks {
        results.push(task.await.expect("delivery task"));
    }
    results
}

/// The SQLSTATE of `sql` (one or more statements) run on `client`, or "ok".
pub async fn sqlstate(client: &Client, sql: &str) -> String {
    match client.batch_execute(sql).await {
        Ok(()) => "ok".to_owned(),
        Err(e) => e
            .code()
            .map_or_else(|| e.to_string(), |c| c.code().to_owned()),
    }
}
