//! What a won claim does: the provider's [`Plan`] for an event, decided in one step
//! ([`crate::prelude::Provider::plan`]): nothing, one SQL call in the claim's statement ([`Effect`]), or
//! Rust on the claim's transaction ([`RustEffect`]).
//!
//! A Rust effect runs with a [`Tx`]: a handle on the transaction that won the claim, handed
//! over only after the claim was won. On the wire:
//!
//! ```text
//! BEGIN + SELECT ... FROM claimonce_claim_v1(...)   one flight (pipelined)
//! the effect's statements                           one flight each
//! COMMIT                                            one flight
//! ```
//!
//! The effect commits with the claim or rolls back with it: an error from the effect, a
//! refused statement or the delivery's deadline rolls both back and answers 500, and the
//! sender's retry heals it.
//!
//! What the handle offers is what a transaction pooler can serve: unnamed statements
//! (`query_typed`: no named prepare, no portal) of the kinds that read or write rows (`SELECT`,
//! `INSERT`, `UPDATE`, `DELETE`, `MERGE`, `WITH`, `VALUES`, `TABLE`). Anything else (`SET`,
//! `PREPARE`, `LISTEN`, `DECLARE`, `COMMIT`, `SAVEPOINT`, `CALL`, DDL) and the session-level
//! functions a `SELECT` could reach (`set_config`, the session advisory locks, `dblink`) are
//! refused before anything is sent. There is no way to get the client itself.
//!
//! Bounds: each statement is sent only before the delivery's deadline; the login's
//! `lock_timeout` and `statement_timeout` bound it on the server (the migrate function sets
//! both as login defaults), and its `idle_in_transaction_session_timeout` ends a transaction
//! whose client went quiet. A network call to another service inside the effect would hold the
//! claim's row locks while it waits: the effect is given the event and this handle only, never
//! an SDK client (the receiver owns those), and whatever must leave the database goes to the
//! outbox in the same transaction.

use std::fmt;

use tokio_postgres::Client;
use tokio_postgres::types::{ToSql, Type};

use crate::forward::{FORWARD_FUNCTION, Forwardable};

pub use tokio_postgres::Row;

/// One typed parameter of a statement, with its PostgreSQL type: an argument of an effect
/// function ([`Effect::call`], which owns its values: `Param<'static>`) or of a Rust effect's
/// statement ([`Tx::execute`], whose values may borrow the event). The one spelling of both is
/// `Param::new(value, Type::TEXT)`.
pub struct Param<'v> {
    pub(crate) value: Box<dyn ToSql + Send + Sync + 'v>,
    pub(crate) ty: Type,
}

impl<'v> Param<'v> {
    /// A parameter of the given type (`Type::TEXT`, `Type::INT8`, `Type::TEXT_ARRAY`, ...): an
    /// owned value, or a reference (`&event.amount`, `event_id.as_str()`). An effect
    /// function's parameter must have exactly this type: PostgreSQL picks the function by its
    /// argument types.
    pub fn new<T: ToSql + Send + Sync + 'v>(value: T, ty: Type) -> Self {
        Self {
            value: Box::new(value),
            ty,
        }
    }

    /// The value and its type, as tokio-postgres takes a typed parameter.
    pub(crate) fn typed(&self) -> (&(dyn ToSql + Sync), Type) {
        (&*self.value as &(dyn ToSql + Sync), self.ty.clone())
    }
}

impl std::fmt::Debug for Param<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Values are event data: show only the type.
        write!(f, "Param({})", self.ty)
    }
}

/// A provider's plan for one event, returned in one step by
/// [`Provider::plan`](crate::prelude::Provider::plan): what the claim does if this delivery wins it.
#[derive(Debug)]
pub enum Plan<R> {
    /// No effect: the event is claimed and answered `ignored`.
    Nothing,
    /// One call of an effect function, in the claim's one statement.
    Call(Effect),
    /// Rust on the claim's transaction, run only once the claim is won.
    Rust(R),
}

impl<R> Plan<R> {
    /// The same plan with its Rust effect, if any, passed through `f`: how a provider that
    /// wraps another's adds to its Rust effect.
    pub fn map_rust<S>(self, f: impl FnOnce(R) -> S) -> Plan<S> {
        match self {
            Plan::Nothing => Plan::Nothing,
            Plan::Call(effect) => Plan::Call(effect),
            Plan::Rust(rust) => Plan::Rust(f(rust)),
        }
    }
}

impl<R> From<Option<Effect>> for Plan<R> {
    /// A call, or nothing.
    fn from(effect: Option<Effect>) -> Self {
        effect.map_or(Plan::Nothing, Plan::Call)
    }
}

/// An effect in Rust: what [`Plan::Rust`] carries, holding what it needs of the event (and of
/// the provider) by reference. Its `apply` runs only after this delivery won the claim, with
/// `tx` on the claim's transaction, which commits when it returns `Ok` and rolls back (the
/// claim too) when it returns an error. It may run again for the same event after a rollback
/// (a lost connection is retried once), so it keeps nothing of its own between runs.
pub trait RustEffect: Send + Sync {
    /// Applies the effect on the claim's transaction.
    fn apply<'a>(
        &'a self,
        tx: &'a Tx<'a>,
    ) -> impl Future<Output = Result<(), EffectError>> + Send + 'a;
}

/// The [`RustEffect`] of a provider that has none: it cannot be built, so such a provider's
/// plan is never [`Plan::Rust`].
#[derive(Debug, Clone, Copy)]
pub enum NoRustEffect {}

impl RustEffect for NoRustEffect {
    async fn apply<'a>(&'a self, _tx: &'a Tx<'a>) -> Result<(), EffectError> {
        match *self {}
    }
}

/// One call of an effect function, a PL/pgSQL function that a migration added (see the
/// `docs/providers.md`), in the claim's one statement: what [`Plan::Call`] carries.
#[derive(Debug)]
pub struct Effect {
    function: &'static str,
    params: Vec<Param<'static>>,
    /// The claim's provider and event id are passed first (`$1, $2`).
    with_claim: bool,
}

impl Effect {
    /// A call of `function` (a versioned name such as `stripe_credit_v1`) with `params`.
    pub fn call(function: &'static str, params: Vec<Param<'static>>) -> Self {
        Self {
            function,
            params,
            with_claim: false,
        }
    }

    /// The same call with the claim's provider and event id passed first, as the function's
    /// first two parameters (both `text`), then the call's own: the ledger's key for a row the
    /// effect writes, taken from the claim rather than passed again.
    #[must_use]
    pub fn with_claim(self) -> Self {
        Self {
            with_claim: true,
            ..self
        }
    }

    /// Hands the claimed event to the outbox unchanged, under `topic`, and so to the relay's
    /// queue: "verified, exactly once, onto a queue", with no table of the provider's own. The
    /// relay sends the signed bytes as they arrived, with the signature header
    /// ([`Forwardable::signed_by`]), so a consumer can verify them.
    pub fn forward(topic: String, event: Forwardable) -> Self {
        let (header, value) = event.signature.unzip();
        Self::call(
            FORWARD_FUNCTION,
            vec![
                Param::new(topic, Type::TEXT),
                Param::new(event.body, Type::TEXT),
                Param::new(header, Type::TEXT),
                Param::new(value, Type::TEXT),
            ],
        )
        .with_claim()
    }

    /// The effect function's name.
    pub fn function(&self) -> &'static str {
        self.function
    }

    /// The call's function, arguments and whether the claim's identity comes first.
    pub(crate) fn call_parts(&self) -> (&'static str, &[Param<'static>], bool) {
        (self.function, &self.params, self.with_claim)
    }
}

/// The transaction a won claim holds, for a Rust effect.
pub struct Tx<'c> {
    client: &'c Client,
    deadline: tokio::time::Instant,
    /// A statement failed: the server aborted the transaction.
    failed: std::sync::atomic::AtomicBool,
}

impl fmt::Debug for Tx<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tx").finish_non_exhaustive()
    }
}

/// One statement's parameters, each a [`Param`] with its PostgreSQL type.
pub type Params<'a> = &'a [Param<'a>];

impl<'c> Tx<'c> {
    pub(crate) fn new(client: &'c Client, deadline: tokio::time::Instant) -> Self {
        Self {
            client,
            deadline,
            failed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// True when one of the effect's statements failed.
    pub(crate) fn failed(&self) -> bool {
        self.failed.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A statement's result, noted; then the fault point between an effect's statements.
    async fn note<T>(&self, result: Result<T, tokio_postgres::Error>) -> Result<T, EffectError> {
        if result.is_err() {
            self.failed
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        let answered = result?;
        crate::fault::hit(crate::fault::Point::EffectStatement)
            .await
            .map_err(EffectError::injected)?;
        Ok(answered)
    }

    fn admit(&self, sql: &str) -> Result<(), EffectError> {
        screen(sql)?;
        if tokio::time::Instant::now() >= self.deadline {
            return Err(EffectError(Kind::PastDeadline));
        }
        Ok(())
    }

    /// The time left before the delivery's deadline. A statement is sent only while some is
    /// left; an effect with work of its own between statements can stop early instead of
    /// finding its next statement refused.
    pub fn time_left(&self) -> std::time::Duration {
        self.deadline
            .saturating_duration_since(tokio::time::Instant::now())
    }

    /// Runs a statement that returns no rows the effect needs; returns the rows it touched.
    pub async fn execute(&self, sql: &str, params: Params<'_>) -> Result<u64, EffectError> {
        self.admit(sql)?;
        let run = async {
            let stream = self
                .client
                .query_typed_raw(sql, params.iter().map(Param::typed))
                .await?;
            futures_util::pin_mut!(stream);
            while futures_util::TryStreamExt::try_next(&mut stream)
                .await?
                .is_some()
            {}
            Ok(stream.rows_affected().unwrap_or(0))
        };
        self.note(run.await).await
    }

    /// Runs a statement and returns its rows.
    pub async fn query(&self, sql: &str, params: Params<'_>) -> Result<Vec<Row>, EffectError> {
        self.admit(sql)?;
        let run = async {
            let stream = self
                .client
                .query_typed_raw(sql, params.iter().map(Param::typed))
                .await?;
            futures_util::TryStreamExt::try_collect(stream).await
        };
        self.note(run.await).await
    }

    /// Runs a statement that returns at most one row.
    pub async fn query_opt(
        &self,
        sql: &str,
        params: Params<'_>,
    ) -> Result<Option<Row>, EffectError> {
        let mut rows = self.query(sql, params).await?;
        if rows.len() > 1 {
            return Err(EffectError::failed(
                "a statement returned more than one row",
            ));
        }
        Ok(rows.pop())
    }
}

/// Statement kinds the handle sends: they read or write rows, and leave nothing on the
/// session.
const ALLOWED: [&str; 8] = [
    "SELECT", "INSERT", "UPDATE", "DELETE", "MERGE", "WITH", "VALUES", "TABLE",
];

/// Functions that leave state on the session (a pooler would have to pin it) or reach out of
/// the database, refused wherever they appear. The transaction-level advisory locks
/// (`pg_advisory_xact_lock`) end with the transaction and stay allowed.
const SESSION_FUNCTIONS: [&str; 5] = [
    "set_config",
    "pg_advisory_lock",
    "pg_try_advisory_lock",
    "dblink",
    "pg_notify",
];

/// Checks a statement before it is sent: its first keyword (after comments) must be one of
/// [`ALLOWED`], and it must name none of [`SESSION_FUNCTIONS`].
fn screen(sql: &str) -> Result<(), EffectError> {
    let mut rest = sql.trim_start();
    loop {
        if let Some(after) = rest.strip_prefix("--") {
            rest = after.split_once('\n').map_or("", |(_, r)| r).trim_start();
        } else if let Some(after) = rest.strip_prefix("/*") {
            rest = after.split_once("*/").map_or("", |(_, r)| r).trim_start();
        } else {
            break;
        }
    }
    let keyword: String = rest
        .chars()
        .take_while(char::is_ascii_alphabetic)
        .collect::<String>()
        .to_ascii_uppercase();
    if !ALLOWED.contains(&keyword.as_str()) {
        return Err(EffectError(Kind::Refused(
            "a Rust effect sends only SELECT, INSERT, UPDATE, DELETE, MERGE, WITH, VALUES or TABLE",
        )));
    }
    let lower = sql.to_ascii_lowercase();
    if SESSION_FUNCTIONS.iter().any(|f| lower.contains(f)) {
        return Err(EffectError(Kind::Refused(
            "a Rust effect may not call a function that leaves state on the session or leaves \
             the database",
        )));
    }
    Ok(())
}

/// Why a Rust effect failed: the claim and everything the effect wrote roll back, and the
/// delivery is answered 500.
pub struct EffectError(Kind);

enum Kind {
    /// A statement failed, or the connection was lost.
    Database(tokio_postgres::Error),
    /// The handle refused a statement before sending it.
    Refused(&'static str),
    /// The delivery's deadline passed before a statement could be sent.
    PastDeadline,
    /// The effect's own reason.
    Failed(&'static str),
}

impl EffectError {
    /// A fault point's `error` ([`crate::fault`]), as the failure of the step it struck: it
    /// rolls the claim back and answers 500.
    pub(crate) fn injected(injected: crate::fault::Injected) -> Self {
        Self::failed(injected.0.name())
    }

    /// The effect's own failure. The reason is static text, so no event data can reach the
    /// log line that carries it.
    pub fn failed(reason: &'static str) -> Self {
        Self(Kind::Failed(reason))
    }

    /// The database error, when a statement failed.
    pub(crate) fn into_database(self) -> Result<tokio_postgres::Error, Self> {
        match self.0 {
            Kind::Database(e) => Ok(e),
            other => Err(Self(other)),
        }
    }

    /// True when the deadline passed.
    pub(crate) fn past_deadline(&self) -> bool {
        matches!(self.0, Kind::PastDeadline)
    }
}

impl From<tokio_postgres::Error> for EffectError {
    fn from(e: tokio_postgres::Error) -> Self {
        Self(Kind::Database(e))
    }
}

impl fmt::Display for EffectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            // The summary the delivery's log line uses: SQLSTATE, never the server's message.
            Kind::Database(e) => f.write_str(&crate::pg_error::statement_summary(e)),
            Kind::Refused(why) => write!(f, "statement refused: {why}"),
            Kind::PastDeadline => f.write_str("delivery timed out"),
            Kind::Failed(why) => write!(f, "the effect failed: {why}"),
        }
    }
}

impl fmt::Debug for EffectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EffectError({self})")
    }
}

impl std::error::Error for EffectError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_handle_sends_only_statements_that_touch_rows() {
        for ok in [
            "INSERT INTO t VALUES ($1)",
            "  -- a comment\n  update t SET a = 1",
            "/* why */ WITH x AS (SELECT 1) SELECT * FROM x",
            "select pg_advisory_xact_lock(1)",
            "DELETE FROM t",
            "MERGE INTO t USING s ON true WHEN MATCHED THEN DELETE",
        ] {
            assert!(screen(ok).is_ok(), "{ok}");
        }
        for refused in [
            "SET lock_timeout = 0",
            "set local statement_timeout = 0",
            "RESET ALL",
            "PREPARE p AS SELECT 1",
            "LISTEN x",
            "COMMIT",
            "ROLLBACK",
            "SAVEPOINT s",
            "CALL p()",
            "CREATE TEMP TABLE t (a int)",
            "DECLARE c CURSOR WITH HOLD FOR SELECT 1",
            "DISCARD ALL",
            "-- only a comment",
            "",
            "SELECT set_config('statement_timeout', '0', false)",
            "SELECT pg_advisory_lock(1)",
            "select PG_TRY_ADVISORY_LOCK(1)",
            "SELECT dblink_exec('host=x', 'DELETE FROM t')",
            "SELECT pg_notify('c', 'x')",
        ] {
            assert!(screen(refused).is_err(), "{refused}");
        }
    }
}
