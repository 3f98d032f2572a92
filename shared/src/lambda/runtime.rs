//! The Runtime API loop: one invocation at a time (classic Lambda), or several at once on one
//! process (Lambda Managed Instances), each answered by [`super::answer`].

use std::time::Instant;

use lambda_runtime::{LambdaEvent, service_fn};

use super::event::Invocation;
use crate::config::ConfigError;
use crate::provider::Provider;
use crate::receiver::Receiver;

/// How many invocations one execution environment serves at once, and how many database
/// connections it may hold for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Concurrency {
    /// Invocations at once: `AWS_LAMBDA_MAX_CONCURRENCY`, which Lambda sets on Managed
    /// Instances (`PerExecutionEnvironmentMaxConcurrency`); unset, one, as on classic Lambda.
    pub invocations: usize,
    /// Database connections at most: `DB_MAX_CONNECTIONS`, by default one per invocation at
    /// once, and never more (docs/decisions/0048).
    pub connections: usize,
}

impl Concurrency {
    /// One invocation at a time, on one connection: classic Lambda.
    pub const CLASSIC: Self = Self {
        invocations: 1,
        connections: 1,
    };

    /// From `AWS_LAMBDA_MAX_CONCURRENCY` and `DB_MAX_CONNECTIONS`; an error names the
    /// variable.
    pub fn from_env() -> Result<Self, ConfigError> {
        let invocations = crate::config::number("AWS_LAMBDA_MAX_CONCURRENCY", 1)?.max(1);
        let connections = crate::config::number("DB_MAX_CONNECTIONS", invocations)?;
        if connections == 0 || connections > invocations {
            return Err(ConfigError::new(format!(
                "DB_MAX_CONNECTIONS must be from 1 to the invocations served at once \
                 ({invocations}, AWS_LAMBDA_MAX_CONCURRENCY)"
            )));
        }
        let size = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        Ok(Self {
            invocations: size(invocations),
            connections: size(connections),
        })
    }
}

/// Resolves once this process's parent has changed (it ended, and the process was adopted),
/// checked every second.
async fn orphaned() {
    let parent = std::os::unix::process::parent_id();
    loop {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        if std::os::unix::process::parent_id() != parent {
            return;
        }
    }
}

/// What every line of the invocation `context` describes says about it; the process's first is
/// its cold start (ask once per invocation).
fn invocation(context: &lambda_runtime::Context) -> crate::log::Invocation {
    crate::log::Invocation::next(
        context.invoked_function_arn.clone(),
        context.request_id.clone(),
        context.xray_trace_id.clone(),
    )
}

// The jobs', not a provider crate's: out of the documented surface.
#[doc(hidden)]
/// Makes the invocation `context` describes the one every line names from now on, in a
/// process that serves one at a time (a scheduled job's, the migrate function's).
pub fn begin(context: &lambda_runtime::Context) {
    crate::log::begin(invocation(context));
}

/// Set once the first invocation has checked the login's statement bound against the
/// function's timeout.
static BOUND_CHECKED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The deadline of the invocation `context` describes, for a batch to stop taking records
/// before it; the process's first checks the login's statement bound against the function's
/// timeout (that invocation's time left: Lambda puts it in no variable).
fn deadline<P: Provider>(
    receiver: &Receiver<P>,
    context: &lambda_runtime::Context,
) -> tokio::time::Instant {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let left = std::time::Duration::from_millis(context.deadline.saturating_sub(now_ms));
    if !BOUND_CHECKED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        receiver.check_statement_bound(left);
    }
    tokio::time::Instant::now() + left
}

/// Runs a receiver as a Lambda function: connect at cold start, then answer every
/// invocation, one at a time, with the same connection.
///
/// The runtime loop ends only when the Runtime API fails. Before any invocation that is an
/// error (a runtime that cannot reach its API must say so and exit non-zero). After one, it
/// is the API going away between invocations: Lambda itself never does that (it freezes or
/// ends the environment), but a local emulator does, `sam local invoke` after every single
/// invocation. That ends the process quietly, with one info line instead of an `Error:` that
/// reads as a failed invocation; Lambda would start a new environment either way, whatever
/// the exit status.
pub async fn serve<P: Provider>(receiver: Receiver<P>) -> Result<(), lambda_runtime::Error> {
    serve_with(receiver, Concurrency::CLASSIC).await
}

/// [`serve`] with `concurrency`: more than one invocation at once is Lambda Managed
/// Instances' mode, through `lambda_runtime`'s concurrent runtime (one polling task per
/// invocation at once, all on this process's runtime), each delivery on a connection of its
/// own ([`Database`]).
pub async fn serve_with<P: Provider>(
    receiver: Receiver<P>,
    concurrency: Concurrency,
) -> Result<(), lambda_runtime::Error> {
    receiver.warm_up().await;
    let served = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let ended = if concurrency.invocations > 1 {
        crate::log::Log::stdout().write(
            crate::log::Level::Info,
            "serving invocations at once",
            crate::fields! { invocations: concurrency.invocations, connections: concurrency.connections },
        );
        let receiver = std::sync::Arc::new(receiver);
        let counter = std::sync::Arc::clone(&served);
        let serving =
            lambda_runtime::run_concurrent(service_fn(move |event: LambdaEvent<Invocation>| {
                let (receiver, counter) = (
                    std::sync::Arc::clone(&receiver),
                    std::sync::Arc::clone(&counter),
                );
                async move {
                    // Several at once: each invocation's lines name it through its task.
                    let started = Instant::now();
                    let invocation = invocation(&event.context);
                    let answering = async {
                        let deadline = deadline(&receiver, &event.context);
                        super::answer(&receiver, started, event.payload.0, Some(deadline)).await
                    };
                    let answer = crate::log::within(invocation, answering).await;
                    counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    Ok::<_, lambda_runtime::Error>(answer)
                }
            }));
        // The concurrent runtime polls its API again at once after an error, for good: an
        // environment whose API went away (a local emulator that ended) would spin. It ends
        // instead once the process that started it is gone, as Lambda's never is while the
        // environment lives.
        tokio::select! {
            ended = serving => ended,
            () = orphaned() => {
                crate::log::Log::stdout().write(
                    crate::log::Level::Info,
                    "the process that started this environment is gone; exiting",
                    (),
                );
                Ok(())
            }
        }
    } else {
        let (receiver, counter) = (&receiver, &*served);
        lambda_runtime::run(service_fn(
            move |event: LambdaEvent<Invocation>| async move {
                // One at a time: the process's one slot names the invocation.
                let started = Instant::now();
                crate::log::begin(invocation(&event.context));
                let deadline = deadline(receiver, &event.context);
                let answer =
                    super::answer(receiver, started, event.payload.0, Some(deadline)).await;
                counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Ok::<_, lambda_runtime::Error>(answer)
            },
        ))
        .await
    };
    let served = served.load(std::sync::atomic::Ordering::Relaxed);
    match ended {
        Err(error) if served > 0 => {
            // The error is the HTTP client's (no request data in it). The receiver's own log
            // is stdout too, which is where a function's lines go.
            crate::log::Log::stdout().write(
                crate::log::Level::Info,
                "the Lambda Runtime API went away; exiting",
                crate::fields! { invocations: served, cause: error.to_string() },
            );
            Ok(())
        }
        other => other,
    }
}
