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
pub(crate) struct Concurrency {
    /// Invocations at once: `AWS_LAMBDA_MAX_CONCURRENCY`, which Lambda sets on Managed
    /// Instances (`PerExecutionEnvironmentMaxConcurrency`); unset, one, as on classic Lambda.
    pub invocations: usize,
    /// Database connections at most: `DB_MAX_CONNECTIONS`, by default one per invocation at
    /// once, and never more (docs/decisions/0048).
    pub connections: usize,
}

impl Concurrency {
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

#[cfg(feature = "jobs")]
/// Makes the invocation `context` describes the one every line names from now on, in a
/// process that serves one at a time (a scheduled job's, the migrate function's).
pub fn begin(context: &lambda_runtime::Context) {
    crate::log::begin(invocation(context));
}

#[cfg(feature = "jobs")]
/// Runs a scheduled function: every invocation (any JSON event, e.g. an EventBridge
/// schedule, or an operator's `aws lambda invoke --payload`) gets a budget ending `margin`
/// before its deadline and the event, and is answered with the report `job` returns.
async fn serve_scheduled<F, Fut>(
    margin: std::time::Duration,
    job: F,
) -> Result<(), lambda_runtime::Error>
where
    F: Fn(crate::budget::Budget, serde_json::Value) -> Fut,
    Fut: std::future::Future<Output = Result<serde_json::Value, lambda_runtime::Error>> + Send,
{
    lambda_runtime::run(lambda_runtime::service_fn(
        move |event: lambda_runtime::LambdaEvent<serde_json::Value>| {
            begin(&event.context);
            job(
                crate::budget::Budget::before_deadline(event.context.deadline(), margin),
                event.payload,
            )
        },
    ))
    .await
}

#[cfg(feature = "jobs")]
/// A scheduled job's whole `main`: the job as built (a configuration error is logged and ends
/// the process), then one run per invocation, its report the answer.
pub async fn serve_job<J: crate::scheduled::Job>(
    built: Result<J, crate::config::ConfigError>,
) -> Result<(), lambda_runtime::Error> {
    let job = crate::log::Log::process().config(built)?;
    let job = &job;
    serve_scheduled(job.margin(), move |budget, event| async move {
        let report = job.run(budget, event).await?;
        Ok(serde_json::to_value(report)?)
    })
    .await
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
/// invocation with the same connections: one at a time on classic Lambda; on Lambda Managed
/// Instances (`AWS_LAMBDA_MAX_CONCURRENCY` above 1) as many at once, through
/// `lambda_runtime`'s concurrent runtime (one polling task per invocation at once, all on this
/// process's runtime), each delivery on a connection of its own (`DB_MAX_CONNECTIONS`,
/// [`Concurrency`]). A value that cannot be read is an error before any invocation.
///
/// The runtime loop ends only when the Runtime API fails. Before any invocation that is an
/// error (a runtime that cannot reach its API must say so and exit non-zero). After one, it
/// is the API going away between invocations: Lambda itself never does that (it freezes or
/// ends the environment), but a local emulator does, `sam local invoke` after every single
/// invocation. That ends the process quietly, with one info line instead of an `Error:` that
/// reads as a failed invocation; Lambda would start a new environment either way, whatever
/// the exit status.
pub(crate) async fn serve<P: Provider>(
    receiver: Receiver<P>,
    queues: crate::receiver::Queues,
) -> Result<(), lambda_runtime::Error> {
    // The runtime reads the same variable to decide how many invocations it polls for.
    let concurrency = Concurrency::from_env()?;
    let at_once = concurrency.invocations > 1;
    receiver.warm_up().await;
    if at_once {
        crate::log::Log::stdout().write(
            crate::log::Level::Info,
            "serving invocations at once",
            crate::log::fields! { invocations: concurrency.invocations, connections: concurrency.connections },
        );
    }
    let receiver = std::sync::Arc::new((receiver, queues));
    let served = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = std::sync::Arc::clone(&served);
    // One handler for both ways, so the runtime's code is built into the binary once for it.
    let handler = service_fn(move |event: LambdaEvent<Invocation>| {
        let (receiver, counter) = (
            std::sync::Arc::clone(&receiver),
            std::sync::Arc::clone(&counter),
        );
        async move {
            let started = Instant::now();
            let invocation = invocation(&event.context);
            let answering = async {
                let (receiver, queues) = &*receiver;
                let deadline = deadline(receiver, &event.context);
                super::answer(queues, receiver, started, event.payload.0, Some(deadline)).await
            };
            let answer = if at_once {
                // Several at once: each invocation's lines name it through its task.
                crate::log::within(invocation, answering).await
            } else {
                // One at a time: the process's one slot names it.
                crate::log::begin(invocation);
                answering.await
            };
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok::<_, lambda_runtime::Error>(answer)
        }
    });
    // The runtime reads AWS_LAMBDA_MAX_CONCURRENCY too: above 1 it polls for that many
    // invocations at once, else one at a time.
    let serving = lambda_runtime::run_concurrent(handler);
    let ended = if at_once {
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
        serving.await
    };
    let served = served.load(std::sync::atomic::Ordering::Relaxed);
    match ended {
        Err(error) if served > 0 => {
            // The error is the HTTP client's (no request data in it). The receiver's own log
            // is stdout too, which is where a function's lines go.
            crate::log::Log::stdout().write(
                crate::log::Level::Info,
                "the Lambda Runtime API went away; exiting",
                crate::log::fields! { invocations: served, cause: error.to_string() },
            );
            Ok(())
        }
        other => other,
    }
}
