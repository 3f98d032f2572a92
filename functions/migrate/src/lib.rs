//! Migrations on deploy: a Lambda function that applies the deployment's migrations (the shared
//! ones and those of the providers it includes, `CLAIMONCE_PROVIDERS`: [`included`]) with the
//! shared runner, which applies each new one in its own transaction, lowest version first,
//! records it, skips what is recorded and refuses a recorded migration whose file changed.
//! A provider crate kept in another repository builds this same function for its own
//! deployment with [`run_from_env_with`], handing it its migrations beside the shared ones.
//!
//! Three ways in, one function:
//! - a CloudFormation custom resource (the template's `DatabaseMigrations`): `Create` and
//!   `Update` apply and report `Data.Applied`, `Delete` succeeds without touching the
//!   database (the schema outlives the stack), and so does a rollback's `Update` (it names the
//!   previous function version; migrations are forward-only). The answer is PUT to the request's
//!   `ResponseURL`, success or failure, so a deployment never waits in vain;
//! - the custom resource `MigrateSettings`, whose properties are this function's settings as
//!   the template resolves them: answered with their digest ([`cfn::settings_digest`]), the
//!   description of its version, so that a changed setting publishes a version too, which
//!   `DatabaseMigrations` then runs (nothing else is done);
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
mod logins;
mod runner;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use claimonce::config;
use claimonce::db::{Settings, Timeouts};
use claimonce::log::Log;
use claimonce::migrate::Migration;
use claimonce::prelude::ConfigError;
use lambda_runtime::{LambdaEvent, service_fn};
use serde_json::Value;

use crate::bootstrap::Bootstrap;
pub use crate::logins::{HandlerUser, RoleName, handler_users_from_secrets};
pub use crate::runner::{Migrator, Options, Outcome, included};

/// The physical id of the migrations resource: one per database, stable across updates.
pub const PHYSICAL_RESOURCE_ID: &str = "claimonce-database-migrations";

/// How long before the invocation's deadline the database work must end: the answer's PUT
/// can take [`cfn::PUT_ATTEMPTS`] x [`cfn::PUT_TIMEOUT`] plus its back-off (3 x 10 s + 1.5 s =
/// 31.5 s), and CloudFormation gets no answer at all from a function Lambda has stopped.
pub const ANSWER_MARGIN: Duration = Duration::from_secs(40);

/// A database error as a failure reason: its SQLSTATE and the objects it names, never the
/// server's message.
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
                let aws = claimonce::jobs::aws_config().load().await;
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
        let deadline = work_deadline(event.context.deadline);
        claimonce::jobs::begin(&event.context);
        migrator
            .handle_until(&event.payload, Some(deadline))
            .await
            .map_err(lambda_runtime::Error::from)
    }))
    .await
}
