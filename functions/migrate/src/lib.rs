//! Migrations on deploy: a Lambda function that applies the deployment's migrations (the shared
//! ones and those of the providers it includes, `CLAIMONCE_PROVIDERS`: [`included`]) with the
//! shared runner, which applies each new one in its own transaction, lowest version first,
//! records it, skips what is recorded and refuses a recorded migration whose file changed.
//! A provider crate kept in another repository builds this same function for its own
//! deployment with [`run_from_env_with`], handing it its migrations beside the shared ones.
//!
//! Two ways in, one function:
//! - a CloudFormation custom resource (the template's `DatabaseMigrations`): `Create` and
//!   `Update` apply and report `Data.Applied`, `Delete` succeeds without touching the
//!   database (the schema outlives the stack), and so does a rollback's `Update` (it names the
//!   previous function version; migrations are forward-only). The answer is PUT to the request's
//!   `ResponseURL`, success or failure, so a deployment never waits in vain;
//! - a plain invoke (`aws lambda invoke --payload '{}'`): returns `{"applied": [...]}`.
//!
//! After the migrations it sets the login-role defaults of the handler users
//! (`DB_HANDLER_USERS`): `statement_timeout`, `idle_in_transaction_session_timeout` and
//! `lock_timeout` (2 s, or the statement timeout if shorter), so a
//! delivery sends no `SET` on the wire (a `SET` would pin the session behind RDS Proxy). A user
//! given as `user:role` (`stripe_webhook:claimonce_stripe`) is also granted its provider's role
//! and taken out of the shared `claimonce_handler` of earlier releases (migration V9), so one
//! provider's login cannot touch another's data.
//!
//! Every wait is bounded so that CloudFormation always gets an answer in time: the server
//! stops a migration that waits on a lock or runs too long (`MIGRATE_LOCK_TIMEOUT_MS`,
//! `MIGRATE_STATEMENT_TIMEOUT_MS`), and the whole run must end [`ANSWER_MARGIN`] before the
//! invocation's deadline, leaving time for the answer's PUT.
//!
//! Failure reasons are data-free: the migration, the SQLSTATE and the object names, never the
//! server's message (which can quote values) and never a credential.

pub mod bootstrap;
pub mod cfn;

use std::fmt;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use claimonce::config::{self, ConfigError};
use claimonce::db::{Settings, Timeouts};
use claimonce::log::Log;
use claimonce::migrate::{self, Bounds, MigrateError, Migration};
use lambda_runtime::{LambdaEvent, service_fn};
use serde_json::{Map, Value, json};
use tokio_postgres::Client;
use tokio_postgres::types::Type;

use crate::bootstrap::Bootstrap;

/// The physical id of the migrations resource: one per database, stable across updates.
pub const PHYSICAL_RESOURCE_ID: &str = "claimonce-database-migrations";

/// How long before the invocation's deadline the database work must end: the answer's PUT
/// can take [`cfn::PUT_ATTEMPTS`] x [`cfn::PUT_TIMEOUT`] plus its back-off (3 x 10 s + 1.5 s =
/// 31.5 s), and CloudFormation gets no answer at all from a function Lambda has stopped.
pub const ANSWER_MARGIN: Duration = Duration::from_secs(40);

/// A PostgreSQL role name from `DB_HANDLER_USERS`: 1 to 63 ASCII letters, digits, `_` or
/// `-`, starting with a letter or `_`. Always written double-quoted into SQL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleName(String);

impl RoleName {
    /// Checks a role name; the error names it (a role name is not a secret).
    pub fn parse(name: &str) -> Result<Self, ConfigError> {
        let mut chars = name.chars();
        let valid = name.len() <= 63
            && chars
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if valid {
            Ok(Self(name.to_owned()))
        } else {
            Err(ConfigError::new(format!(
                "DB_HANDLER_USERS: {name:?} is not a role name this function accepts (1 to 63 \
                 ASCII letters, digits, _ or -, starting with a letter or _)"
            )))
        }
    }

    /// The name as an SQL identifier. The characters allowed cannot end the quotes.
    fn quoted(&self) -> String {
        format!("\"{}\"", self.0)
    }

    /// The name as an SQL string literal. The characters allowed cannot end the quotes.
    fn literal(&self) -> String {
        format!("'{}'", self.0)
    }
}

impl fmt::Display for RoleName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One entry of `DB_HANDLER_USERS`: a webhook function's login user and, when given
/// (`user:role`), the provider role it is moved onto.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandlerUser {
    /// The login user.
    pub user: RoleName,
    /// Its provider's role (`claimonce_<provider>`), granted by every run.
    pub role: Option<RoleName>,
}

impl HandlerUser {
    /// Reads `user` or `user:role`; the error names the entry (role names are not secrets).
    pub fn parse(entry: &str) -> Result<Self, ConfigError> {
        Ok(match entry.split_once(':') {
            None => Self {
                user: RoleName::parse(entry)?,
                role: None,
            },
            Some((user, role)) if role.starts_with("claimonce_") => Self {
                user: RoleName::parse(user)?,
                role: Some(RoleName::parse(role)?),
            },
            Some(_) => {
                return Err(ConfigError::new(format!(
                    "DB_HANDLER_USERS: {entry:?}: the role after ':' is a provider's role, \
                     claimonce_<provider>"
                )));
            }
        })
    }
}

/// The receivers' login users named in their database secrets: `DB_HANDLER_SECRETS`, each
/// entry `claimonce_<provider>=<secret ARN>`, the secret the standard RDS JSON whose
/// `username` is the receiver's login (a stack with `DatabaseAuth=secret`). Each is read with
/// `aws` and becomes `username:claimonce_<provider>`, so every deployed receiver's login gets
/// its provider's role and its timeouts without being listed by hand. A secret that cannot be
/// read, or names no user, is a configuration error naming its provider's role (never the
/// secret's text).
pub async fn handler_users_from_secrets(
    raw: &str,
    aws: &aws_config::SdkConfig,
) -> Result<Vec<HandlerUser>, ConfigError> {
    let mut users = Vec::new();
    for entry in raw.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((role, arn)) = entry.split_once('=') else {
            return Err(ConfigError::new(format!(
                "DB_HANDLER_SECRETS: an entry is not claimonce_<provider>=<secret ARN> \
                 ({} characters)",
                entry.len()
            )));
        };
        if !role.starts_with("claimonce_") {
            return Err(ConfigError::new(format!(
                "DB_HANDLER_SECRETS: {role:?} is not a provider's role, claimonce_<provider>"
            )));
        }
        let role = RoleName::parse(role)?;
        let what = format!("the database secret of {role}'s receiver");
        let text = claimonce::auth::fetch_secret_string(aws, arn, &what)
            .await
            .map_err(|e| ConfigError::new(format!("DB_HANDLER_SECRETS: {e}")))?;
        let username = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v.get("username")?.as_str().map(str::to_owned))
            .ok_or_else(|| {
                ConfigError::new(format!(
                    "DB_HANDLER_SECRETS: {what} holds no username (the standard RDS secret JSON)"
                ))
            })?;
        users.push(HandlerUser {
            user: RoleName::parse(&username)?,
            role: Some(role),
        });
    }
    Ok(users)
}

/// What a run does besides connecting: its server-side bounds, and the handler login roles
/// whose defaults it sets afterwards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// `MIGRATE_LOCK_TIMEOUT_MS` (500), `MIGRATE_STATEMENT_TIMEOUT_MS` (240000) and
    /// `MIGRATE_LOCK_ATTEMPTS` (5).
    pub bounds: Bounds,
    /// `DB_HANDLER_USERS`: comma-separated login roles of the webhook functions, each
    /// `user` or `user:role` (none by default).
    pub handler_users: Vec<HandlerUser>,
    /// `DB_HANDLER_STATEMENT_TIMEOUT_MS` (3000): those roles' `statement_timeout` and
    /// `idle_in_transaction_session_timeout`.
    pub handler_timeout: Duration,
    /// `DB_JOB_USERS`: comma-separated login roles of the scheduled functions, each
    /// `user:claimonce_sweeper` or `user:claimonce_relay`, granted that role on every run (no
    /// timeouts: a job sets its own per statement).
    pub job_users: Vec<HandlerUser>,
    /// `DB_CREATE_LOGINS`: a role (`rds_iam` on RDS and Aurora) that makes every run create the
    /// handler and job users that do not exist yet (`LOGIN`, no password) and grant each that
    /// role, so a deployment that logs in with IAM tokens needs no user made by hand. Unset
    /// (the default): the users must exist, and a missing one fails the run by name.
    pub create_logins: Option<RoleName>,
    /// `MIGRATE_LOOPBACK_RESPONSE_URL=1`, for tests only (the template never sets it): a
    /// custom-resource answer may also go to a loopback `http` URL. Otherwise only
    /// CloudFormation's `https` S3 URLs are answered ([`cfn::response_url_allowed`]).
    pub loopback_response_url: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            // Shorter than a delivery's own lock wait (the effect functions' 2 s): deliveries
            // that need the same table queue behind the migration's pending lock, so a
            // migration that waited longer would fail them. Refused, it is tried again after a
            // pause (five attempts in all, about 6 s at most), when the queue has drained.
            bounds: Bounds {
                lock: Duration::from_millis(500),
                // Below the 300 s function timeout less ANSWER_MARGIN (260 s), so that one
                // long statement is stopped by the server with a precise reason (57014).
                statement: Duration::from_secs(240),
                lock_attempts: 5,
            },
            handler_users: Vec::new(),
            handler_timeout: Duration::from_secs(3),
            job_users: Vec::new(),
            create_logins: None,
            loopback_response_url: false,
        }
    }
}

impl Options {
    /// From the environment (names above); a bad value is a configuration error.
    pub fn from_env() -> Result<Self, ConfigError> {
        let defaults = Self::default();
        let ms = |name: &str, default: Duration| -> Result<Duration, ConfigError> {
            let default = u64::try_from(default.as_millis()).unwrap_or(u64::MAX);
            match config::number(name, default)? {
                0 => Err(ConfigError::new(format!("{name} must be greater than 0"))),
                n => Ok(Duration::from_millis(n)),
            }
        };
        let users = |name: &str| -> Result<Vec<HandlerUser>, ConfigError> {
            config::optional(name)
                .unwrap_or_default()
                .split(',')
                .map(str::trim)
                .filter(|entry| !entry.is_empty())
                .map(|entry| {
                    HandlerUser::parse(entry).map_err(|e| {
                        ConfigError::new(e.to_string().replacen("DB_HANDLER_USERS", name, 1))
                    })
                })
                .collect()
        };
        let handler_users = users("DB_HANDLER_USERS")?;
        let job_users = users("DB_JOB_USERS")?;
        if let Some(bare) = job_users.iter().find(|u| {
            !matches!(
                u.role.as_ref().map(|r| r.0.as_str()),
                Some("claimonce_sweeper" | "claimonce_relay")
            )
        }) {
            return Err(ConfigError::new(format!(
                "DB_JOB_USERS: {} is given as user:claimonce_sweeper or user:claimonce_relay",
                bare.user
            )));
        }
        // A receiver or job that logged in as the migrate user would hold every privilege the
        // migrations need, and its login defaults would bound the migrations too.
        let own = config::optional("DB_USER");
        if let Some(clash) = handler_users
            .iter()
            .chain(&job_users)
            .find(|u| Some(&u.user.0) == own.as_ref())
        {
            return Err(ConfigError::new(format!(
                "{} is DB_USER, the migrate function's own login: every function logs in as a \
                 user of its own",
                clash.user
            )));
        }
        let create_logins = config::optional("DB_CREATE_LOGINS")
            .map(|role| {
                RoleName::parse(&role).map_err(|e| {
                    ConfigError::new(e.to_string().replacen(
                        "DB_HANDLER_USERS",
                        "DB_CREATE_LOGINS",
                        1,
                    ))
                })
            })
            .transpose()?;
        Ok(Self {
            bounds: Bounds {
                lock: ms("MIGRATE_LOCK_TIMEOUT_MS", defaults.bounds.lock)?,
                statement: ms("MIGRATE_STATEMENT_TIMEOUT_MS", defaults.bounds.statement)?,
                lock_attempts: match config::number(
                    "MIGRATE_LOCK_ATTEMPTS",
                    u64::from(defaults.bounds.lock_attempts),
                )? {
                    n @ 1..=20 => u32::try_from(n).unwrap_or(1),
                    _ => {
                        return Err(ConfigError::new(
                            "MIGRATE_LOCK_ATTEMPTS must be between 1 and 20".to_owned(),
                        ));
                    }
                },
            },
            handler_users,
            handler_timeout: ms("DB_HANDLER_STATEMENT_TIMEOUT_MS", defaults.handler_timeout)?,
            job_users,
            create_logins,
            loopback_response_url: match config::optional("MIGRATE_LOOPBACK_RESPONSE_URL") {
                None => false,
                Some(v) if v == "1" => true,
                Some(_) => {
                    return Err(ConfigError::new(
                        "MIGRATE_LOOPBACK_RESPONSE_URL is 1 or unset".to_owned(),
                    ));
                }
            },
        })
    }
}

/// What was applied, or why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Versions applied by this run, in order (empty when already up to date).
    pub applied: Vec<i32>,
    /// The newest version this function knows.
    pub latest: i32,
}

/// The migrate function: database settings (or the configuration error, reported to every
/// request instead of leaving CloudFormation without an answer), the migrations and a log.
#[derive(Debug)]
pub struct Migrator {
    settings: Result<Settings, ConfigError>,
    options: Result<Options, ConfigError>,
    /// The master's first login, when the deployment has one (the quick start).
    bootstrap: Result<Option<Bootstrap>, ConfigError>,
    migrations: &'static [Migration],
    log: Log,
    /// The published version this code runs as (`AWS_LAMBDA_FUNCTION_VERSION`), if any.
    version: Option<String>,
}

fn database_error(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => {
            let mut text = format!("sqlstate {}", db.code().code());
            for (what, name) in [
                ("table", db.table()),
                ("column", db.column()),
                ("constraint", db.constraint()),
            ] {
                if let Some(name) = name {
                    text.push_str(&format!(", {what} {name}"));
                }
            }
            text
        }
        None if error.is_closed() => "connection closed".into(),
        None => "connection error".into(),
    }
}

impl Migrator {
    /// Assembles a migrator.
    pub fn new(
        settings: Result<Settings, ConfigError>,
        migrations: &'static [Migration],
        log: Log,
    ) -> Self {
        Self {
            settings,
            options: Ok(Options::default()),
            bootstrap: Ok(None),
            migrations,
            log,
            version: None,
        }
    }

    /// Replaces the default [`Options`] (or records why they could not be read, which every
    /// request is then answered with).
    pub fn with_options(mut self, options: Result<Options, ConfigError>) -> Self {
        self.options = options;
        self
    }

    /// Logs in as the master user first on every run, to make the migrate user and the logins
    /// ([`Bootstrap`]), or records why that cannot be set up (every request is then answered
    /// with it).
    pub fn with_bootstrap(mut self, bootstrap: Result<Option<Bootstrap>, ConfigError>) -> Self {
        self.bootstrap = bootstrap;
        self
    }

    /// Declares the published function version this code runs as (Lambda's
    /// `AWS_LAMBDA_FUNCTION_VERSION`; `$LATEST` counts as none).
    pub fn with_version(mut self, version: Option<String>) -> Self {
        self.version = version.filter(|v| v != "$LATEST");
        self
    }

    /// True when `request` names another version of this function than the one running.
    /// That is CloudFormation rolling the resource back to the previous deploy's properties
    /// (the old version) while the alias still runs the new code: migrations are
    /// forward-only, so there is nothing to do, and applying the new code's migrations again
    /// (perhaps the one that just failed) would leave the stack unable to roll back.
    fn is_for_another_version(&self, request: &cfn::Request) -> bool {
        match (&self.version, &request.resource_properties.function_version) {
            (Some(running), Some(requested)) => {
                requested.rsplit(':').next() != Some(running.as_str())
            }
            _ => false,
        }
    }

    /// The newest version known.
    pub fn latest(&self) -> i32 {
        self.migrations.iter().map(|m| m.version).max().unwrap_or(0)
    }

    fn describe(&self, error: &MigrateError, bounds: Bounds) -> String {
        let text = self.describe_error(error);
        let code = match error {
            MigrateError::Database { error, .. } => error.code().map(|c| c.code()),
            _ => None,
        };
        match code {
            Some("55P03") => format!(
                "{text}: a lock was not granted within MIGRATE_LOCK_TIMEOUT_MS ({} ms), {} times; \
                 another migration run or a long transaction holds it (pg_locks shows which)",
                bounds.lock.as_millis(),
                bounds.lock_attempts
            ),
            Some("57014") => format!(
                "{text}: a statement ran longer than MIGRATE_STATEMENT_TIMEOUT_MS ({} ms) and was \
                 rolled back",
                bounds.statement.as_millis()
            ),
            _ => text,
        }
    }

    fn describe_error(&self, error: &MigrateError) -> String {
        match error {
            MigrateError::Database {
                version: Some(v),
                error,
            } => {
                let name = self
                    .migrations
                    .iter()
                    .find(|m| m.version == *v)
                    .map_or("", |m| m.name);
                format!("migration V{v}__{name} failed: {}", database_error(error))
            }
            MigrateError::Database {
                version: None,
                error,
            } => format!("migration bookkeeping failed: {}", database_error(error)),
            // The others' messages hold no data: `Changed` names only the version.
            _ => error.to_string(),
        }
    }

    /// Connects, applies every migration not yet recorded and sets the handler roles'
    /// defaults, with no deadline but the server-side bounds.
    pub async fn apply(&self) -> Result<Outcome, String> {
        self.apply_until(None).await
    }

    /// As [`Migrator::apply`], giving up at `deadline`: the connection is then dropped, so
    /// nothing more is sent and the open transaction, never committed, is rolled back by the
    /// server (its statement ends at the latest at `MIGRATE_STATEMENT_TIMEOUT_MS`). A run
    /// retried meanwhile waits for that transaction's lock for at most
    /// `MIGRATE_LOCK_TIMEOUT_MS`, and answers too.
    pub async fn apply_until(&self, deadline: Option<Instant>) -> Result<Outcome, String> {
        let settings = self.settings.as_ref().map_err(ToString::to_string)?;
        let options = self.options.as_ref().map_err(ToString::to_string)?;
        let bootstrap = self.bootstrap.as_ref().map_err(ToString::to_string)?;
        let work = async {
            if let Some(bootstrap) = bootstrap {
                bootstrap.run(options).await?;
            }
            let mut client = settings.connect().await.map_err(|e| e.to_string())?;
            let applied = migrate::apply_within(&mut client, self.migrations, options.bounds)
                .await
                .map_err(|e| self.describe(&e, options.bounds))?;
            // After a bootstrap the logins exist, granted the IAM role by the one user who may
            // grant it (the master).
            configure_handlers(&client, options, bootstrap.is_none()).await?;
            Ok::<_, String>(applied)
        };
        let applied = match deadline {
            None => work.await?,
            Some(deadline) => tokio::time::timeout_at(deadline.into(), work)
                .await
                .map_err(|_| {
                    format!(
                        "the migrations did not finish in this invocation's time (its timeout \
                         less {} s for the answer); nothing more was committed, the open \
                         migration was rolled back, and a new deploy continues from there",
                        ANSWER_MARGIN.as_secs()
                    )
                })??,
        };
        Ok(Outcome {
            applied,
            latest: self.latest(),
        })
    }

    fn write(&self, request_type: &str, result: &Result<Outcome, String>) {
        let mut line = Map::new();
        line.insert("request_type".into(), request_type.into());
        match result {
            Ok(outcome) => {
                line.insert("applied".into(), json!(outcome.applied));
                line.insert("latest".into(), outcome.latest.into());
                self.log
                    .write(claimonce::log::Level::Info, "migrations", line);
            }
            Err(e) => {
                line.insert("error".into(), e.as_str().into());
                self.log
                    .write(claimonce::log::Level::Error, "migrations failed", line);
            }
        }
    }

    /// Answers one invocation. A custom-resource request is answered by PUT to its
    /// `ResponseURL` (the return value is then only for the log); a plain invoke returns
    /// `{"applied": [...], "latest": n}`, or an error when the migrations failed. The only
    /// error for a custom resource is a response that could not be delivered, so that Lambda
    /// retries the invocation (applying is idempotent).
    pub async fn handle(&self, event: &Value) -> Result<Value, String> {
        self.handle_until(event, None).await
    }

    /// As [`Migrator::handle`], with the database work ending by `deadline` (see
    /// [`Migrator::apply_until`]).
    pub async fn handle_until(
        &self,
        event: &Value,
        deadline: Option<Instant>,
    ) -> Result<Value, String> {
        let Some(request) = cfn::Request::from_event(event) else {
            let result = self.apply_until(deadline).await;
            self.write("Invoke", &result);
            return result.map(|o| json!({"applied": o.applied, "latest": o.latest}));
        };
        // A request whose answer would go anywhere but CloudFormation's own S3 URL did not come
        // from CloudFormation: nothing is done for it and nothing is sent.
        let loopback = self.options.as_ref().is_ok_and(|o| o.loopback_response_url);
        if let Err(why) = cfn::response_url_allowed(&request.response_url, loopback) {
            let mut line = serde_json::Map::new();
            line.insert("request_type".into(), request.request_type.clone().into());
            line.insert("error".into(), why.into());
            self.log.write(
                claimonce::log::Level::Error,
                "custom-resource request refused",
                line,
            );
            return Err(format!("custom-resource request refused: {why}"));
        }
        let response = self.respond_until(&request, deadline).await;
        cfn::put(&request.response_url, &response)
            .await
            .map_err(|e| e.to_string())?;
        serde_json::to_value(&response).map_err(|_| "encoding the response".to_owned())
    }

    /// The response to a custom-resource request, after doing what it asks.
    pub async fn respond(&self, request: &cfn::Request) -> cfn::Response {
        self.respond_until(request, None).await
    }

    /// As [`Migrator::respond`], with the database work ending by `deadline`.
    pub async fn respond_until(
        &self,
        request: &cfn::Request,
        deadline: Option<Instant>,
    ) -> cfn::Response {
        let physical = request
            .physical_resource_id
            .clone()
            .unwrap_or_else(|| PHYSICAL_RESOURCE_ID.to_owned());
        let result = match request.request_type.as_str() {
            // The schema and its data outlive the stack: removing the resource (or rolling
            // back a failed create) must not touch the database.
            "Delete" => Ok(None),
            // Answered with the same data keys as an apply: the template reads
            // DatabaseMigrations.Latest, and a missing key would fail the rollback.
            "Create" | "Update" if self.is_for_another_version(request) => {
                let mut line = Map::new();
                line.insert("request_type".into(), request.request_type.as_str().into());
                self.log.write(
                    claimonce::log::Level::Info,
                    "migrations skipped: the request is for another function version (a rollback)",
                    line,
                );
                Ok(Some(Outcome {
                    applied: Vec::new(),
                    latest: self.latest(),
                }))
            }
            "Create" | "Update" => self.apply_until(deadline).await.map(Some),
            other => Err(format!("unknown RequestType {other:?}")),
        };
        let mut data = Map::new();
        let (status, reason) = match &result {
            Ok(Some(outcome)) => {
                let applied: Vec<String> =
                    outcome.applied.iter().map(ToString::to_string).collect();
                // Custom-resource data values are strings (Fn::GetAtt returns strings).
                data.insert("Applied".into(), applied.join(",").into());
                data.insert("Latest".into(), outcome.latest.to_string().into());
                (cfn::Status::Success, None)
            }
            Ok(None) => (cfn::Status::Success, None),
            Err(e) => {
                let stream = claimonce::config::optional("AWS_LAMBDA_LOG_STREAM_NAME")
                    .map_or(String::new(), |s| format!(" (log stream {s})"));
                (cfn::Status::Failed, Some(format!("{e}{stream}")))
            }
        };
        let logged = result.clone().map(|o| {
            o.unwrap_or_else(|| Outcome {
                applied: Vec::new(),
                latest: self.latest(),
            })
        });
        self.write(&request.request_type, &logged);
        cfn::Response {
            status,
            reason,
            physical_resource_id: physical,
            stack_id: request.stack_id.clone(),
            request_id: request.request_id.clone(),
            logical_resource_id: request.logical_resource_id.clone(),
            data,
        }
    }
}

/// The handler users' `lock_timeout`, in milliseconds, unless their statement timeout is
/// shorter: what the shipped effect functions set for themselves.
const HANDLER_LOCK_TIMEOUT_MS: u128 = 2000;

/// Sets `statement_timeout`, `idle_in_transaction_session_timeout` and `lock_timeout` as login-role defaults
/// of every handler user, so each new session of theirs starts with them, and moves a user
/// given with its provider's role onto that role. Idempotent: the same value set again, or a
/// role granted again, changes nothing. A role that does not exist fails the run with its name.
async fn configure_handlers(
    client: &Client,
    options: &Options,
    create: bool,
) -> Result<(), String> {
    if let Some(granted) = options.create_logins.as_ref().filter(|_| create) {
        create_logins(client, options, granted).await?;
    }
    let ms = options.handler_timeout.as_millis();
    for HandlerUser { user, role } in &options.job_users {
        let role = role.as_ref().map(RoleName::quoted).unwrap_or_default();
        client
            .batch_execute(&format!("GRANT {role} TO {}", user.quoted()))
            .await
            .map_err(|e| {
                format!(
                    "DB_JOB_USERS: granting {role} to {user} failed: {}",
                    database_error(&e)
                )
            })?;
    }
    for HandlerUser { user, role } in &options.handler_users {
        for name in std::iter::once(user).chain(role) {
            let found = client
                .query_typed(
                    "SELECT 1 FROM pg_roles WHERE rolname = $1",
                    &[(&name.0, Type::TEXT)],
                )
                .await
                .map_err(|e| {
                    format!(
                        "DB_HANDLER_USERS: looking up role {name}: {}",
                        database_error(&e)
                    )
                })?;
            if found.is_empty() {
                return Err(format!(
                    "DB_HANDLER_USERS: role {name} does not exist; create it before deploying \
                     (DEPLOY.md, \"Database users and roles\")"
                ));
            }
        }
        let quoted = user.quoted();
        // A Rust effect's statements (claimonce::effect) wait for a lock at most as long as
        // the shipped functions do (their `SET lock_timeout = '2s'`), and never longer than
        // a statement may run.
        let lock_ms = ms.min(HANDLER_LOCK_TIMEOUT_MS);
        let mut sql = format!(
            "ALTER ROLE {quoted} SET statement_timeout = '{ms}ms'; \
             ALTER ROLE {quoted} SET idle_in_transaction_session_timeout = '{ms}ms'; \
             ALTER ROLE {quoted} SET lock_timeout = '{lock_ms}ms'"
        );
        if let Some(role) = role {
            // The REVOKE runs only where the grant exists: PostgreSQL warns otherwise.
            sql.push_str(&format!(
                "; GRANT {} TO {quoted}; \
                 DO $$ BEGIN IF EXISTS (SELECT FROM pg_auth_members m \
                 JOIN pg_roles g ON g.oid = m.roleid \
                 JOIN pg_roles u ON u.oid = m.member WHERE g.rolname = 'claimonce_handler' \
                 AND u.rolname = {literal}) THEN REVOKE claimonce_handler FROM {quoted}; \
                 END IF; END $$",
                role.quoted(),
                literal = user.literal(),
            ));
        }
        client.batch_execute(&sql).await.map_err(|e| {
            format!(
                "DB_HANDLER_USERS: configuring role {user} failed: {} (the migrate user needs \
                 CREATEROLE, and on PostgreSQL 16 or later ADMIN OPTION on the role)",
                database_error(&e)
            )
        })?;
    }
    Ok(())
}

/// Creates each handler and job user that does not exist yet, as a login with no password,
/// and grants every one of them `granted` (`rds_iam`: the user logs in with IAM tokens only).
/// Idempotent: an existing user is left as it is but for the grant, which changes nothing when
/// held.
async fn create_logins(
    client: &Client,
    options: &Options,
    granted: &RoleName,
) -> Result<(), String> {
    let users = options.handler_users.iter().chain(&options.job_users);
    for HandlerUser { user, .. } in users {
        // One statement: the DO block creates the user only when missing, so two runs at once
        // cannot both try, and a user made by hand before is kept.
        let sql = format!(
            "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = {literal}) THEN \
             CREATE ROLE {quoted} LOGIN; END IF; END $$; GRANT {granted} TO {quoted}",
            literal = user.literal(),
            quoted = user.quoted(),
            granted = granted.quoted(),
        );
        client.batch_execute(&sql).await.map_err(|e| {
            format!(
                "DB_CREATE_LOGINS: creating login {user} and granting it {granted} failed: {} \
                 (the migrate user needs CREATEROLE, and {granted} must exist)",
                database_error(&e)
            )
        })?;
    }
    Ok(())
}

/// The point in time `ANSWER_MARGIN` before an invocation's deadline (milliseconds since the
/// Unix epoch, as Lambda gives it). With less than twice that left (a function timeout set
/// far below the template's 300 s, or a local emulator's), half of what is left.
pub fn work_deadline(deadline_ms: u64) -> Instant {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let left = Duration::from_millis(deadline_ms.saturating_sub(now_ms));
    Instant::now() + left.saturating_sub(ANSWER_MARGIN.min(left / 2))
}

/// The migrations of a deployment: `shared`, then the own migrations of each provider that
/// `included` names (`CLAIMONCE_PROVIDERS`, comma-separated; absent: every provider in
/// `carried`; empty: none), in one version sequence ([`migrate::sequence`]). A name not in
/// `carried` is a configuration error, so a misspelt provider is not deployed without its
/// tables and role.
pub fn included(
    shared: &[Migration],
    carried: &[(&str, &[Migration])],
    included: Option<&str>,
) -> Result<Vec<Migration>, ConfigError> {
    let mut sets = vec![shared];
    match included {
        None => sets.extend(carried.iter().map(|(_, own)| *own)),
        Some(names) => {
            for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                let (_, own) = carried.iter().find(|(p, _)| *p == name).ok_or_else(|| {
                    let known: Vec<&str> = carried.iter().map(|(p, _)| *p).collect();
                    ConfigError::new(format!(
                        "CLAIMONCE_PROVIDERS names {name:?}, which this function does not carry \
                         (it carries {})",
                        known.join(", ")
                    ))
                })?;
                sets.push(own);
            }
        }
    }
    migrate::sequence(&sets)
}

/// The whole of the function's `main`, with this repository's migrations
/// ([`claimonce_migrations::SHARED`] and [`claimonce_migrations::PROVIDERS`]).
pub async fn run_from_env() -> Result<(), lambda_runtime::Error> {
    run_from_env_with(
        claimonce_migrations::SHARED,
        claimonce_migrations::PROVIDERS,
    )
    .await
}

/// The whole of a migrate function's `main`: the `shared` migrations and those of the
/// `carried` providers the deployment includes ([`included`]). A provider crate in another
/// repository calls it with `claimonce_migrations::SHARED` and its own migrations. A
/// configuration error does not stop the process: the function still answers each request
/// (with the error), because CloudFormation would otherwise wait for a response until the
/// resource's timeout.
pub async fn run_from_env_with(
    shared: &'static [Migration],
    carried: &[(&str, &'static [Migration])],
) -> Result<(), lambda_runtime::Error> {
    let log = Log::process();
    // A configuration error is still answered (FAILED) so a deploy never waits on us.
    let migrations = included(
        shared,
        carried,
        std::env::var("CLAIMONCE_PROVIDERS").ok().as_deref(),
    );
    let settings = log.config(
        Settings::from_env()
            .await
            .and_then(|settings| migrations.as_ref().map(|_| settings).map_err(Clone::clone)),
    );
    // Leaked once: the function's migrations live as long as its process.
    let migrations: &'static [Migration] = Box::leak(migrations.unwrap_or_default().into());
    let options = log.config(
        async {
            let mut options = Options::from_env()?;
            if let Some(raw) = config::optional("DB_HANDLER_SECRETS") {
                let aws = claimonce::auth::aws_config().load().await;
                options
                    .handler_users
                    .extend(handler_users_from_secrets(&raw, &aws).await?);
            }
            Ok::<_, ConfigError>(options)
        }
        .await,
    );
    let bootstrap = log.config(async { Bootstrap::from_env(Timeouts::from_env()?).await }.await);
    let migrator = Migrator::new(settings, migrations, log)
        .with_options(options)
        .with_bootstrap(bootstrap)
        .with_version(claimonce::config::optional("AWS_LAMBDA_FUNCTION_VERSION"));
    let migrator = &migrator;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| async move {
        claimonce::log::begin(&event.context);
        let deadline = work_deadline(event.context.deadline);
        migrator
            .handle_until(&event.payload, Some(deadline))
            .await
            .map_err(lambda_runtime::Error::from)
    }))
    .await
}
