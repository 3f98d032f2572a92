//! A Lambda Runtime API emulator: the HTTP interface a function binary polls for invocations
//! (`AWS_LAMBDA_RUNTIME_API`), so that the real `bootstrap` binaries run locally and in tests
//! exactly as they run on Lambda, several instances per function like several execution
//! environments.
//!
//! Each instance started with [`RuntimeApi::command`] gets an endpoint of its own (a port) and
//! a lifeline: the write end of a pipe as its standard input, which only its exit closes. When
//! an instance exits with an invocation in hand, that invocation is answered at once with
//! Lambda's `Runtime.ExitError`, as Lambda answers it, instead of waiting out its timeout; and
//! the dead instance's pending poll, if any, is dropped so it takes no further invocation.

use std::collections::{HashMap, HashSet};
use std::io;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::net::unix::pipe;
use tokio::process::{Child, Command};
use tokio::sync::{Mutex, mpsc, oneshot};
use tokio::task::JoinSet;

use crate::http::Reply;

/// The `errorType` of the error an invocation is answered with when the instance holding it
/// exits before answering (Lambda's own for a runtime that exits mid-invocation).
pub const EXIT_ERROR_TYPE: &str = "Runtime.ExitError";

/// How an invocation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The function returned this response payload.
    Response(Bytes),
    /// The function reported an error (an `Err` returned to the runtime, or a panic).
    Error(Bytes),
}

/// Why an invocation produced no outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InvokeError {
    /// No instance answered before the deadline (none running, or it hung or died).
    TimedOut,
    /// The emulator has stopped.
    Closed,
}

struct Invocation {
    event: Bytes,
    deadline_ms: u64,
    reply: oneshot::Sender<Outcome>,
}

/// Which instance fetched an invocation: 0 for the shared endpoint, whose callers are not
/// known, else the instance's own number.
type InstanceId = u64;

/// Invocations handed out and not answered yet, and the instances known to have exited.
#[derive(Default)]
struct Flights {
    waiting: HashMap<String, (InstanceId, oneshot::Sender<Outcome>)>,
    dead: HashSet<InstanceId>,
}

struct State {
    function_name: String,
    pending: Mutex<mpsc::Receiver<Invocation>>,
    flights: std::sync::Mutex<Flights>,
    next_id: AtomicU64,
    next_instance: AtomicU64,
}

/// One function's Runtime API endpoint.
pub struct RuntimeApi {
    addr: SocketAddr,
    function_name: String,
    queue: mpsc::Sender<Invocation>,
    state: Arc<State>,
}

impl std::fmt::Debug for RuntimeApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeApi")
            .field("addr", &self.addr)
            .field("function_name", &self.function_name)
            .finish_non_exhaustive()
    }
}

fn reply(status: StatusCode, body: impl Into<Bytes>) -> Reply {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    response
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// What Lambda answers for an invocation whose runtime exited before answering it.
fn exit_error(request_id: &str) -> Outcome {
    let error = serde_json::json!({
        "errorType": EXIT_ERROR_TYPE,
        "errorMessage": format!(
            "RequestId: {request_id} Error: Runtime exited before answering the invocation"
        ),
    });
    Outcome::Error(Bytes::from(error.to_string()))
}

async fn route(state: Arc<State>, instance: InstanceId, request: Request<Incoming>) -> Reply {
    let path = request.uri().path().to_owned();
    let Some(rest) = path.strip_prefix("/2018-06-01/runtime/") else {
        return reply(StatusCode::NOT_FOUND, "unknown path");
    };
    if request.method() == Method::GET && rest == "invocation/next" {
        // Long poll: one instance at a time waits on the queue.
        let next = state.pending.lock().await.recv().await;
        let Some(invocation) = next else {
            return reply(StatusCode::GONE, "runtime api stopped");
        };
        let id = format!(
            "{:08x}-local",
            state.next_id.fetch_add(1, Ordering::Relaxed)
        );
        if let Ok(mut flights) = state.flights.lock() {
            if flights.dead.contains(&instance) {
                // Taken by a poll of an instance that has just exited: it will never answer.
                let _ = invocation.reply.send(exit_error(&id));
                return reply(StatusCode::GONE, "instance exited");
            }
            flights
                .waiting
                .insert(id.clone(), (instance, invocation.reply));
        }
        let arn = format!(
            "arn:aws:lambda:us-east-1:123456789012:function:{}",
            state.function_name
        );
        let response = Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "application/json")
            .header("lambda-runtime-aws-request-id", &id)
            .header(
                "lambda-runtime-deadline-ms",
                invocation.deadline_ms.to_string(),
            )
            .header("lambda-runtime-invoked-function-arn", arn)
            .header("lambda-runtime-trace-id", format!("Root=1-00000000-{id}"))
            .body(Full::new(invocation.event));
        return response.unwrap_or_else(|_| reply(StatusCode::INTERNAL_SERVER_ERROR, ""));
    }
    if request.method() == Method::POST {
        if rest == "init/error" {
            let body = crate::http::body(request).await;
            eprintln!(
                "[{}] init error: {}",
                state.function_name,
                String::from_utf8_lossy(&body)
            );
            return reply(StatusCode::ACCEPTED, "");
        }
        let parts: Vec<&str> = rest.split('/').collect();
        if let ["invocation", id, kind @ ("response" | "error")] = parts.as_slice() {
            let (id, kind) = ((*id).to_owned(), (*kind).to_owned());
            let body = crate::http::body(request).await;
            let waiter = state
                .flights
                .lock()
                .ok()
                .and_then(|mut f| f.waiting.remove(&id));
            let Some((_, waiter)) = waiter else {
                return reply(StatusCode::BAD_REQUEST, "unknown request id");
            };
            let outcome = if kind == "response" {
                Outcome::Response(body)
            } else {
                Outcome::Error(body)
            };
            let _ = waiter.send(outcome);
            return reply(StatusCode::ACCEPTED, "");
        }
    }
    reply(StatusCode::NOT_FOUND, "unknown path")
}

/// Serves one instance's endpoint until the future is dropped, which drops its connections
/// too (and with them a poll waiting for the next invocation). It never ends by itself.
async fn serve_instance(state: Arc<State>, instance: InstanceId, listener: TcpListener) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else {
                    // No new connection can be had; the open ones go on (their own tasks).
                    return std::future::pending().await;
                };
                let state = Arc::clone(&state);
                connections.spawn(async move {
                    let service = service_fn(move |request| {
                        let reply = route(Arc::clone(&state), instance, request);
                        async move { Ok::<_, std::convert::Infallible>(reply.await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Returns when every holder of the pipe's write end has closed it: the instance has exited
/// (and the parent has let go of its copy, which the spawned command holds).
async fn exited(life: pipe::Receiver) {
    let mut buf = [0u8; 16];
    loop {
        if life.readable().await.is_err() {
            return;
        }
        match life.try_read(&mut buf) {
            Ok(0) => return,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Ok(_) | Err(_) => return,
        }
    }
}

/// Serves `instance` until it exits, then answers what it was holding with the exit error.
async fn watch(
    state: Arc<State>,
    instance: InstanceId,
    listener: TcpListener,
    life: pipe::Receiver,
) {
    tokio::select! {
        () = serve_instance(Arc::clone(&state), instance, listener) => {}
        () = exited(life) => {}
    }
    // The endpoint and its connections are gone with `serve_instance`; a poll that took an
    // invocation before that sees the instance dead and answers it itself (`route`).
    let orphans: Vec<(String, oneshot::Sender<Outcome>)> = match state.flights.lock() {
        Ok(mut flights) => {
            flights.dead.insert(instance);
            let ids: Vec<String> = flights
                .waiting
                .iter()
                .filter(|(_, (owner, _))| *owner == instance)
                .map(|(id, _)| id.clone())
                .collect();
            ids.into_iter()
                .filter_map(|id| flights.waiting.remove(&id).map(|(_, reply)| (id, reply)))
                .collect()
        }
        Err(_) => Vec::new(),
    };
    for (id, reply) in orphans {
        let _ = reply.send(exit_error(&id));
    }
}

impl RuntimeApi {
    /// Starts an endpoint for `function_name` on a free loopback port.
    pub async fn start(function_name: &str) -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (queue, pending) = mpsc::channel(1024);
        let state = Arc::new(State {
            function_name: function_name.to_owned(),
            pending: Mutex::new(pending),
            flights: std::sync::Mutex::new(Flights::default()),
            next_id: AtomicU64::new(1),
            next_instance: AtomicU64::new(1),
        });
        let shared = Arc::clone(&state);
        tokio::spawn(crate::http::serve(listener, move |r| {
            route(Arc::clone(&shared), 0, r)
        }));
        Ok(Self {
            addr,
            function_name: function_name.to_owned(),
            queue,
            state,
        })
    }

    /// A new instance's own endpoint and lifeline: its address, and the write end of the pipe
    /// whose closing says it exited. `None` outside a Tokio runtime, or when the system
    /// refuses a socket or a pipe; the instance then uses the shared endpoint, and an
    /// invocation it dies holding waits out its timeout.
    fn instance(&self) -> Option<(String, Stdio)> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").ok()?;
        listener.set_nonblocking(true).ok()?;
        let address = listener.local_addr().ok()?.to_string();
        let (reader, writer) = io::pipe().ok()?;
        let _entered = runtime.enter();
        let listener = TcpListener::from_std(listener).ok()?;
        let life = pipe::Receiver::from_owned_fd(OwnedFd::from(reader)).ok()?;
        let instance = self.state.next_instance.fetch_add(1, Ordering::Relaxed);
        runtime.spawn(watch(Arc::clone(&self.state), instance, listener, life));
        Some((address, Stdio::from(writer)))
    }

    /// The value for `AWS_LAMBDA_RUNTIME_API`.
    pub fn address(&self) -> String {
        self.addr.to_string()
    }

    /// Starts one instance of `binary` against this endpoint with `env` added: one execution
    /// environment. It is killed when the returned child is dropped.
    pub fn spawn(&self, binary: &Path, env: &[(&str, &str)]) -> io::Result<Child> {
        self.command(binary, env).spawn()
    }

    /// The command [`spawn`](Self::spawn) runs, for callers that want its output. Its
    /// standard input is the instance's lifeline (leave it as it is): the invocation an
    /// instance dies holding is answered with [`EXIT_ERROR_TYPE`] once the process has exited
    /// and the command is dropped.
    pub fn command(&self, binary: &Path, env: &[(&str, &str)]) -> Command {
        let mut command = Command::new(binary);
        let address = match self.instance() {
            Some((address, life)) => {
                command.stdin(life);
                address
            }
            None => self.address(),
        };
        command
            .env("AWS_LAMBDA_RUNTIME_API", address)
            .env("AWS_LAMBDA_FUNCTION_NAME", &self.function_name)
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env(
                "AWS_LAMBDA_LOG_GROUP_NAME",
                format!("/aws/lambda/{}", self.function_name),
            )
            .env("AWS_LAMBDA_LOG_STREAM_NAME", "local")
            .env("AWS_REGION", "us-east-1")
            .kill_on_drop(true);
        for (k, v) in env {
            command.env(k, v);
        }
        command
    }

    /// Invokes the function with `event` and waits for its outcome, at most `timeout`.
    pub async fn invoke(
        &self,
        event: impl Into<Bytes>,
        timeout: Duration,
    ) -> Result<Outcome, InvokeError> {
        let (reply, outcome) = oneshot::channel();
        let deadline_ms = unix_ms() + u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX / 2);
        self.queue
            .send(Invocation {
                event: event.into(),
                deadline_ms,
                reply,
            })
            .await
            .map_err(|_| InvokeError::Closed)?;
        match tokio::time::timeout(timeout, outcome).await {
            Ok(Ok(outcome)) => Ok(outcome),
            Ok(Err(_)) => Err(InvokeError::Closed),
            Err(_) => Err(InvokeError::TimedOut),
        }
    }
}
