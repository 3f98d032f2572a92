//! The claim-then-mutate transaction, in two round trips.
//!
//! Flight 1 sends `BEGIN` with the transaction's timeouts and the claim
//! (`INSERT … ON CONFLICT DO NOTHING RETURNING id`) together. A won claim hands a
//! [`Transaction`] to the provider's effect, which queues its statements on it; flight 2 sends
//! those statements and `COMMIT` together and checks every result, because a `COMMIT` that
//! follows a failed statement answers `ROLLBACK` without an error. A lost claim sends a lookup
//! of the stored payload hash with its `COMMIT` instead.
//!
//! Every statement is unnamed (`execute_typed`/`query_typed`): no prepared statement outlives
//! the transaction, so a transaction-pooling proxy never has to pin the session.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use bytes::BytesMut;
use tokio_postgres::Client;
use tokio_postgres::types::{ToSql, Type};

use crate::db::Timeouts;

/// One statement parameter with its PostgreSQL type, owned so it can wait for flight 2.
pub struct Param {
    value: Box<dyn ToSql + Send + Sync>,
    ty: Type,
}

impl Param {
    /// A parameter of the given type (`Type::TEXT`, `Type::INT8`, `Type::TIMESTAMPTZ`, ...).
    pub fn new<T: ToSql + Send + Sync + 'static>(value: T, ty: Type) -> Self {
        Self {
            value: Box::new(value),
            ty,
        }
    }
}

impl std::fmt::Debug for Param {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Values are event data: show only the type.
        write!(f, "Param({})", self.ty)
    }
}

#[derive(Debug)]
struct Statement {
    sql: &'static str,
    params: Vec<Param>,
}

/// The open claim transaction, as an effect sees it.
///
/// It exists only after this delivery won its claim, and it is the only way an effect can
/// write: statements queued here are sent with the `COMMIT`, so they commit together with
/// the claim or not at all. Effects cannot read mid-transaction; an effect that needs a value
/// computes it in SQL (`ON CONFLICT … DO UPDATE … WHERE`, a CTE), which also keeps the
/// delivery at two round trips.
#[derive(Debug, Default)]
pub struct Transaction {
    statements: Vec<Statement>,
}

impl Transaction {
    /// Queues a statement; it runs, in order, in the claim's transaction.
    pub fn execute(&mut self, sql: &'static str, params: Vec<Param>) {
        self.statements.push(Statement { sql, params });
    }

    /// Number of statements queued so far.
    pub fn len(&self) -> usize {
        self.statements.len()
    }

    /// True when the effect queued nothing.
    pub fn is_empty(&self) -> bool {
        self.statements.is_empty()
    }
}

/// What the effect did with a won claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// The event type has an effect, and it was queued.
    Processed,
    /// The event type has no effect; only the claim is committed.
    Ignored,
}

/// The ledger row this delivery tries to insert.
#[derive(Debug)]
pub struct Claim<'a> {
    /// Ledger namespace of the provider.
    pub provider: &'a str,
    /// The provider's event id.
    pub event_id: &'a str,
    /// The provider's event type.
    pub event_type: &'a str,
    /// SHA-256 of the raw body.
    pub payload_sha256: [u8; 32],
}

/// How the transaction ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Finished {
    /// Won and committed with the effect.
    Won(Applied),
    /// Claimed earlier. Carries the stored payload hash when one is recorded.
    Lost {
        /// The hash stored with the first delivery.
        stored_sha256: Option<Vec<u8>>,
    },
}

/// Why a transaction failed.
#[derive(Debug)]
pub enum Cause {
    /// The database or the connection reported an error.
    Postgres(tokio_postgres::Error),
    /// An effect queued a parameter that cannot be encoded as its declared type.
    Encode,
}

/// A failed transaction: the cause, and whether the connection is still in a known state
/// (the server answered and the transaction is over) so it can be reused.
#[derive(Debug)]
pub struct Failed {
    /// What went wrong.
    pub cause: Cause,
    /// True when the transaction is known to be closed on this connection.
    pub connection_reusable: bool,
}

const CLAIM: &str = "INSERT INTO processed_events (provider, event_id, event_type, payload_sha256) \
     VALUES ($1, $2, $3, $4) ON CONFLICT (provider, event_id) DO NOTHING RETURNING id";
const STORED_HASH: &str =
    "SELECT payload_sha256 FROM processed_events WHERE provider = $1 AND event_id = $2";

type Pending<'a> = Pin<Box<dyn Future<Output = Result<(), tokio_postgres::Error>> + Send + 'a>>;

/// Runs one delivery's transaction on `client`. `effect` is called only when the claim is
/// won, and only its queued statements are written.
pub async fn run(
    client: &Client,
    timeouts: &Timeouts,
    claim: &Claim<'_>,
    effect: impl FnOnce(&mut Transaction) -> Applied,
) -> Result<Finished, Failed> {
    let hash: &[u8] = &claim.payload_sha256;
    let claim_params: [(&(dyn ToSql + Sync), Type); 4] = [
        (&claim.provider, Type::TEXT),
        (&claim.event_id, Type::TEXT),
        (&claim.event_type, Type::TEXT),
        (&hash, Type::BYTEA),
    ];
    // Flight 1: BEGIN (with SET LOCAL timeouts) and the claim, sent in this order without
    // waiting for BEGIN's answer.
    let (begun, claimed) = futures_util::future::join(
        client.batch_execute(timeouts.begin_sql()),
        client.query_typed(CLAIM, &claim_params),
    )
    .await;
    let won = match begun.and(claimed) {
        Ok(rows) => !rows.is_empty(),
        Err(error) => return Err(rollback(client, Cause::Postgres(error)).await),
    };

    if !won {
        // Flight 2 for a duplicate: read the first delivery's hash, and COMMIT.
        let key: [(&(dyn ToSql + Sync), Type); 2] =
            [(&claim.provider, Type::TEXT), (&claim.event_id, Type::TEXT)];
        let (stored, committed) = futures_util::future::join(
            client.query_typed(STORED_HASH, &key),
            client.batch_execute("COMMIT"),
        )
        .await;
        let stored_sha256 = stored
            .as_ref()
            .ok()
            .and_then(|rows| rows.first())
            .and_then(|row| row.try_get::<_, Option<Vec<u8>>>(0).ok().flatten());
        return finish(vec![stored.map(drop), committed])
            .map(|()| Finished::Lost { stored_sha256 });
    }

    let mut tx = Transaction::default();
    let applied = effect(&mut tx);
    // A parameter that cannot be encoded would fail on the client before it is sent, while
    // the statements after it (and the COMMIT) would still go out. Encoding everything first
    // rules that out: either all of flight 2 is sent, or none of it is.
    if !encodable(&tx) {
        return Err(rollback(client, Cause::Encode).await);
    }
    let params: Vec<Vec<(&(dyn ToSql + Sync), Type)>> = tx
        .statements
        .iter()
        .map(|s| {
            s.params
                .iter()
                .map(|p| (&*p.value as &(dyn ToSql + Sync), p.ty.clone()))
                .collect()
        })
        .collect();
    let mut flight: Vec<Pending<'_>> = Vec::with_capacity(tx.statements.len() + 1);
    for (statement, params) in tx.statements.iter().zip(&params) {
        flight.push(Box::pin(async move {
            client.execute_typed(statement.sql, params).await.map(drop)
        }));
    }
    flight.push(Box::pin(client.batch_execute("COMMIT")));
    finish(join_in_order(flight).await).map(|()| Finished::Won(applied))
}

/// Checks a flight whose last statement is COMMIT: any error fails the delivery. A server
/// answer to the COMMIT (success, or a database error) means the transaction is over on this
/// connection either way, so it can be reused.
fn finish(results: Vec<Result<(), tokio_postgres::Error>>) -> Result<(), Failed> {
    let reusable = results.last().is_some_and(|r| {
        r.as_ref()
            .map_or_else(|e| e.as_db_error().is_some(), |()| true)
    });
    match results.into_iter().find_map(Result::err) {
        None => Ok(()),
        Some(error) => Err(Failed {
            cause: Cause::Postgres(error),
            connection_reusable: reusable,
        }),
    }
}

async fn rollback(client: &Client, cause: Cause) -> Failed {
    let connection_reusable = client.batch_execute("ROLLBACK").await.is_ok();
    Failed {
        cause,
        connection_reusable,
    }
}

fn encodable(tx: &Transaction) -> bool {
    let mut buf = BytesMut::new();
    tx.statements.iter().flat_map(|s| &s.params).all(|p| {
        buf.clear();
        p.value.to_sql_checked(&p.ty, &mut buf).is_ok()
    })
}

/// Awaits every future, polling them in index order. tokio-postgres sends a request during
/// its future's first poll, so this order is the order on the wire; a combinator that polls
/// in another order could put COMMIT ahead of the effect.
async fn join_in_order<T>(
    mut futures: Vec<Pin<Box<dyn Future<Output = T> + Send + '_>>>,
) -> Vec<T> {
    let mut done: Vec<Option<T>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, slot) in futures.iter_mut().zip(done.iter_mut()) {
            if slot.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(value) => *slot = Some(value),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    done.into_iter().flatten().collect()
}
