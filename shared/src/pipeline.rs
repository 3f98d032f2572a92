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
//! name and its arguments, and the provider never sees the connection.
//!
//! The statement is unnamed (`query_typed`) and carries no `SET`: nothing stays on the
//! session for a transaction-pooling proxy to pin it to one server connection.

use std::fmt::Write as _;

use tokio_postgres::Client;
use tokio_postgres::types::{ToSql, Type};

use crate::db::{Attempted, DeliveryError, Work};
use crate::response::{Problem, Rejection};

/// One argument of an effect, with its PostgreSQL type.
pub struct Param {
    value: Box<dyn ToSql + Send + Sync>,
    ty: Type,
}

impl Param {
    /// An argument of the given type (`Type::TEXT`, `Type::INT8`, `Type::TEXT_ARRAY`, ...). The
    /// effect function's parameter must have exactly this type: PostgreSQL picks the function
    /// by its argument types.
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

/// What a won claim does to the database: one call of an effect function, a PL/pgSQL
/// function that a migration added (see the README's "Adding a provider"), in the claim's one
/// statement; or the provider's [`Provider::apply`](crate::Provider::apply), Rust on the
/// claim's transaction ([`Effect::in_rust`]).
#[derive(Debug)]
pub struct Effect {
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    Call {
        function: &'static str,
        params: Vec<Param>,
        /// The claim's provider and event id are passed first (`$1, $2`).
        with_claim: bool,
    },
    Rust,
}

/// The function [`Effect::forward`] calls (migration V12): it inserts the signed body into the
/// outbox with the header that signed it, tagged with the claim's provider and event id.
pub const FORWARD_FUNCTION: &str = "claimonce_forward_v2";

/// The largest message an SQS queue takes, body and attributes together (1 MiB since AWS
/// raised the limit in August 2025; the template sets the outbox queue's `MaximumMessageSize`
/// to it).
pub const SQS_MESSAGE_LIMIT: usize = 1_048_576;

/// What a forwarded message's attributes may take beside its body: the relay's seven
/// attributes with their longest values (topic 128 bytes, signature header 64 and value 256,
/// provider and event id 255 each, as [`FORWARD_FUNCTION`] and [`crate::EventId`] bound
/// them) come to about 1,300 bytes with their names and types.
pub const FORWARD_ATTRIBUTE_ROOM: usize = 2048;

/// The largest body a receiver forwards: a longer one is answered 413 and writes nothing,
/// because the relay could never send it. This is the one place the limit is stated.
pub const FORWARD_BODY_LIMIT: usize = SQS_MESSAGE_LIMIT - FORWARD_ATTRIBUTE_ROOM;

impl Effect {
    /// A call of `function` (a versioned name such as `stripe_credit_v1`) with `params`.
    pub fn call(function: &'static str, params: Vec<Param>) -> Self {
        Self {
            kind: Kind::Call {
                function,
                params,
                with_claim: false,
            },
        }
    }

    /// The provider's [`Provider::apply`](crate::Provider::apply): async Rust that runs only
    /// after the claim is won, with a [`Tx`](crate::effect::Tx) on the claim's transaction,
    /// and commits or rolls back with it (more round trips than [`Effect::call`]: one for
    /// each statement it sends, and one for the commit).
    pub fn in_rust() -> Self {
        Self { kind: Kind::Rust }
    }

    /// True for [`Effect::in_rust`].
    pub fn is_rust(&self) -> bool {
        matches!(self.kind, Kind::Rust)
    }

    /// Hands the claimed event to the outbox unchanged, under `topic`, and so to the relay's
    /// queue: "verified, exactly once, onto a queue", with no table of the provider's own. The
    /// relay sends the signed bytes as they arrived, with the signature header
    /// ([`Forwardable::signed_by`]), so a consumer can verify them.
    pub fn forward(topic: String, event: Forwardable) -> Self {
        let (header, value) = event.signature.unzip();
        Self {
            kind: Kind::Call {
                function: FORWARD_FUNCTION,
                params: vec![
                    Param::new(topic, Type::TEXT),
                    Param::new(event.body, Type::TEXT),
                    Param::new(header, Type::TEXT),
                    Param::new(value, Type::TEXT),
                ],
                with_claim: true,
            },
        }
    }

    /// The effect function's name; `None` for [`Effect::in_rust`].
    pub fn function(&self) -> Option<&'static str> {
        self.call_parts().map(|(function, _, _)| function)
    }

    /// The call's function, arguments and whether the claim's identity comes first.
    fn call_parts(&self) -> Option<(&'static str, &[Param], bool)> {
        match &self.kind {
            Kind::Call {
                function,
                params,
                with_claim,
            } => Some((function, params, *with_claim)),
            Kind::Rust => None,
        }
    }
}

/// A signed body the outbox can store and the relay can send: at most [`FORWARD_BODY_LIMIT`]
/// bytes of UTF-8 JSON with no NUL in any string and no number outside `numeric`'s range
/// (PostgreSQL's `jsonb` refuses `\u0000`, and `1e-200000` or `1e200000` with 22003; a signed
/// event it refused would be answered 500 and retried forever).
#[derive(Debug, Clone)]
pub struct Forwardable {
    body: String,
    signature: Option<(String, String)>,
}

/// Longest signature header name and value kept with a forward (migration V12 bounds both).
const MAX_SIGNATURE_HEADER: usize = 64;
const MAX_SIGNATURE: usize = 256;

impl Forwardable {
    /// Checks `body`; a refusal is a 400 (`invalid-payload`), or a 413 (`payload-too-large`)
    /// for a body longer than [`FORWARD_BODY_LIMIT`].
    pub fn new(body: &[u8]) -> Result<Self, Rejection> {
        if body.len() > FORWARD_BODY_LIMIT {
            return Err(Rejection::new(
                Problem::PayloadTooLarge,
                "a forwarded event is at most 1046528 bytes, what a queue message holds",
            ));
        }
        fn holds_nul(value: &serde_json::Value) -> bool {
            use serde_json::Value;
            match value {
                Value::String(s) => s.contains('\0'),
                Value::Array(items) => items.iter().any(holds_nul),
                Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || holds_nul(v)),
                _ => false,
            }
        }
        let invalid = |detail| Rejection::new(Problem::InvalidPayload, detail);
        let text = std::str::from_utf8(body).map_err(|_| invalid("the body is not UTF-8"))?;
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|_| invalid("the body is not JSON"))?;
        if holds_nul(&value) {
            return Err(invalid(
                "the body carries a NUL character, which cannot be stored",
            ));
        }
        if !numbers_fit_numeric(text) {
            return Err(invalid(
                "the body carries a number outside the range PostgreSQL can store",
            ));
        }
        Ok(Self {
            body: text.to_owned(),
            signature: None,
        })
    }

    /// Keeps the header that signed the body (its canonical name, such as
    /// `X-Hub-Signature-256`, and its value as it arrived), so a consumer can verify the
    /// message. A value too long to keep is a 400: no verifier accepts one that long.
    pub fn signed_by(mut self, header: &'static str, value: &str) -> Result<Self, Rejection> {
        if header.len() > MAX_SIGNATURE_HEADER || value.len() > MAX_SIGNATURE {
            return Err(Rejection::new(
                Problem::MalformedSignature,
                "the signature header is too long",
            ));
        }
        self.signature = Some((header.to_owned(), value.to_owned()));
        Ok(self)
    }
}

/// `numeric`'s limits (PostgreSQL, "Arbitrary Precision Numbers"): up to 131072 digits before
/// the decimal point and 16383 after it.
const NUMERIC_INTEGER_DIGITS: i64 = 131_072;
const NUMERIC_FRACTION_DIGITS: i64 = 16_383;

/// True when every number in `json` (already known to be valid JSON) fits `numeric`, which is
/// how `jsonb` stores numbers. serde_json has read them as `f64`, which loses exactly what
/// matters here, so the number literals are read from the text: outside strings, a number is
/// `-? int frac? exp?`.
fn numbers_fit_numeric(json: &str) -> bool {
    let b = json.as_bytes();
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        match c {
            b'"' => {
                // Skip the string, escapes included.
                i += 1;
                while let Some(&c) = b.get(i) {
                    i += if c == b'\\' { 2 } else { 1 };
                    if c == b'"' {
                        break;
                    }
                }
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                while b
                    .get(i)
                    .is_some_and(|c| c.is_ascii_digit() || b"+-.eE".contains(c))
                {
                    i += 1;
                }
                if !number_fits_numeric(json.get(start..i).unwrap_or("")) {
                    return false;
                }
            }
            _ => i += 1,
        }
    }
    true
}

/// One JSON number literal against `numeric`'s limits, with its leading and trailing zeros
/// (which PostgreSQL drops) left out of the count.
fn number_fits_numeric(literal: &str) -> bool {
    let literal = literal.trim_start_matches('-');
    let (mantissa, exponent) = match literal.find(['e', 'E']) {
        Some(at) => (
            literal.get(..at).unwrap_or(""),
            literal.get(at + 1..).unwrap_or("0"),
        ),
        None => (literal, "0"),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits: String = format!("{int}{frac}");
    let Some(first) = digits.find(|c: char| c != '0') else {
        return true; // zero, however written
    };
    let last = digits.rfind(|c: char| c != '0').unwrap_or(first);
    // An exponent too long for i64 is far outside the range either way.
    let Ok(exponent) = exponent.trim_start_matches('+').parse::<i64>() else {
        return false;
    };
    let int_len = i64::try_from(int.len()).unwrap_or(i64::MAX);
    let (first, last) = (
        i64::try_from(first).unwrap_or(i64::MAX),
        i64::try_from(last).unwrap_or(i64::MAX),
    );
    // Positions relative to the decimal point: the most significant digit's power of ten is
    // int_len - 1 - first + exponent; the least significant's is int_len - 1 - last + exponent.
    let highest = int_len
        .saturating_sub(1)
        .saturating_sub(first)
        .saturating_add(exponent);
    let lowest = int_len
        .saturating_sub(1)
        .saturating_sub(last)
        .saturating_add(exponent);
    highest < NUMERIC_INTEGER_DIGITS && lowest >= -NUMERIC_FRACTION_DIGITS
}

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

/// The claim's four parameters come first; an effect's arguments follow from `$5`.
const CLAIM_PARAMS: usize = 4;

/// The one statement of a delivery with `effect` (or of an event without one, or with a Rust
/// effect: then the claim alone, the first statement of the claim's transaction).
pub fn statement(effect: Option<&Effect>) -> String {
    let mut sql = String::from("SELECT c.won, c.stored_sha256");
    if let Some((function, params, with_claim)) = effect.and_then(Effect::call_parts) {
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
    sql.push_str(" FROM claimonce_claim_v1($1, $2, $3, $4) AS c");
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
    let call = effect.and_then(Effect::call_parts);
    let mut params: Vec<(&(dyn ToSql + Sync), Type)> =
        Vec::with_capacity(CLAIM_PARAMS + call.map_or(0, |(_, p, _)| p.len()));
    params.extend([
        (&claim.provider as &(dyn ToSql + Sync), Type::TEXT),
        (&claim.event_id, Type::TEXT),
        (&claim.event_type, Type::TEXT),
        (&hash, Type::BYTEA),
    ]);
    if let Some((_, call_params, _)) = call {
        params.extend(
            call_params
                .iter()
                .map(|p| (&*p.value as &(dyn ToSql + Sync), p.ty.clone())),
        );
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

/// A Rust effect, called with the claim's transaction once the claim is won.
pub(crate) trait Apply: Send + Sync {
    fn apply<'t>(
        &'t self,
        tx: &'t crate::effect::Tx<'t>,
    ) -> futures_util::future::BoxFuture<'t, Result<(), crate::effect::EffectError>>;
}

/// What [`run_in_rust`] calls.
pub(crate) type RustEffect<'a> = &'a dyn Apply;

/// A delivery's claim and effect, as work on the environment's connection
/// ([`Database::run`](crate::db::Database::run)): the one statement, or for a Rust effect the
/// claim's explicit transaction.
pub(crate) struct Settle<'a> {
    /// The ledger row to claim.
    pub(crate) claim: &'a Claim<'a>,
    /// The effect, if the event has one.
    pub(crate) effect: Option<&'a Effect>,
    /// The provider's Rust effect, for an [`Effect::in_rust`].
    pub(crate) apply: RustEffect<'a>,
}

impl Work for Settle<'_> {
    type Output = Finished;

    fn attempt<'c>(
        &'c self,
        client: &'c Client,
        deadline: tokio::time::Instant,
    ) -> futures_util::future::BoxFuture<'c, Attempted<Finished>> {
        Box::pin(async move {
            match self.effect {
                Some(rust) if rust.is_rust() => {
                    run_in_rust(client, self.claim, self.apply, deadline).await
                }
                // One statement in its implicit transaction: whatever it answered, the server
                // has ended that transaction.
                _ => Attempted {
                    outcome: run(client, self.claim, self.effect)
                        .await
                        .map_err(DeliveryError::Failed),
                    reusable: true,
                },
            }
        })
    }
}

/// Which of a provider's event ids the ledger holds (`claimonce_claimed_v1`, V16), as work on
/// the environment's connection: what a recover function asks before it applies what it
/// listed.
pub(crate) struct Claimed<'a> {
    /// The provider's ledger name.
    pub(crate) provider: &'a str,
    /// The ids to look up.
    pub(crate) event_ids: &'a [&'a str],
}

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
    apply: RustEffect<'_>,
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
                match apply.apply(&tx).await {
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
        Ok(finished) => match client.batch_execute("COMMIT").await {
            Ok(()) => Attempted {
                outcome: Ok(finished),
                reusable: true,
            },
            Err(e) => Attempted {
                outcome: Err(DeliveryError::Failed(e)),
                reusable: false,
            },
        },
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_effect_is_called_only_under_the_won_claim() {
        assert_eq!(
            statement(None),
            "SELECT c.won, c.stored_sha256 FROM claimonce_claim_v1($1, $2, $3, $4) AS c"
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
            "SELECT c.won, c.stored_sha256, CASE WHEN c.won THEN stripe_credit_v1($5, $6, $7) END \
             FROM claimonce_claim_v1($1, $2, $3, $4) AS c"
        );
    }

    #[test]
    fn a_forward_passes_the_claims_identity_then_the_topic_and_the_body() {
        let body = Forwardable::new(br#"{"zen":"Keep it logically awesome."}"#).expect("JSON");
        assert_eq!(
            statement(Some(&Effect::forward("github.ping".into(), body))),
            "SELECT c.won, c.stored_sha256, CASE WHEN c.won THEN \
             claimonce_forward_v2($1, $2, $5, $6, $7, $8) END FROM claimonce_claim_v1($1, $2, $3, $4) AS c"
        );
    }

    #[test]
    fn only_json_the_outbox_can_store_is_forwardable() {
        assert!(Forwardable::new(br#"{"a":[1,"\u00e9",{"b":null}]}"#).is_ok());
        // Within numeric's range, however written; and number-like text inside strings.
        for ok in [
            &br#"{"n":[0, -0.0, 0e-999999, 1e-16383, 1e300, 12.5e3, -7]}"#[..],
            br#"{"s":"1e-200000 \"1e999999\""}"#,
        ] {
            assert!(
                Forwardable::new(ok).is_ok(),
                "{}",
                String::from_utf8_lossy(ok)
            );
        }
        for bad in [
            &b"not json"[..],
            b"{\"a\":\"\xff\"}",
            br#"{"a":"x\u0000y"}"#,
            br#"{"a":[{"b":"\u0000"}]}"#,
            br#"{"\u0000":1}"#,
            // Outside numeric's range: jsonb refuses them (22003).
            br#"{"n":1e-200000}"#,
            br#"{"n":[1, -1e200000]}"#,
            br#"{"n":0.1e-16383}"#,
            br#"{"n":1e131072}"#,
        ] {
            assert_eq!(
                Forwardable::new(bad).expect_err("refused").problem,
                Problem::InvalidPayload
            );
        }
    }

    #[test]
    fn a_forward_the_queue_could_not_hold_is_413_and_one_at_the_limit_is_kept() {
        let sized = |len: usize| {
            let mut body = br#"{"pad":""#.to_vec();
            body.resize(len - 2, b'x');
            body.extend_from_slice(br#""}"#);
            body
        };
        assert!(Forwardable::new(&sized(FORWARD_BODY_LIMIT)).is_ok());
        let refused = Forwardable::new(&sized(FORWARD_BODY_LIMIT + 1)).expect_err("too large");
        assert_eq!(refused.problem, Problem::PayloadTooLarge);
        assert!(
            refused.detail.contains(&FORWARD_BODY_LIMIT.to_string()),
            "the answer names the limit: {}",
            refused.detail
        );
        let signed = Forwardable::new(b"{}").expect("JSON");
        assert!(
            signed
                .clone()
                .signed_by("X-Hub-Signature-256", &"a".repeat(256))
                .is_ok()
        );
        assert_eq!(
            signed
                .signed_by("X-Hub-Signature-256", &"a".repeat(257))
                .expect_err("too long")
                .problem,
            Problem::MalformedSignature
        );
    }
}
