//! A Lambda Runtime API emulator: the HTTP interface a function binary polls for invocations
//! (`AWS_LAMBDA_RUNTIME_API`), so that the real `bootstrap` binaries run locally and in tests
//! exactly as they run on Lambda, several instances per function like several execution
//! environments.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use tokio::net::TcpListener;
use tokio::process::{Child, Command};
use tokio::sync::{Mutex, mpsc, oneshot};

use crate::http::Reply;

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

struct State {
    function_name: String,
    pending: Mutex<mpsc::Receiver<Invocation>>,
    in_flight: std::sync::Mutex<HashMap<String, oneshot::Sender<Outcome>>>,
    next_id: AtomicU64,
}

/// One function's Runtime API endpoint.
#[derive(Debug)]
pub struct RuntimeApi {
    addr: SocketAddr,
    function_name: String,
    queue: mpsc::Sender<Invocation>,
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

async fn route(state: Arc<State>, request: Request<Incoming>) -> Reply {
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
        if let Ok(mut in_flight) = state.in_flight.lock() {
            in_flight.insert(id.clone(), invocation.reply);
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
            let waiter = state.in_flight.lock().ok().and_then(|mut m| m.remove(&id));
            let Some(waiter) = waiter else {
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

impl RuntimeApi {
    /// Starts an endpoint for `function_name` on a free loopback port.
    pub async fn start(function_name: &str) -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (queue, pending) = mpsc::channel(1024);
        let state = Arc::new(State {
            function_name: function_name.to_owned(),
            pending: Mutex::new(pending),
            in_flight: std::sync::Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
        });
        tokio::spawn(crate::http::serve(listener, move |r| {
            route(Arc::clone(&state), r)
        }));
        Ok(Self {
            addr,
            function_name: function_name.to_owned(),
            queue,
        })
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

    /// The command [`spawn`](Self::spawn) runs, for callers that want its output.
    pub fn command(&self, binary: &Path, env: &[(&str, &str)]) -> Command {
        let mut command = Command::new(binary);
        command
            .env("AWS_LAMBDA_RUNTIME_API", self.address())
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
