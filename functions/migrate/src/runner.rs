//! The migration runner: what a run does besides connecting ([`Options`]), the [`Migrator`]
//! that connects, applies the migrations and sets the login defaults, and which migrations a
//! deployment includes ([`included`]).

use std::time::{Duration, Instant};

use claimonce::config;
use claimonce::db::Settings;
use claimonce::log::Log;
use claimonce::migrate::{self, Bounds, MigrateError, Migration};
use claimonce::prelude::ConfigError;

use crate::bootstrap::Bootstrap;
use crate::logins::{HandlerUser, RoleName, configure_handlers};
use crate::{ANSWER_MARGIN, database_error};

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
    /// CloudFormation's `https` S3 URLs are answered
    /// ([`cfn::response_url_allowed`](crate::cfn::response_url_allowed)).
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
    pub(crate) options: Result<Options, ConfigError>,
    /// The master's first login, when the deployment has one (the quick start).
    bootstrap: Result<Option<Bootstrap>, ConfigError>,
    migrations: &'static [Migration],
    pub(crate) log: Log,
    /// The published version this code runs as (`AWS_LAMBDA_FUNCTION_VERSION`), if any.
    pub(crate) version: Option<String>,
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

    pub(crate) fn write(&self, request_type: &str, result: &Result<Outcome, String>) {
        match result {
            Ok(outcome) => {
                let line = claimonce::log::fields! {
                    request_type: request_type,
                    applied: outcome.applied.as_slice(),
                    latest: outcome.latest,
                };
                self.log
                    .write(claimonce::log::Level::Info, "migrations", line);
            }
            Err(e) => {
                let line =
                    claimonce::log::fields! { request_type: request_type, error: e.as_str() };
                self.log
                    .write(claimonce::log::Level::Error, "migrations failed", line);
            }
        }
    }
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
