//! The delivery statement: the claim and the effect as one SQL statement, one round trip.
//!
//! ```sql
//! SELECT c.won, c.stored_sha256, CASE WHEN c.won THEN <effect>($5, ...) END
//! FROM claimonce_claim_v1($1, $2, $3, $4) AS c
//! ```
//!
//! The claim (`claimonce_claim_v1`, a PL/pgSQL function of the shared schema) is the row
//! source, so it runs first; the provider's effect (a PL/pgSQL function its migration added)
//! runs only for a row whose claim was won. Sent alone, the statement runs in one implicit
//! transaction: the claim and the effect commit together, or an error rolls both back. This
//! module composes the statement, so a provider has no way to run an effect without winning
//! the claim, nor to write anything outside the statement: an [`Effect`] is data, a function
//! name and its arguments, and the provider never sees the connection. It is the claim
//! layer: each way a delivery's claim runs (this statement, or a Rust effect's transaction)
//! is a `Work` the database layer runs with its deadline.
//!
//! The statement is unnamed (`query_typed`) and carries no `SET`: nothing stays on the
//! session for a transaction-pooling proxy to pin it to one server connection.

use std::fmt::Write as _;

use tokio_postgres::Client;
use tokio_postgres::types::{ToSql, Type};

use crate::db::{Attempted, DeliveryError, Work};
use crate::effect::{Effect, Plan};
use crate::fault::{self, Point};

/// The ledger row this delivery tries to insert.
#[derive(Debug)]
pub(crate) struct Claim<'a> {
    /// Ledger namespace of the provider.
    pub provider: &'a str,
    /// The provider's event id.
    pub event_id: &'a str,
    /// The provider's event type.
    pub event_type: &'a str,
    /// SHA-256 of the raw body; none for an event read from its sender's API, whose JSON is
    /// not the bytes a webhook carried.
    pub payload_sha256: Option<[u8; 32]>,
}

/// How the delivery statement ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Finished {
    /// Won the claim and committed it with the effect.
    Processed,
    /// Won the claim; the event has no effect, so only the claim was committed.
    Ignored,
    /// Claimed earlier. Carries the payload hash stored with the first delivery.
    Duplicate {
        /// The hash stored with the first delivery, when one is recorded.
        stored_sha256: Option<Vec<u8>>,
    },
}

/// The claim's SQL function (migration of the shared schema): `(provider, event_id, event_type,
/// payload_sha256)` in, one row `(won, stored_sha256)` out.
pub const CLAIM_FUNCTION: &str = "claimonce_claim_v1";

/// The claim's four parameters come first; an effect's arguments follow from `$5`.
const CLAIM_PARAMS: usize = 4;

/// The one statement of a delivery with `effect` (or of an event without one, or with a Rust
/// effect: then the claim alone, the first statement of the claim's transaction).
pub fn statement(effect: Option<&Effect>) -> String {
    let mut sql = String::from("SELECT c.won, c.stored_sha256");
    if let Some((function, params, with_claim)) = effect.map(Effect::call_parts) {
        // Writing into a String cannot fail.
        let _ = write!(sql, ", CASE WHEN c.won THEN {function}(");
        let mut sep = "";
        if with_claim {
            sql.push_str("$1, $2");
            sep = ", ";
        }
        for i in 0..params.len() {
            let _ = write!(sql, "{sep}${}", CLAIM_PARAMS + 1 + i);
            sep = ", ";
        }
        sql.push_str(") END");
    }
    // Pushed, not formatted: this runs for every delivery.
    sql.push_str(" FROM ");
    sql.push_str(CLAIM_FUNCTION);
    sql.push_str("($1, $2, $3, $4) AS c");
    sql
}

/// Sends the delivery statement on `client` and reads its one row. An error means the
/// statement's implicit transaction did not commit (or, if the connection was lost after
/// sending, that whether it committed is unknown).
pub(crate) async fn run(
    client: &Client,
    claim: &Claim<'_>,
    effect: Option<&Effect>,
) -> Result<Finished, tokio_postgres::Error> {
    let rows = send(client, claim, effect).await?;
    Ok(read(&rows, effect.is_some()))
}

/// Sends the delivery statement (for a Rust effect, the claim alone) and returns its rows.
async fn send(
    client: &Client,
    claim: &Claim<'_>,
    effect: Option<&Effect>,
) -> Result<Vec<tokio_postgres::Row>, tokio_postgres::Error> {
    let hash: Option<&[u8]> = claim.payload_sha256.as_ref().map(|h| h.as_slice());
    let call = effect.map(Effect::call_parts);
    let mut params: Vec<(&(dyn ToSql + Sync), Type)> =
        Vec::with_capacity(CLAIM_PARAMS + call.map_or(0, |(_, p, _)| p.len()));
    params.extend([
        (&claim.provider as &(dyn ToSql + Sync), Type::TEXT),
        (&claim.event_id, Type::TEXT),
        (&claim.event_type, Type::TEXT),
        (&hash, Type::BYTEA),
    ]);
    if let Some((_, call_params, _)) = call {
        params.extend(call_params.iter().map(crate::effect::Param::typed));
    }
    // tokio-postgres encodes every parameter before it sends anything, so a value that cannot
    // be encoded fails here with nothing on the wire.
    client.query_typed(&statement(effect), &params).await
}

/// How the statement ended, from its one row.
fn read(rows: &[tokio_postgres::Row], has_effect: bool) -> Finished {
    let row = rows.first();
    let won = row.and_then(|r| r.try_get::<_, bool>(0).ok());
    match (won, has_effect) {
        (Some(true), true) => Finished::Processed,
        (Some(true), false) => Finished::Ignored,
        _ => Finished::Duplicate {
            stored_sha256: row.and_then(|r| r.try_get::<_, Option<Vec<u8>>>(1).ok().flatten()),
        },
    }
}

/// A Rust effect, called with the claim's transaction once the claim is won: a provider's
/// [`RustEffect`](crate::effect::RustEffect), boxed so that the claim's transaction can run
/// any.
pub(crate) trait Apply: Send + Sync {
    fn apply<'t>(
        &'t self,
        tx: &'t crate::effect::Tx<'t>,
    ) -> futures_util::future::BoxFuture<'t, Result<(), crate::effect::EffectError>>;
}

impl<R: crate::effect::RustEffect> Apply for R {
    fn apply<'t>(
        &'t self,
        tx: &'t crate::effect::Tx<'t>,
    ) -> futures_util::future::BoxFuture<'t, Result<(), crate::effect::EffectError>> {
        Box::pin(crate::effect::RustEffect::apply(self, tx))
    }
}

/// A delivery's claim and effect, as work on the environment's connection
/// ([`Database::run`](crate::db::Database::run)): the one statement, or for a Rust effect the
/// claim's explicit transaction.
pub(crate) struct Settle<'a, A> {
    /// The ledger row to claim.
    pub(crate) claim: &'a Claim<'a>,
    /// What the claim does if won: a call in the claim's statement, Rust on its
    /// transaction, or nothing.
    pub(crate) plan: Plan<A>,
}

impl<A: Apply> Work for Settle<'_, A> {
    type Output = Finished;

    fn attempt<'c>(
        &'c self,
        client: &'c Client,
        deadline: tokio::time::Instant,
    ) -> futures_util::future::BoxFuture<'c, Attempted<Finished>> {
        Box::pin(async move {
            if let Err(injected) = fault::hit(Point::ClaimSend).await {
                return Attempted {
                    outcome: Err(injected_error(injected)),
                    reusable: true,
                };
            }
            let effect = match &self.plan {
                Plan::Rust(apply) => {
                    return run_in_rust(client, self.claim, apply, deadline).await;
                }
                Plan::Call(effect) => Some(effect),
                Plan::Nothing => None,
            };
            // One statement in its implicit transaction: whatever it answered, the server has
            // ended that transaction.
            let outcome = run(client, self.claim, effect)
                .await
                .map_err(DeliveryError::Failed);
            Attempted {
                outcome: after_commit(outcome).await,
                reusable: true,
            }
        })
    }
}

#[cfg(feature = "jobs")]
/// Which of a provider's event ids the ledger holds (`claimonce_claimed_v1`, V16), as work on
/// the environment's connection: what a recover function asks before it applies what it
/// listed.
pub(crate) struct Claimed<'a> {
    /// The provider's ledger name.
    pub(crate) provider: &'a str,
    /// The ids to look up.
    pub(crate) event_ids: &'a [&'a str],
}

#[cfg(feature = "jobs")]
impl Work for Claimed<'_> {
    type Output = std::collections::HashSet<String>;

    fn attempt<'c>(
        &'c self,
        client: &'c Client,
        _deadline: tokio::time::Instant,
    ) -> futures_util::future::BoxFuture<'c, Attempted<Self::Output>> {
        Box::pin(async move {
            let rows = client
                .query_typed(
                    "SELECT claimonce_claimed_v1($1, $2)",
                    &[
                        (&self.provider, Type::TEXT),
                        (&self.event_ids, Type::TEXT_ARRAY),
                    ],
                )
                .await;
            Attempted {
                outcome: rows.map_err(DeliveryError::Failed).map(|rows| {
                    rows.iter()
                        .filter_map(|row| row.try_get::<_, String>(0).ok())
                        .collect()
                }),
                reusable: true,
            }
        })
    }
}

/// The claim and a Rust effect on one explicit transaction: `BEGIN` pipelined with the claim
/// (one flight), then the effect's statements if the claim was won, then `COMMIT`. Any error
/// sends `ROLLBACK` while the deadline allows, so the claim vanishes with whatever the effect
/// wrote; past the deadline, or when the `ROLLBACK` is not answered, the connection is
/// reported not reusable and the database layer discards it (the server rolls back a
/// transaction whose connection closes): the next delivery's `BEGIN` would otherwise run
/// inside it, and its `COMMIT` commit this delivery's claim without its effect.
pub(crate) async fn run_in_rust(
    client: &Client,
    claim: &Claim<'_>,
    apply: &dyn Apply,
    deadline: tokio::time::Instant,
) -> Attempted<Finished> {
    let begun = futures_util::future::try_join(
        client.batch_execute("BEGIN"),
        // The claim alone: a Rust effect has no call in the statement.
        send(client, claim, None),
    )
    .await;
    let outcome = match begun {
        Err(e) => Err(DeliveryError::Failed(e)),
        Ok(((), rows)) => match read(&rows, true) {
            Finished::Processed => {
                let tx = crate::effect::Tx::new(client, deadline);
                let applied = match fault::hit(Point::ClaimWon).await {
                    Ok(()) => apply.apply(&tx).await,
                    Err(injected) => Err(crate::effect::EffectError::injected(injected)),
                };
                match applied {
                    // A statement that failed aborted the transaction, and COMMIT would answer
                    // with a silent rollback: an effect that went on past its error has failed.
                    Ok(()) if tx.failed() => {
                        Err(DeliveryError::Effect(crate::effect::EffectError::failed(
                            "the effect went on after one of its statements failed",
                        )))
                    }
                    Ok(()) => Ok(Finished::Processed),
                    Err(e) if e.past_deadline() => Err(DeliveryError::TimedOut),
                    Err(e) => Err(e
                        .into_database()
                        .map_or_else(DeliveryError::Effect, DeliveryError::Failed)),
                }
            }
            lost => Ok(lost),
        },
    };
    match outcome {
        // The commit's own failure (a deferred constraint) ends the transaction too, but the
        // connection is trusted again only on an answer that says the transaction is over.
        Ok(finished) => {
            if let Err(injected) = fault::hit(Point::CommitSend).await {
                // Ended as a failed effect's transaction is.
                return Attempted {
                    outcome: Err(injected_error(injected)),
                    reusable: client.batch_execute("ROLLBACK").await.is_ok(),
                };
            }
            match client.batch_execute("COMMIT").await {
                Ok(()) => Attempted {
                    outcome: after_commit(Ok(finished)).await,
                    reusable: true,
                },
                Err(e) => Attempted {
                    outcome: Err(DeliveryError::Failed(e)),
                    reusable: false,
                },
            }
        }
        Err(e) => {
            let usable = !client.is_closed()
                && !matches!(&e, DeliveryError::Failed(f) if crate::pg_error::connection_lost(f));
            // Its own failure is the answer either way; a ROLLBACK that is not sent or not
            // answered leaves the connection to be discarded.
            let rolled_back = usable
                && tokio::time::Instant::now() < deadline
                && client.batch_execute("ROLLBACK").await.is_ok();
            Attempted {
                outcome: Err(e),
                reusable: rolled_back,
            }
        }
    }
}

/// What a committed (or failed) delivery answers once the database has answered it: the
/// `committed` fault point's error stands for an answer lost after the commit.
async fn after_commit(outcome: Result<Finished, DeliveryError>) -> Result<Finished, DeliveryError> {
    match fault::hit(Point::Committed).await {
        Ok(()) => outcome,
        Err(injected) => Err(injected_error(injected)),
    }
}

/// A fault point's `error`, as the delivery's own failure: answered 500, never spilled.
fn injected_error(injected: fault::Injected) -> DeliveryError {
    DeliveryError::Effect(crate::effect::EffectError::injected(injected))
}

#[cfg(test)]
mod tests {
    use tokio_postgres::types::Type;

    use super::*;
    use crate::effect::Param;
    use crate::forward::Forwardable;

    #[test]
    fn the_effect_is_called_only_under_the_won_claim() {
        assert_eq!(
            statement(None),
            format!("SELECT c.won, c.stored_sha256 FROM {CLAIM_FUNCTION}($1, $2, $3, $4) AS c")
        );
        let effect = Effect::call(
            "stripe_credit_v1",
            vec![
                Param::new("cus_1".to_owned(), Type::TEXT),
                Param::new(None::<String>, Type::TEXT),
                Param::new(1_i64, Type::INT8),
            ],
        );
        assert_eq!(
            statement(Some(&effect)),
            format!(
                "SELECT c.won, c.stored_sha256, CASE WHEN c.won THEN stripe_credit_v1($5, $6, $7) \
                 END FROM {CLAIM_FUNCTION}($1, $2, $3, $4) AS c"
            )
        );
    }

    /// The claim's identity comes first in a call that asks for it: the forward's function
    /// called so takes the statement a forward makes (and the migrations test prepares it).
    #[test]
    fn a_call_with_the_claim_passes_its_provider_and_event_id_first() {
        let effect = Effect::call(
            "claimonce_forward_v2",
            vec![
                Param::new("github.ping", Type::TEXT),
                Param::new("{}", Type::TEXT),
                Param::new(None::<String>, Type::TEXT),
                Param::new(None::<String>, Type::TEXT),
            ],
        )
        .with_claim();
        assert_eq!(
            statement(Some(&effect)),
            format!(
                "SELECT c.won, c.stored_sha256, CASE WHEN c.won THEN \
                 claimonce_forward_v2($1, $2, $5, $6, $7, $8) END FROM {CLAIM_FUNCTION}($1, $2, $3, \
                 $4) AS c"
            )
        );
    }

    #[test]
    fn a_forward_passes_the_claims_identity_then_the_topic_and_the_body() {
        let body = Forwardable::new(br#"{"zen":"Keep it logically awesome."}"#).expect("JSON");
        assert_eq!(
            statement(Some(&Effect::forward("github.ping".into(), body))),
            format!(
                "SELECT c.won, c.stored_sha256, CASE WHEN c.won THEN \
                 claimonce_forward_v2($1, $2, $5, $6, $7, $8) END FROM {CLAIM_FUNCTION}($1, $2, $3, \
                 $4) AS c"
            )
        );
    }
}
