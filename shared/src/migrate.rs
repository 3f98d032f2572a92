//! A small migration runner for plain SQL files named `V<n>__<name>.sql`.
//!
//! Each migration runs in its own transaction together with its row in `schema_migrations`,
//! so it is applied once or not at all. A recorded migration whose SQL has changed since it
//! was applied stops the run: the database and the files disagree, and a person must decide.

use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio_postgres::Client;
use tokio_postgres::types::Type;

/// One migration file.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// The `<n>` of `V<n>__<name>.sql`.
    pub version: i32,
    /// The `<name>` part.
    pub name: &'static str,
    /// The file's SQL.
    pub sql: &'static str,
}

/// Why the migrations could not be applied.
#[derive(Debug)]
#[non_exhaustive]
pub enum MigrateError {
    /// A database error while applying `version`.
    Database {
        /// The migration that failed, if any had started.
        version: Option<i32>,
        /// The error.
        error: tokio_postgres::Error,
    },
    /// The recorded checksum of `version` differs from its file.
    Changed {
        /// The migration whose file changed after it was applied.
        version: i32,
    },
}

impl std::fmt::Display for MigrateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MigrateError::Database {
                version: Some(v),
                error,
            } => write!(f, "migration V{v} failed: {error}"),
            MigrateError::Database {
                version: None,
                error,
            } => write!(f, "migration bookkeeping failed: {error}"),
            MigrateError::Changed { version } => write!(
                f,
                "migration V{version} was changed after it was applied; refusing to continue"
            ),
        }
    }
}

impl std::error::Error for MigrateError {}

/// A deployment's migrations: `sets` (the shared migrations, then those of each provider the
/// deployment includes) joined in version order, the order [`apply`] runs them in. A version
/// that two migrations claim is refused, naming both: two crates numbered a migration alike.
pub fn sequence(sets: &[&[Migration]]) -> Result<Vec<Migration>, crate::config::ConfigError> {
    let mut all: Vec<Migration> = sets.iter().flat_map(|set| set.iter().copied()).collect();
    all.sort_by_key(|m| m.version);
    for pair in all.windows(2) {
        if let [a, b] = pair
            && a.version == b.version
        {
            return Err(crate::config::ConfigError::new(format!(
                "migration version {} is taken twice (V{0}__{} and V{0}__{}): a provider \
                 crate outside this repository numbers its migrations from 10000 up",
                a.version, a.name, b.name
            )));
        }
    }
    Ok(all)
}

const BOOKKEEPING: &str = "CREATE TABLE IF NOT EXISTS schema_migrations (
    version integer PRIMARY KEY,
    name text NOT NULL,
    sha256 bytea NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now())";

/// How long the server lets a migration run wait: for a lock, and for one statement. A
/// migration that cannot get its lock in time, or runs too long, is stopped by the server
/// (SQLSTATE 55P03 or 57014) and rolled back, instead of holding up the deployment, and the
/// deliveries queued behind its lock, until something outside gives up.
///
/// A migration's lock wait must be shorter than a delivery's (the effect functions'
/// `lock_timeout`, 2 s): every delivery that needs the same table queues behind the
/// migration's pending lock, and would otherwise fail before the migration gives up. A
/// migration refused a lock is tried again, after a pause that lets the queue drain, up to
/// `lock_attempts` times in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// `lock_timeout` for every statement of the run.
    pub lock: Duration,
    /// `statement_timeout` for every statement of the run.
    pub statement: Duration,
    /// How many times a migration refused a lock (55P03) is tried, the first included.
    pub lock_attempts: u32,
}

/// The pause before attempt `n + 1` of a migration refused a lock: 250 ms, doubling, at most
/// 2 s.
pub fn lock_backoff(n: u32) -> Duration {
    Duration::from_millis(250u64.saturating_mul(1 << n.saturating_sub(1).min(3)))
}

/// [`apply`] with the server-side [`Bounds`] in force for every transaction of the run. They
/// are set with `SET LOCAL` at the start of each transaction, not on the session: behind a
/// transaction pooler (PgBouncer) consecutive transactions may run on different server
/// connections, so a session `SET` could bound another transaction than the migration's and
/// stay behind on a server connection that other clients then get. A migration refused its
/// lock is rolled back by the server and tried again (see [`Bounds`]); what committed before
/// it stays.
pub async fn apply_within(
    client: &mut Client,
    migrations: &[Migration],
    bounds: Bounds,
) -> Result<Vec<i32>, MigrateError> {
    let local = format!(
        "SET LOCAL lock_timeout = {}; SET LOCAL statement_timeout = {}",
        bounds.lock.as_millis().max(1),
        bounds.statement.as_millis().max(1)
    );
    let mut applied = Vec::new();
    let mut attempt = 1;
    loop {
        match apply_into(client, migrations, &mut applied, &local).await {
            Err(MigrateError::Database { error, .. })
                if attempt < bounds.lock_attempts
                    && error.code()
                        == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE) =>
            {
                tokio::time::sleep(lock_backoff(attempt)).await;
                attempt += 1;
            }
            Err(e) => return Err(e),
            Ok(()) => return Ok(applied),
        }
    }
}

/// Applies, in version order, every migration not yet recorded. Returns the versions applied
/// by this call (empty when the database was already up to date). Concurrent runners are
/// serialised by a lock on `schema_migrations`.
pub async fn apply(
    client: &mut Client,
    migrations: &[Migration],
) -> Result<Vec<i32>, MigrateError> {
    let mut applied = Vec::new();
    apply_into(client, migrations, &mut applied, "").await?;
    Ok(applied)
}

/// [`apply`], adding each version it applies to `applied` as it commits; `bounds` (`SET LOCAL`
/// statements, or nothing) open every transaction.
async fn apply_into(
    client: &mut Client,
    migrations: &[Migration],
    applied: &mut Vec<i32>,
    bounds: &str,
) -> Result<(), MigrateError> {
    let db = |version| move |error| MigrateError::Database { version, error };
    let tx = client.transaction().await.map_err(db(None))?;
    tx.batch_execute(&format!("{bounds}; {BOOKKEEPING}"))
        .await
        .map_err(db(None))?;
    tx.commit().await.map_err(db(None))?;
    let mut sorted = migrations.to_vec();
    sorted.sort_by_key(|m| m.version);
    for migration in sorted {
        let tx = client.transaction().await.map_err(db(None))?;
        tx.batch_execute(&format!(
            "{bounds}; LOCK TABLE schema_migrations IN SHARE ROW EXCLUSIVE MODE"
        ))
        .await
        .map_err(db(None))?;
        let checksum = Sha256::digest(migration.sql).to_vec();
        let recorded = tx
            .query_typed(
                "SELECT sha256 FROM schema_migrations WHERE version = $1",
                &[(&migration.version, Type::INT4)],
            )
            .await
            .map_err(db(None))?;
        if let Some(row) = recorded.first() {
            let stored: Vec<u8> = row.try_get(0).map_err(db(None))?;
            if stored != checksum {
                return Err(MigrateError::Changed {
                    version: migration.version,
                });
            }
            continue;
        }
        tx.batch_execute(migration.sql)
            .await
            .map_err(db(Some(migration.version)))?;
        tx.execute_typed(
            "INSERT INTO schema_migrations (version, name, sha256) VALUES ($1, $2, $3)",
            &[
                (&migration.version, Type::INT4),
                (&migration.name, Type::TEXT),
                (&checksum, Type::BYTEA),
            ],
        )
        .await
        .map_err(db(Some(migration.version)))?;
        tx.commit().await.map_err(db(Some(migration.version)))?;
        applied.push(migration.version);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sequence_is_in_version_order_and_refuses_a_version_taken_twice() {
        let m = |version, name| Migration {
            version,
            name,
            sql: "SELECT 1",
        };
        let shared = [m(1, "ledger"), m(3, "later")];
        let provider = [m(10_000, "own"), m(2, "early")];
        let joined = sequence(&[&shared, &provider]).expect("no version twice");
        let versions: Vec<i32> = joined.iter().map(|m| m.version).collect();
        assert_eq!(versions, [1, 2, 3, 10_000]);
        let clash = [m(3, "mine")];
        let refused = sequence(&[&shared, &clash])
            .expect_err("3 twice")
            .to_string();
        assert!(
            refused.contains("V3__later") && refused.contains("V3__mine"),
            "{refused}"
        );
    }

    #[test]
    fn a_refused_lock_is_retried_after_a_pause_that_doubles_up_to_two_seconds() {
        let pauses: Vec<u64> = (1..=6)
            .map(|n| u64::try_from(lock_backoff(n).as_millis()).unwrap_or(u64::MAX))
            .collect();
        assert_eq!(pauses, [250, 500, 1000, 2000, 2000, 2000]);
    }
}
