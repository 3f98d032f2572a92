//! Migrations on deploy: a Lambda function that applies the project's migrations
//! ([`claimonce_migrations::ALL`]) with the shared runner, which applies each new one in its
//! own transaction, records it, skips what is recorded and refuses a recorded migration whose
//! file changed.
//!
//! Two ways in, one function:
//! - a CloudFormation custom resource (the template's `DatabaseMigrations`): `Create` and
//!   `Update` apply and report `Data.Applied`, `Delete` succeeds without touching the
//!   database (the schema outlives the stack), and so does a rollback's `Update` (it names the
//!   previous function version; migrations are forward-only). The answer is PUT to the request's
//!   `ResponseURL`, success or failure, so a deployment never waits in vain;
//! - a plain invoke (`aws lambda invoke --payload '{}'`): returns `{"applied": [...]}`.
//!
//! Failure reasons are data-free: the migration, the SQLSTATE and the object names, never the
//! server's message (which can quote values) and never a credential.

pub mod cfn;

use claimonce::config::ConfigError;
use claimonce::db::Settings;
use claimonce::log::Log;
use claimonce::migrate::{self, MigrateError, Migration};
use lambda_runtime::{LambdaEvent, service_fn};
use serde_json::{Map, Value, json};

/// The physical id of the migrations resource: one per database, stable across updates.
pub const PHYSICAL_RESOURCE_ID: &str = "claimonce-database-migrations";

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
            migrations,
            log,
            version: None,
        }
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

    fn describe(&self, error: &MigrateError) -> String {
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
            // Its message names only the version.
            MigrateError::Changed { .. } => error.to_string(),
        }
    }

    /// Connects and applies every migration not yet recorded.
    pub async fn apply(&self) -> Result<Outcome, String> {
        let settings = self.settings.as_ref().map_err(ToString::to_string)?;
        let mut client = settings.connect().await.map_err(|e| e.to_string())?;
        let applied = migrate::apply(&mut client, self.migrations)
            .await
            .map_err(|e| self.describe(&e))?;
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
                self.log.write("info", "migrations", line);
            }
            Err(e) => {
                line.insert("error".into(), e.as_str().into());
                self.log.write("error", "migrations failed", line);
            }
        }
    }

    /// Answers one invocation. A custom-resource request is answered by PUT to its
    /// `ResponseURL` (the return value is then only for the log); a plain invoke returns
    /// `{"applied": [...], "latest": n}`, or an error when the migrations failed. The only
    /// error for a custom resource is a response that could not be delivered, so that Lambda
    /// retries the invocation (applying is idempotent).
    pub async fn handle(&self, event: &Value) -> Result<Value, String> {
        let Some(request) = cfn::Request::from_event(event) else {
            let result = self.apply().await;
            self.write("Invoke", &result);
            return result.map(|o| json!({"applied": o.applied, "latest": o.latest}));
        };
        let response = self.respond(&request).await;
        cfn::put(&request.response_url, &response)
            .await
            .map_err(|e| e.to_string())?;
        serde_json::to_value(&response).map_err(|_| "encoding the response".to_owned())
    }

    /// The response to a custom-resource request, after doing what it asks.
    pub async fn respond(&self, request: &cfn::Request) -> cfn::Response {
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
                    "info",
                    "migrations skipped: the request is for another function version (a rollback)",
                    line,
                );
                Ok(Some(Outcome {
                    applied: Vec::new(),
                    latest: self.latest(),
                }))
            }
            "Create" | "Update" => self.apply().await.map(Some),
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

/// The whole of the function's `main`. A configuration error does not stop the process: the
/// function still answers each request (with the error), because CloudFormation would
/// otherwise wait for a response until the resource's timeout.
pub async fn run_from_env() -> Result<(), lambda_runtime::Error> {
    let log = Log::stdout();
    // A configuration error is still answered (FAILED) so a deploy never waits on us.
    let settings = log.config(Settings::from_env().await);
    let migrator = Migrator::new(settings, claimonce_migrations::ALL, log)
        .with_version(claimonce::config::optional("AWS_LAMBDA_FUNCTION_VERSION"));
    let migrator = &migrator;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| async move {
        migrator
            .handle(&event.payload)
            .await
            .map_err(lambda_runtime::Error::from)
    }))
    .await
}
