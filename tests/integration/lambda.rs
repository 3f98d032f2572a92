//! The real binaries, not just the libraries: every provider of the registry runs under a
//! Lambda Runtime API and answers its `events/<provider>/` samples (re-signed) as API Gateway
//! expects; the local front serves them over HTTP the way the README's first command does.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use claimonce_local::functions::{self, workspace_root};
use claimonce_local::gateway;
use claimonce_local::runtime_api::RuntimeApi;
use claimonce_local::sign::resign;
use claimonce_tests::TestDb;
use claimonce_tests::apigw::payload_outcome;
use claimonce_tests::lambda::{Deployed, binaries, function, sample_event};
use claimonce_tests::sign::now;
use serde_json::Value;

/// Every sample of `provider` (`events/<provider>/*.json`), relative to `events/`.
fn samples(provider: &str) -> Vec<String> {
    let dir = workspace_root().join("events").join(provider);
    assert!(dir.is_dir(), "{}: no sample folder", dir.display());
    function(provider)
        .samples()
        .iter()
        .filter_map(|path| {
            path.file_name()?
                .to_str()
                .map(|n| format!("{provider}/{n}"))
        })
        .collect()
}

async fn check_samples(provider: &str) -> TestDb {
    let db = TestDb::new().await;
    let deployed = Deployed::start(function(provider), &db.function_url_as(provider), 2).await;
    for sample in &samples(provider) {
        let mut event = sample_event(sample);
        resign(&mut event, now()).expect("sign");
        let first = payload_outcome(&deployed.invoke(&event).await);
        assert!(
            first == (200, "processed".into()) || first == (200, "ignored".into()),
            "{sample}: {first:?}"
        );
        assert_eq!(
            payload_outcome(&deployed.invoke(&event).await),
            (200, "duplicate".into()),
            "{sample}"
        );
        // The same event with one byte of its body changed after signing.
        let body = event["body"]
            .as_str()
            .expect("text body")
            .replacen("\"id\"", "\"id\" ", 1);
        event["body"] = Value::String(body.replacen("\"type\"", "\"type\" ", 1));
        let tampered = deployed.invoke(&event).await;
        assert_eq!(
            payload_outcome(&tampered),
            (400, "signature-mismatch".into()),
            "{sample}"
        );
        // HTTP API responses carry `headers`; REST API ones `multiValueHeaders`.
        let content_type = tampered["headers"]["content-type"]
            .as_str()
            .or(tampered["multiValueHeaders"]["content-type"][0].as_str());
        assert_eq!(
            content_type,
            Some("application/problem+json"),
            "{sample}: {tampered}"
        );
    }
    db
}

#[tokio::test]
async fn the_stripe_binary_answers_the_sample_events() {
    let db = check_samples("stripe").await;
    assert_eq!(
        db.count("SELECT count(*) FROM processed_events WHERE provider = 'stripe'")
            .await,
        4
    );
    assert_eq!(
        db.count("SELECT credit_balance_cents FROM customers").await,
        2500
    );
    assert_eq!(
        db.count("SELECT count(*) FROM subscriptions WHERE status = 'active'")
            .await,
        1
    );
}

#[tokio::test]
async fn the_resend_binary_answers_the_sample_events() {
    let db = check_samples("resend").await;
    assert_eq!(db.count("SELECT count(*) FROM email_events").await, 2);
    assert_eq!(db.count("SELECT count(*) FROM email_suppressions").await, 1);
}

/// The generic cases, for every provider the registry knows (a new provider's crate is picked
/// up with no edit here): each sample is claimed once, its copy is a duplicate, a tampered
/// copy is refused, and the ledger holds one row per sample.
#[tokio::test]
async fn every_registered_provider_answers_its_sample_events() {
    let registry = functions::all().expect("the provider registry");
    // Not a pinned list: the registry is whatever the workspace declares. Every crate under
    // functions/ whose manifest carries the table is in it, and every events/<dir>/ belongs
    // to a registered provider, so a new provider is run here with no edit.
    let root = workspace_root();
    let declaring = std::fs::read_dir(root.join("functions"))
        .expect("functions/")
        .filter_map(|entry| std::fs::read_to_string(entry.ok()?.path().join("Cargo.toml")).ok())
        .filter(|manifest| manifest.contains("[package.metadata.claimonce]"))
        .count();
    assert_eq!(
        registry.len(),
        declaring,
        "every declaring crate is registered"
    );
    assert!(!registry.is_empty());
    // The migrate function carries each of them (by the name its registry entry gives), so
    // CLAIMONCE_PROVIDERS can include it.
    let carried: Vec<&str> = claimonce_migrations::PROVIDERS
        .iter()
        .map(|(p, _)| *p)
        .collect();
    let registered: Vec<&str> = registry.iter().map(|f| f.provider).collect();
    assert_eq!(carried, registered);
    for entry in std::fs::read_dir(root.join("events")).expect("events/") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            assert!(
                registry.iter().any(|f| f.provider == name),
                "events/{name}/ belongs to no registered provider"
            );
        }
    }
    for function in registry {
        let db = check_samples(function.provider).await;
        assert_eq!(
            db.count("SELECT count(*) FROM processed_events").await,
            i64::try_from(samples(function.provider).len()).expect("count"),
            "{}",
            function.provider
        );
    }
}

#[tokio::test]
async fn the_local_front_serves_every_function_like_api_gateway() {
    let db = TestDb::new().await;
    let mut routes = HashMap::new();
    let mut deployed = Vec::new();
    for f in functions::all().expect("the provider registry") {
        let d = Deployed::start(f, &db.function_url_as(f.provider), 1).await;
        // The front needs the endpoint behind an Arc; a second endpoint for the same
        // instances is not possible, so the front gets its own and the instances poll it.
        let api = Arc::new(RuntimeApi::start(f.binary).await.expect("api"));
        let binary = binaries().await.join(f.binary);
        let child = api
            .spawn(
                &binary,
                &[
                    ("DATABASE_URL", &db.function_url_as(f.provider)),
                    (f.secret_var, f.dev_secret),
                ],
            )
            .expect("spawn");
        routes.insert(f.path(), gateway::Route::Function(api));
        deployed.push((d, child));
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let authority = listener.local_addr().expect("addr").to_string();
    tokio::spawn(gateway::serve(listener, routes));

    for sample in [
        "stripe/invoice.paid.json",
        "resend/email.delivered.json",
        "github/installation.created.json",
    ] {
        let mut event = sample_event(sample);
        resign(&mut event, now()).expect("sign");
        let sent = gateway::send(&authority, &event).await.expect("send");
        assert_eq!(
            (sent.status().as_u16(), &sent.body()[..]),
            (200, &br#"{"disposition":"processed"}"#[..]),
            "{sample}"
        );
        let sent = gateway::send(&authority, &event).await.expect("send");
        assert_eq!(
            (sent.status().as_u16(), &sent.body()[..]),
            (200, &br#"{"disposition":"duplicate"}"#[..]),
            "{sample}"
        );
    }
    let mut unknown = sample_event("stripe/invoice.paid.json");
    resign(&mut unknown, now()).expect("sign");
    unknown["rawPath"] = Value::String("/webhooks/nobody".into());
    let sent = gateway::send(&authority, &unknown).await.expect("send");
    assert_eq!(sent.status().as_u16(), 404);
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 3);
}

/// Starts `binary` under a Runtime API with `env` (minus `removed`) and returns everything
/// it printed before it stopped; a binary that does not stop at start fails the test.
async fn start_error(binary: &str, env: &[(&str, &str)], removed: &[&str]) -> String {
    let api = RuntimeApi::start(binary).await.expect("api");
    let mut command = api.command(&binaries().await.join(binary), env);
    for name in removed {
        command.env_remove(name);
    }
    command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let output = tokio::time::timeout(Duration::from_secs(20), command.output())
        .await
        .expect("exits promptly")
        .expect("runs");
    assert!(!output.status.success(), "{binary} started");
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

const UNREACHABLE_DATABASE: (&str, &str) = (
    "DATABASE_URL",
    "postgres://u:hunter2@127.0.0.1:1/db?sslmode=disable",
);

/// Every provider's binary reads its secret from the variable its registry entry names (its
/// `main.rs` names none: it hands over its manifest).
#[tokio::test]
async fn a_binary_without_its_secret_stops_at_start_naming_the_variable() {
    for f in functions::all().expect("the provider registry") {
        let all = start_error(f.binary, &[UNREACHABLE_DATABASE], &[f.secret_var]).await;
        assert!(
            all.contains(&format!("{} must be set", f.secret_var)),
            "{all}"
        );
        assert!(!all.contains("hunter2"), "{all}");
    }
}

/// An environment may hold at most one connection per invocation it serves at once: more is a
/// startup error naming the variable, as is a concurrency that is not a number.
#[tokio::test]
async fn more_connections_than_invocations_at_once_stop_the_binary_at_start() {
    let f = function("stripe");
    for (concurrency, connections, named) in [
        ("4", "5", "DB_MAX_CONNECTIONS"),
        ("4", "0", "DB_MAX_CONNECTIONS"),
        ("eight", "1", "AWS_LAMBDA_MAX_CONCURRENCY"),
    ] {
        let all = start_error(
            f.binary,
            &[
                UNREACHABLE_DATABASE,
                (f.secret_var, f.dev_secret),
                ("AWS_LAMBDA_MAX_CONCURRENCY", concurrency),
                ("DB_MAX_CONNECTIONS", connections),
            ],
            &[],
        )
        .await;
        assert!(all.contains(&format!("{named} must be")), "{all}");
    }
}

#[tokio::test]
async fn windows_that_disagree_stop_the_binaries_at_start_naming_the_variable() {
    // Stripe keeps events for 30 days and an operator may resend any of them: a ledger that
    // forgets sooner would apply the resend again.
    let all = start_error(
        "retention-sweep",
        &[UNREACHABLE_DATABASE, ("RETENTION_DAYS", "30")],
        &[],
    )
    .await;
    assert!(all.contains("RETENTION_DAYS must be"), "{all}");
    // A signature accepted for a day could be replayed for a day: the tolerance stays far
    // below the retention window.
    for f in ["stripe", "resend"].map(function) {
        let all = start_error(
            f.binary,
            &[
                UNREACHABLE_DATABASE,
                (f.secret_var, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
                ("WEBHOOK_TOLERANCE_SECONDS", "86400"),
            ],
            &[],
        )
        .await;
        assert!(all.contains("WEBHOOK_TOLERANCE_SECONDS must be"), "{all}");
        assert!(!all.contains("hunter2"), "{all}");
    }
}

/// The README's first command, ended as a closed terminal ends it (SIGHUP to its process
/// group): the PostgreSQL it started stops too.
/// Before the watchdog held a pipe, the watchdog was in that group, died of the SIGHUP, and
/// the server (which reads SIGHUP as "reload") ran on with parent 1; the next start then
/// waited on its postmaster.pid and failed.
#[tokio::test]
async fn the_local_run_stops_its_database_however_it_ends() {
    use std::os::unix::process::CommandExt as _;
    let dir = std::env::temp_dir().join(format!("claimonce-local-run-{}", std::process::id()));
    let data = dir.join("postgres/data");
    let bins = binaries().await;
    let binary = bins.join("claimonce-local");
    let mut command = std::process::Command::new(&binary);
    command
        .args(["run", "--port", "0", "--instances", "1"])
        .env("CLAIMONCE_LOCAL_DIR", &dir)
        // The suite's own build: the run rebuilds nothing another test is running.
        .env("CLAIMONCE_LOCAL_BINARIES", bins)
        .env_remove("DATABASE_URL")
        // Its own process group, as a terminal's foreground job has.
        .process_group(0)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut run = tokio::process::Command::from(command)
        .kill_on_drop(true)
        .spawn()
        .expect("spawn claimonce-local");
    // Up once its PostgreSQL answers: read from the folder, not from the run's output.
    let is_up = |port: &str| {
        std::process::Command::new(claimonce_local::postgres::tool("pg_isready"))
            .args(["-q", "-h", "127.0.0.1", "-p", port])
            .status()
            .is_ok_and(|s| s.success())
    };
    let port = tokio::time::timeout(Duration::from_secs(300), async {
        loop {
            if let Ok(pid_file) = std::fs::read_to_string(data.join("postmaster.pid"))
                && let Some(port) = pid_file.lines().nth(3).map(str::trim)
                && is_up(port)
            {
                return port.to_owned();
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("the local run's PostgreSQL came up");
    let group = run.id().expect("pid");
    assert!(group > 1, "a process group of its own");
    // `--` before the negative id: without it, kill reads "-<n>" as an option.
    let hung_up = std::process::Command::new("kill")
        .args(["-s", "HUP", "--", &format!("-{group}")])
        .status()
        .expect("kill");
    assert!(hung_up.success());
    tokio::time::timeout(Duration::from_secs(60), run.wait())
        .await
        .expect("the local run ends on the hang-up")
        .expect("reaped");
    // The watchdog stops the server once the run is gone; bounded, not timed.
    let stopped = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            if !is_up(&port) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    assert!(stopped.is_ok(), "its PostgreSQL still runs on {port}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Run as root from a folder the server's user cannot reach (a clone under `/root`, mode
/// 0700), the local run stops at once with what to do, instead of an initdb failure.
#[tokio::test]
async fn the_local_run_says_what_to_do_when_its_server_cannot_reach_its_folder() {
    use std::os::unix::fs::PermissionsExt as _;
    let closed = std::env::temp_dir().join(format!("claimonce-closed-{}", std::process::id()));
    std::fs::create_dir_all(&closed).expect("folder");
    std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).expect("0700");
    let binary = binaries().await.join("claimonce-local");
    let root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    let mut command = tokio::process::Command::new(&binary);
    command
        .args(["run", "--port", "0", "--instances", "1"])
        .env("CLAIMONCE_LOCAL_DIR", closed.join("dev"))
        .env("CLAIMONCE_LOCAL_BINARIES", binaries().await)
        .env_remove("DATABASE_URL")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    if root {
        let output = tokio::time::timeout(Duration::from_secs(120), command.output())
            .await
            .expect("it stops at once")
            .expect("run");
        let said = String::from_utf8_lossy(&output.stderr).into_owned()
            + &String::from_utf8_lossy(&output.stdout);
        assert!(!output.status.success(), "{said}");
        assert!(
            said.contains("cannot reach") && said.contains("CLAIMONCE_LOCAL_DIR"),
            "{said}"
        );
    } else {
        // Not root: the server runs as this user, who owns the folder, so it serves.
        let mut run = command
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn");
        use tokio::io::AsyncBufReadExt as _;
        let mut lines = tokio::io::BufReader::new(run.stdout.take().expect("stdout")).lines();
        let ready = tokio::time::timeout(Duration::from_secs(300), async {
            while let Some(line) = lines.next_line().await.expect("read") {
                if line.starts_with("Ctrl-C stops") {
                    return true;
                }
            }
            false
        })
        .await
        .unwrap_or(false);
        assert!(ready, "the local run serves from a folder of its own user");
    }
    let _ = std::fs::remove_dir_all(&closed);
}

/// A provider crate kept in another project (`examples/paddle/`, its own workspace, with a
/// signature scheme of its own) runs under the local run as this repository's do:
/// `CLAIMONCE_PROJECT` names the project, whose registry, binaries (built by the run) and
/// migrations (after the shared ones) are used, and its sample, signed by `send` through the
/// crate's own signer binary and sent twice, is processed and then a duplicate.
#[tokio::test]
async fn the_local_run_serves_a_provider_crate_of_another_project() {
    use tokio::io::AsyncBufReadExt as _;
    let project = workspace_root().join("examples/paddle");
    let dir = std::env::temp_dir().join(format!("claimonce-paddle-{}", std::process::id()));
    let local = binaries().await.join("claimonce-local");
    // Its build goes to this workspace's target directory, reusing what the suite built.
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace_root().join("target"), std::path::PathBuf::from);
    let mut run = tokio::process::Command::new(&local)
        .args(["run", "--port", "0", "--instances", "1", "--json"])
        .env("CLAIMONCE_PROJECT", &project)
        .env("CLAIMONCE_LOCAL_DIR", &dir)
        .env("CARGO_TARGET_DIR", &target)
        .env_remove("DATABASE_URL")
        .env_remove("CLAIMONCE_LOCAL_BINARIES")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn claimonce-local");
    let mut lines = tokio::io::BufReader::new(run.stdout.take().expect("stdout")).lines();
    let mut said = Vec::new();
    let base = tokio::time::timeout(Duration::from_secs(600), async {
        while let Some(line) = lines.next_line().await.expect("read") {
            said.push(line.clone());
            if let Some(base) = line.strip_prefix("claimonce is running locally at ") {
                return Some(base.to_owned());
            }
        }
        None
    })
    .await
    .expect("the local run came up")
    .unwrap_or_else(|| panic!("the local run ended: {said:?}"));
    // Keep reading, so the functions' log lines never fill the pipe.
    let rest = tokio::spawn(async move {
        let mut rest = Vec::new();
        while let Ok(Some(line)) = lines.next_line().await {
            rest.push(line);
        }
        rest
    });
    let sample = project.join("events/paddle/transaction.completed.json");
    let send = || async {
        let output = tokio::process::Command::new(&local)
            .arg("send")
            .arg(&sample)
            .args(["--url", &base])
            .env("CLAIMONCE_PROJECT", &project)
            // Where the run built the project's binaries, its signer among them.
            .env("CARGO_TARGET_DIR", &target)
            .env_remove("CLAIMONCE_LOCAL_BINARIES")
            .output()
            .await
            .expect("send");
        String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr)
    };
    let first = send().await;
    assert!(first.contains(r#"{"disposition":"processed"}"#), "{first}");
    let second = send().await;
    assert!(
        second.contains(r#"{"disposition":"duplicate"}"#),
        "{second}"
    );
    drop(run);
    let rest = rest.await.expect("the reader");
    // The shared migrations and the project's own (10000) were applied, and no provider of
    // this repository was served.
    let startup = said
        .iter()
        .chain(&rest)
        .cloned()
        .collect::<Vec<_>>()
        .join("\n");
    assert!(startup.contains(", 10000]"), "{startup}");
    assert!(startup.contains("/webhooks/paddle"), "{startup}");
    assert!(!startup.contains("/webhooks/stripe"), "{startup}");
    assert!(
        rest.iter()
            .any(|l| l.contains(r#""event_id":"evt_01jdx4qh1w6y2c5e9k3m7p8r0s""#)),
        "{rest:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_license_file_is_the_license_the_crates_declare() {
    let root = workspace_root();
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    assert!(
        manifest
            .lines()
            .any(|l| l.trim() == r#"license = "Apache-2.0""#),
        "the workspace declares Apache-2.0"
    );
    let text = std::fs::read_to_string(root.join("LICENSE")).expect("a LICENSE file");
    for part in [
        "Apache License",
        "Version 2.0, January 2004",
        "END OF TERMS AND CONDITIONS",
    ] {
        assert!(
            text.contains(part),
            "LICENSE is the Apache License 2.0: {part}"
        );
    }
}

/// A `claimonce-local run` of the workspace's binaries on a private database under `dir`,
/// with `extra` arguments: the process, the base URL it serves, and the lines it prints next.
struct LocalRun {
    run: tokio::process::Child,
    base: String,
    said: tokio::sync::mpsc::UnboundedReceiver<String>,
    /// Every line read so far, in order.
    seen: Vec<String>,
    local: std::path::PathBuf,
    dir: std::path::PathBuf,
}

impl LocalRun {
    async fn start(name: &str, extra: &[&str]) -> Self {
        Self::start_with(name, extra, &[]).await
    }

    /// [`LocalRun::start`] with `env` in the run's environment.
    async fn start_with(name: &str, extra: &[&str], env: &[(&str, &str)]) -> Self {
        use tokio::io::AsyncBufReadExt as _;
        let dir =
            std::env::temp_dir().join(format!("claimonce-local-{name}-{}", std::process::id()));
        let bins = binaries().await;
        let local = bins.join("claimonce-local");
        let mut run = tokio::process::Command::new(&local)
            .args(["run", "--port", "0", "--instances", "1", "--json"])
            .args(extra)
            .env("CLAIMONCE_LOCAL_DIR", &dir)
            .env("CLAIMONCE_LOCAL_BINARIES", bins)
            .envs(env.iter().copied())
            .env_remove("DATABASE_URL")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn claimonce-local");
        let (tx, said) = tokio::sync::mpsc::unbounded_channel::<String>();
        let mut lines = tokio::io::BufReader::new(run.stdout.take().expect("stdout")).lines();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut started = Self {
            run,
            base: String::new(),
            said,
            seen: Vec::new(),
            local,
            dir,
        };
        started.base = started
            .until(|l| l.starts_with("claimonce is running locally at "))
            .await
            .trim_start_matches("claimonce is running locally at ")
            .to_owned();
        started.until(|l| l.starts_with("Ctrl-C stops")).await;
        started
    }

    /// The next line the run prints that `wanted` accepts, within a bound.
    async fn until(&mut self, wanted: impl Fn(&str) -> bool) -> String {
        tokio::time::timeout(Duration::from_secs(300), async {
            while let Some(line) = self.said.recv().await {
                self.seen.push(line.clone());
                if wanted(&line) {
                    return line;
                }
            }
            panic!("the local run ended");
        })
        .await
        .expect("the line within the bound")
    }

    /// `claimonce-local send <sample> --url <base>`: what it printed.
    async fn send(&self, sample: &std::path::Path) -> String {
        self.send_with(sample, &[]).await.1
    }

    /// The same with `extra` arguments: whether it exited 0, and what it printed.
    async fn send_with(&self, sample: &std::path::Path, extra: &[&str]) -> (bool, String) {
        let output = tokio::process::Command::new(&self.local)
            .arg("send")
            .arg(sample)
            .args(["--url", &self.base])
            .args(extra)
            .output()
            .await
            .expect("send");
        let said = String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr);
        (output.status.success(), said)
    }

    async fn stop(mut self) {
        let _ = self.run.start_kill();
        let _ = self.run.wait().await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `send --tamper` changes the body after signing, so the answer is 400 `signature-mismatch`,
/// and `send` exits 1 on it as on any 4xx or 5xx; `--as-is` of a committed sample is stale;
/// the file is left as it was, and the sample then sent as it should be is processed (exit 0).
#[tokio::test]
async fn send_exits_1_on_a_refused_delivery_and_tampers_without_touching_the_file() {
    let run = LocalRun::start("refused", &[]).await;
    let sample = workspace_root().join("events/stripe/customer.subscription.updated.json");
    let before = std::fs::read(&sample).expect("the sample");
    let (ok, tampered) = run.send_with(&sample, &["--tamper"]).await;
    assert!(!ok, "{tampered}");
    assert!(tampered.contains("-> 400"), "{tampered}");
    assert!(tampered.contains("signature-mismatch"), "{tampered}");
    let (ok, stale) = run.send_with(&sample, &["--as-is"]).await;
    assert!(!ok && stale.contains("stale-timestamp"), "{stale}");
    assert_eq!(std::fs::read(&sample).expect("the sample"), before);
    let (ok, sent) = run.send_with(&sample, &[]).await;
    assert!(ok, "{sent}");
    assert!(sent.contains(r#"{"disposition":"processed"}"#), "{sent}");
    run.stop().await;
}

/// The local run shows the spill queue (`--spill`): SIGUSR1 takes its database down for the
/// functions and a sample sent then is answered `queued`; SIGUSR1 again brings it back, the
/// run's drain (moto's SQS, as Lambda's event source mapping would) applies it, and the same
/// sample sent again is a duplicate. An EventBridge sample sent meanwhile is reported failed.
#[tokio::test]
async fn the_local_run_queues_deliveries_while_its_database_is_down_and_applies_them_after() {
    let mut run = LocalRun::start("spill", &["--spill"]).await;
    let pid = run.run.id().expect("pid").to_string();
    let signal = |pid: &str| {
        let sent = std::process::Command::new("kill")
            .args(["-s", "USR1", pid])
            .status()
            .expect("kill");
        assert!(sent.success());
    };
    let sample = workspace_root().join("events/stripe/invoice.paid.json");
    signal(&pid);
    run.until(|l| l.contains("the database is down for the functions"))
        .await;
    let queued = run.send(&sample).await;
    assert!(queued.contains(r#"{"disposition":"queued"}"#), "{queued}");
    // An EventBridge event meanwhile is reported failed, left on its queue to come back, and
    // `send` shows the error its `bridged` line names.
    let bridged = workspace_root().join("events/stripe/eventbridge/invoice.paid.json");
    let failed = run.send(&bridged).await;
    assert!(
        failed.contains(r#"{"batchItemFailures":[{"itemIdentifier":"#),
        "{failed}"
    );
    assert!(
        failed.contains("disposition: error (the function's bridged line)"),
        "{failed}"
    );
    signal(&pid);
    run.until(|l| l.contains("the database is back")).await;
    // A drain that ran during the outage may still be reporting its failure (`connect
    // failed`, at ERROR: the message comes back); the queued delivery is then applied.
    let drained = run
        .until(|l| l.contains(r#""message":"drained""#) && !l.contains(r#""disposition":"error""#))
        .await;
    assert!(
        drained.contains(r#""disposition":"processed""#),
        "{drained}"
    );
    let again = run.send(&sample).await;
    assert!(again.contains(r#"{"disposition":"duplicate"}"#), "{again}");
    run.stop().await;
}

/// `AWS_LAMBDA_MAX_CONCURRENCY` in the local run's environment runs every function in Lambda
/// Managed Instances' mode, as Lambda sets it there: the run says so, each function says it
/// serves that many invocations at once on as many connections, and a sample is processed,
/// then a duplicate.
#[tokio::test]
async fn the_local_run_serves_invocations_at_once_when_asked() {
    let mut run =
        LocalRun::start_with("at-once", &[], &[("AWS_LAMBDA_MAX_CONCURRENCY", "4")]).await;
    // The run's own line and the functions', in whichever order they come.
    let serving = r#""message":"serving invocations at once""#;
    if !run.seen.iter().any(|l| l.contains(serving)) {
        run.until(|l| l.contains(serving)).await;
    }
    let find = |what: &str| run.seen.iter().find(|l| l.contains(what)).cloned();
    let banner = find("invocations at once in each instance").unwrap_or_default();
    assert!(banner.contains("concurrency: 4"), "{banner}");
    let serving = find(serving).unwrap_or_default();
    assert!(serving.contains(r#""invocations":4"#), "{serving}");
    assert!(serving.contains(r#""connections":4"#), "{serving}");
    let sample = workspace_root().join("events/stripe/invoice.paid.json");
    assert!(
        run.send(&sample)
            .await
            .contains(r#"{"disposition":"processed"}"#)
    );
    assert!(
        run.send(&sample)
            .await
            .contains(r#"{"disposition":"duplicate"}"#)
    );
    run.stop().await;
}

/// The local run takes each EventBridge sample (`events/<provider>/eventbridge/`) on its
/// function's EventBridge route: `send` of the Stripe and the Shopify one is applied (the
/// batch response fails nothing, the `bridged` line says processed, and `send` shows it), and
/// a second send is a duplicate.
#[tokio::test]
async fn the_local_run_sends_an_eventbridge_sample_to_its_function() {
    let mut run = LocalRun::start("eventbridge", &[]).await;
    for sample in [
        "events/stripe/eventbridge/invoice.paid.json",
        "events/shopify/eventbridge/orders.updated.json",
    ] {
        let sample = workspace_root().join(sample);
        for disposition in ["processed", "duplicate"] {
            let sent = run.send(&sample).await;
            assert!(sent.contains("/eventbridge/"), "{sent}");
            assert!(sent.contains(r#"{"batchItemFailures":[]}"#), "{sent}");
            // What the batch response cannot say, `send` reads from the function's line.
            assert!(
                sent.contains(&format!(
                    "disposition: {disposition} (the function's bridged line)"
                )),
                "{sent}"
            );
            let line = run.until(|l| l.contains(r#""message":"bridged""#)).await;
            assert!(
                line.contains(&format!(r#""disposition":"{disposition}""#)),
                "{line}"
            );
        }
    }
    run.stop().await;
}
