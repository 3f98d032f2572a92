//! The real function binaries under the Lambda Runtime API emulator, as on AWS.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use claimonce_local::functions::{self, Function};
use claimonce_local::runtime_api::{Outcome, RuntimeApi};
use serde_json::Value;
use tokio::process::Child;
use tokio::sync::OnceCell;

static BINARIES: OnceCell<PathBuf> = OnceCell::const_new();

/// The directory of the workspace's binaries, built once per test run.
pub async fn binaries() -> &'static Path {
    BINARIES
        .get_or_init(|| async {
            tokio::task::spawn_blocking(|| functions::build(functions::Binaries::Workspace))
                .await
                .expect("build task")
                .expect("cargo build --workspace --bins")
        })
        .await
}

/// The function for a provider.
pub fn function(provider: &str) -> &'static Function {
    functions::by_provider(provider)
        .expect("the provider registry")
        .expect("known provider")
}

/// A function deployed locally: its Runtime API and its running instances.
#[derive(Debug)]
pub struct Deployed {
    /// The endpoint the instances poll.
    pub api: Arc<RuntimeApi>,
    _instances: Vec<Child>,
}

impl Deployed {
    /// Starts `instances` copies of `function`'s binary on `database_url`, with its local
    /// secret.
    pub async fn start(function: &Function, database_url: &str, instances: usize) -> Self {
        let binary = binaries().await.join(function.binary);
        let api = Arc::new(
            RuntimeApi::start(function.binary)
                .await
                .expect("runtime api"),
        );
        let env = [
            ("DATABASE_URL", database_url),
            (function.secret_var, function.dev_secret),
        ];
        // The functions' JSON lines would only clutter the test output.
        let children = (0..instances)
            .map(|_| {
                api.command(&binary, &env)
                    .stdout(Stdio::null())
                    .spawn()
                    .expect("spawn the function binary")
            })
            .collect();
        Self {
            api,
            _instances: children,
        }
    }

    /// Invokes with an API Gateway event; returns the API Gateway response payload.
    pub async fn invoke(&self, event: &Value) -> Value {
        invoke(&self.api, event, Duration::from_secs(20)).await
    }
}

/// The message ids a batch answer reports failed, in order; a test fails on an answer that
/// is not a batch response.
pub fn failed_items(answer: &Value) -> Vec<&str> {
    answer["batchItemFailures"]
        .as_array()
        .unwrap_or_else(|| panic!("a batch response: {answer}"))
        .iter()
        .filter_map(|f| f["itemIdentifier"].as_str())
        .collect()
}

/// Invokes the function behind `api` with `event`, waiting at most `timeout`; returns its
/// payload, parsed. A function error fails the test.
pub async fn invoke(api: &RuntimeApi, event: &Value, timeout: Duration) -> Value {
    match api
        .invoke(event.to_string(), timeout)
        .await
        .expect("the function answers")
    {
        Outcome::Response(payload) => serde_json::from_slice(&payload).expect("JSON payload"),
        Outcome::Error(error) => panic!(
            "the function reported an error: {}",
            String::from_utf8_lossy(&error)
        ),
    }
}

/// Reads a file of `events/`.
pub fn sample_event(relative: &str) -> Value {
    let path = functions::workspace_root().join("events").join(relative);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("event JSON")
}

/// A function's binary (a recover function, the sweep, a receiver given queue records) in one
/// execution environment under the Runtime API emulator: several invocations reach the same
/// process, as a warm Lambda environment's do. Its log lines are kept, for the test to read.
#[derive(Debug)]
pub struct Scheduled {
    api: RuntimeApi,
    log: PathBuf,
    _instance: Child,
}

/// How a scheduled invocation ended: its answer, or the error it reported.
pub type Ran = Result<Value, String>;

impl Scheduled {
    /// Starts `binary` with `env`.
    pub async fn start(binary: &str, env: &[(&str, &str)]) -> Self {
        let api = RuntimeApi::start(binary).await.expect("runtime api");
        let log = std::env::temp_dir().join(format!(
            "claimonce-{binary}-{}-{}.log",
            std::process::id(),
            api.address().rsplit(':').next().unwrap_or("0")
        ));
        let file = std::fs::File::create(&log).expect("a log file");
        let mut command = api.command(&binaries().await.join(binary), env);
        command.stdout(file);
        let instance = command.spawn().expect("spawn the function binary");
        Self {
            api,
            log,
            _instance: instance,
        }
    }

    /// One invocation with `event`, given `timeout` (the invocation's deadline).
    pub async fn run_within(&self, event: &Value, timeout: Duration) -> Ran {
        self.try_run_within(event, timeout)
            .await
            .expect("the function answers")
    }

    /// [`Scheduled::run_within`], or `None` when no instance answered before the deadline
    /// (the process has exited, or hung).
    pub async fn try_run_within(&self, event: &Value, timeout: Duration) -> Option<Ran> {
        match self.api.invoke(event.to_string(), timeout).await.ok()? {
            Outcome::Response(payload) => Some(Ok(serde_json::from_slice(&payload).expect("JSON"))),
            Outcome::Error(error) => Some(Err(String::from_utf8_lossy(&error).into_owned())),
        }
    }

    /// One invocation as the schedule makes it, with a minute to run.
    pub async fn run(&self) -> Ran {
        self.run_within(
            &serde_json::json!({"source": "aws.scheduler"}),
            Duration::from_secs(60),
        )
        .await
    }

    /// The JSON lines the function wrote whose `message` is `message`.
    pub fn lines(&self, message: &str) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|l| l["message"] == message)
            .collect()
    }
}

/// The log file goes with the environment: a run leaves nothing in the temporary folder (a
/// failing test has printed the lines it read).
impl Drop for Scheduled {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.log);
    }
}

/// Lambda's Invoke API (`POST /2015-03-31/functions/{name}/invocations`) in front of function
/// binaries under the Runtime API emulator, for the AWS CLI's `aws lambda invoke
/// --endpoint-url`: the payload goes to the named function as its event, and its answer comes
/// back as Lambda returns it (200, the payload; an error with `X-Amz-Function-Error:
/// Unhandled`). Every answer is kept for the test to read.
#[derive(Debug, Clone)]
pub struct LambdaApi {
    /// `http://127.0.0.1:<port>`, the CLI's `--endpoint-url`.
    pub url: String,
    answers: Arc<std::sync::Mutex<Vec<(String, Ran)>>>,
}

impl LambdaApi {
    /// Serves `functions`, each under its name, every invocation given `timeout`.
    pub async fn start(functions: Vec<(String, RuntimeApi)>, timeout: Duration) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let functions: Arc<std::collections::HashMap<String, RuntimeApi>> =
            Arc::new(functions.into_iter().collect());
        let answers = Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = Arc::clone(&answers);
        tokio::spawn(claimonce_local::http::serve(listener, move |request| {
            let (functions, kept) = (Arc::clone(&functions), Arc::clone(&kept));
            async move {
                let name = request
                    .uri()
                    .path()
                    .strip_prefix("/2015-03-31/functions/")
                    .and_then(|rest| rest.strip_suffix("/invocations"))
                    .unwrap_or_default()
                    .to_owned();
                let event = claimonce_local::http::body(request).await;
                let reply = |status: u16, error: bool, body: bytes::Bytes| {
                    let mut response = hyper::Response::new(http_body_util::Full::new(body));
                    *response.status_mut() = hyper::StatusCode::from_u16(status).expect("status");
                    let headers = response.headers_mut();
                    headers.insert("x-amz-executed-version", "$LATEST".parse().expect("value"));
                    if error {
                        headers.insert("x-amz-function-error", "Unhandled".parse().expect("value"));
                    }
                    response
                };
                let Some(function) = functions.get(&name) else {
                    let body = serde_json::json!({"Type": "User", "Message": format!(
                        "Function not found: {name}")});
                    return reply(404, false, body.to_string().into());
                };
                match function.invoke(event, timeout).await {
                    Ok(Outcome::Response(payload)) => {
                        let answer = serde_json::from_slice(&payload).map_err(|e| e.to_string());
                        kept.lock().expect("answers").push((name, answer));
                        reply(200, false, payload)
                    }
                    Ok(Outcome::Error(error)) => {
                        let text = String::from_utf8_lossy(&error).into_owned();
                        kept.lock().expect("answers").push((name, Err(text)));
                        reply(200, true, error)
                    }
                    Err(e) => reply(500, false, format!("{e:?}").into()),
                }
            }
        }));
        Self { url, answers }
    }

    /// Every invocation answered so far: the function's name and its answer or error.
    pub fn answers(&self) -> Vec<(String, Ran)> {
        self.answers.lock().expect("answers").clone()
    }
}

/// `binary` started under its own Runtime API emulator with `env`, its log discarded: one
/// function for [`LambdaApi`].
pub async fn started(binary: &str, env: &[(&str, &str)]) -> (RuntimeApi, Child) {
    let api = RuntimeApi::start(binary).await.expect("runtime api");
    let mut command = api.command(&binaries().await.join(binary), env);
    command.stdout(Stdio::null());
    let child = command.spawn().expect("spawn the function binary");
    (api, child)
}
