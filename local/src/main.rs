//! `claimonce-local`: run every provider function locally, exactly as on AWS (the real
//! binaries under a Lambda Runtime API, behind an API Gateway front), and sign or send the
//! sample events.
//!
//! ```text
//! claimonce-local [run] [--port 9000] [--instances 2] [--json] [--spill]
//! claimonce-local sign <event.json>...
//! claimonce-local send <event.json> [--url http://127.0.0.1:9000] [--as-is | --tamper]
//! claimonce-local template [--check | --list]
//! claimonce-local new <sender> [DIR] [--scheme SCHEME] [--claimonce-path PATH]
//! ```

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use claimonce::db::{Settings, Timeouts};
use claimonce_local::postgres::{Options, Postgres};
use claimonce_local::runtime_api::RuntimeApi;
use claimonce_local::{functions, gateway, sign};
use serde_json::Value;

const USAGE: &str = "usage:
  claimonce-local [run] [--port 9000] [--instances 2] [--json] [--spill]
                                                        run every function locally: --port is the
                                                        front's port (0: any free one); --instances
                                                        how many copies of each function poll its
                                                        Runtime API (two, so concurrent deliveries
                                                        race as on Lambda); --json prints the
                                                        functions' JSON log lines as they are (the
                                                        default when stdout is not a terminal);
                                                        --spill gives each function a spill queue in
                                                        moto's SQS (installed by scripts/test-tools)
                                                        and drains it, and SIGUSR1 takes the
                                                        database down for the functions and back
  claimonce-local sign <event.json>...                  re-sign sample events in place
  claimonce-local send <event.json> [--url URL] [--as-is | --tamper]
                                                        re-sign and POST an event (default URL
                                                        http://127.0.0.1:9000, the front's base,
                                                        no path); --as-is sends it as the file
                                                        holds it, signature and all, so a changed
                                                        or stale one shows its 400; --tamper signs
                                                        it, then changes its body (a space at the
                                                        end), so the answer is 400
                                                        signature-mismatch; the file is left as it
                                                        is. Exits 1 when the answer is a 4xx or 5xx
  claimonce-local template [--check | --list]           render the project's template.yaml and
                                                        quickstart.yaml from its registry and
                                                        claimonce's deploy/ (this repository:
                                                        also events/sam-env.json, the fuzz list
                                                        and the docs' tables); --check only
                                                        compares;
                                                        --list prints a line per provider:
                                                        provider, Name, binary, deployed
  claimonce-local new <sender> [DIR] [--scheme SCHEME] [--claimonce-path PATH]
                                                        write a provider crate for <sender> into DIR
                                                        (default ./<sender>): its registry entry,
                                                        a Provider on SCHEME, one SQL and one Rust
                                                        effect, a migration, signed samples, a test
                                                        on the test kit and the binaries its
                                                        template runs. SCHEME (default
                                                        standard-webhooks):
                                                          standard-webhooks  webhook-id, -timestamp,
                                                            -signature; whsec_ secrets (Svix)
                                                          timestamp-v1  t=<unix>,v1=<hex> (Stripe's)
                                                          body-hmac-sha256  sha256=<hex> of the
                                                            body alone (GitHub's)
                                                          own  a stub in src/scheme.rs to make the
                                                            sender's own, with its signer binary
                                                        The claimonce crates are path dependencies
                                                        (with their version) on PATH, default the
                                                        checkout this program was built from, and
                                                        its Cargo.lock the crate's first; once
                                                        they are published, the version alone is
                                                        the dependency
  claimonce-local --help                                this text

environment:
  DATABASE_URL              use this PostgreSQL instead of a private one
  CLAIMONCE_LOCAL_DIR       where the private PostgreSQL keeps its data (default
                            target/claimonce-dev; delete it to start clean)
  CLAIMONCE_PROJECT         serve another project's provider crates (its registry, binaries,
                            migrations and target/claimonce-dev)
  <PROVIDER>_WEBHOOK_SECRET a secret accepted beside the local one (the whsec_ that
                            `stripe listen` prints, for example)
  PG_BIN                    the folder of initdb and postgres, when not found on its own";

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// What the command line asks for.
#[derive(Debug, PartialEq, Eq)]
enum Command {
    Run {
        port: u16,
        instances: usize,
        json: bool,
        spill: bool,
    },
    Sign {
        files: Vec<String>,
    },
    Send {
        file: String,
        url: String,
        as_is: bool,
        tamper: bool,
    },
    Template {
        check: bool,
        list: bool,
    },
    New(claimonce_local::scaffold::New),
    Help,
}

/// Reads the command line (the arguments after the program's name); a usage error names what
/// was wrong.
fn command(args: impl IntoIterator<Item = String>) -> Result<Command, String> {
    use lexopt::prelude::*;
    let lex = |e: lexopt::Error| e.to_string();
    let mut parser = lexopt::Parser::from_args(args);
    let mut subcommand: Option<String> = None;
    let (mut port, mut instances, mut url, mut json) = (9000_u16, 2_usize, None::<String>, false);
    let (mut spill, mut as_is, mut check, mut list) = (false, false, false, false);
    let mut tamper = false;
    let mut files = Vec::new();
    let (mut scheme, mut claimonce_path) = (None::<String>, None::<String>);
    while let Some(arg) = parser.next().map_err(lex)? {
        match arg {
            Short('h') | Long("help") => return Ok(Command::Help),
            Long("port") => port = parser.value().map_err(lex)?.parse().map_err(lex)?,
            Long("instances") => instances = parser.value().map_err(lex)?.parse().map_err(lex)?,
            Long("url") => url = Some(parser.value().map_err(lex)?.string().map_err(lex)?),
            Long("json") => json = true,
            Long("spill") => spill = true,
            Long("as-is") => as_is = true,
            Long("tamper") => tamper = true,
            Long("check") => check = true,
            Long("list") => list = true,
            Long("scheme") => scheme = Some(parser.value().map_err(lex)?.string().map_err(lex)?),
            Long("claimonce-path") => {
                claimonce_path = Some(parser.value().map_err(lex)?.string().map_err(lex)?);
            }
            Value(value) => {
                let value = value.string().map_err(lex)?;
                if subcommand.is_none() {
                    if !matches!(
                        value.as_str(),
                        "run" | "sign" | "send" | "template" | "new" | "help"
                    ) {
                        return Err(format!("unknown command {value:?}"));
                    }
                    subcommand = Some(value);
                } else {
                    files.push(value);
                }
            }
            other => return Err(lex(other.unexpected())),
        }
    }
    let subcommand = subcommand.unwrap_or_else(|| "run".to_owned());
    let misplaced = |flag: &str| Err(format!("{flag} does not apply to {subcommand}"));
    if check && subcommand != "template" {
        return misplaced("--check");
    }
    if list && subcommand != "template" {
        return misplaced("--list");
    }
    if tamper && (subcommand != "send" || as_is) {
        return misplaced("--tamper");
    }
    if subcommand != "new" && (scheme.is_some() || claimonce_path.is_some()) {
        return misplaced("--scheme or --claimonce-path");
    }
    match subcommand.as_str() {
        "help" => Ok(Command::Help),
        "new" if url.is_some() || json || spill || as_is || check || list => {
            Err("new takes --scheme and --claimonce-path".into())
        }
        "new" => new_command(files, scheme, claimonce_path),
        "template" if !files.is_empty() => Err("template takes no file".into()),
        "template" if url.is_some() || json || spill || as_is || (check && list) => {
            Err("template takes --check or --list".into())
        }
        "template" => Ok(Command::Template { check, list }),
        "run" if !files.is_empty() => Err("run takes no file".into()),
        "run" if url.is_some() => misplaced("--url"),
        "run" | "sign" if as_is => misplaced("--as-is"),
        "run" => Ok(Command::Run {
            port,
            instances,
            json,
            spill,
        }),
        "sign" if files.is_empty() => Err("sign needs at least one event file".into()),
        "sign" | "send" if json => misplaced("--json"),
        "sign" | "send" if spill => misplaced("--spill"),
        "sign" if url.is_some() => misplaced("--url"),
        "sign" => Ok(Command::Sign { files }),
        _ => match <[String; 1]>::try_from(files) {
            Ok([file]) => Ok(Command::Send {
                file,
                url: url.unwrap_or_else(|| "http://127.0.0.1:9000".to_owned()),
                as_is,
                tamper,
            }),
            Err(_) => Err("send needs exactly one event file".into()),
        },
    }
}

/// `new <sender> [DIR]`'s command: DIR defaults to `./<sender>`, the scheme to Standard
/// Webhooks, the claimonce checkout to the one this program was built from.
fn new_command(
    files: Vec<String>,
    scheme: Option<String>,
    claimonce_path: Option<String>,
) -> Result<Command, String> {
    let (provider, dir) = match <[String; 1]>::try_from(files) {
        Ok([provider]) => (provider.clone(), provider),
        Err(files) => match <[String; 2]>::try_from(files) {
            Ok([provider, dir]) => (provider, dir),
            Err(_) => return Err("new takes a sender's name and at most one folder".into()),
        },
    };
    Ok(Command::New(claimonce_local::scaffold::New {
        provider,
        dir: dir.into(),
        scheme: scheme.unwrap_or_else(|| "standard-webhooks".to_owned()),
        claimonce: claimonce_path
            .map_or_else(claimonce_local::template::claimonce_root, Into::into),
    }))
}

/// Renders the project's template (and this repository's derived files), or with `check`
/// fails naming those that are not what it renders, or with `list` prints its providers.
fn template(check: bool, list: bool) -> Result<(), String> {
    use claimonce_local::template;
    let project = template::project_from_env()?;
    if list {
        print!("{}", template::list(&project)?);
        return Ok(());
    }
    let outputs = template::render(&project, &template::claimonce_root())?;
    let stale = template::write_or_check(&project, &outputs, check)?;
    let all: Vec<String> = outputs
        .iter()
        .map(|(path, _)| {
            path.strip_prefix(&project)
                .unwrap_or(path)
                .display()
                .to_string()
        })
        .collect();
    match (check, stale.is_empty()) {
        (true, false) => Err(format!(
            "{}: not what deploy/ renders for the registry of {}: run claimonce-local template \
             there (scripts/template renders this repository's and its examples')",
            stale.join(", "),
            project.display()
        )),
        (_, true) => {
            println!("current in {}: {}", project.display(), all.join(", "));
            Ok(())
        }
        (false, false) => {
            println!("wrote in {}: {}", project.display(), stale.join(", "));
            Ok(())
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let result = match command(std::env::args().skip(1)) {
        Ok(Command::Help) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("claimonce-local: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
        Ok(Command::Run {
            port,
            instances,
            json,
            spill,
        }) => run(port, instances, json, spill).await,
        Ok(Command::Sign { files }) => sign_files(&files),
        Ok(Command::Send {
            file,
            url,
            as_is,
            tamper,
        }) => send(&file, &url, as_is, tamper).await,
        Ok(Command::Template { check, list }) => template(check, list),
        Ok(Command::New(new)) => claimonce_local::scaffold::write(&new).map(|written| {
            print!("{}", claimonce_local::scaffold::report(&new, &written));
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("claimonce-local: {e}");
            ExitCode::FAILURE
        }
    }
}

fn read_event(path: &str) -> Result<Value, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    serde_json::from_str(&text).map_err(|e| format!("{path}: not JSON: {e}"))
}

fn sign_files(files: &[String]) -> Result<(), String> {
    for path in files {
        let mut event = read_event(path)?;
        let function = sign::resign(&mut event, now()).map_err(|e| format!("{path}: {e}"))?;
        let mut text = serde_json::to_string_pretty(&event).map_err(|e| e.to_string())?;
        text.push('\n');
        std::fs::write(path, text).map_err(|e| format!("{path}: {e}"))?;
        println!(
            "signed {path} for {} with the local secret",
            function.binary
        );
    }
    Ok(())
}

async fn send(path: &str, url: &str, as_is: bool, tamper: bool) -> Result<(), String> {
    let authority = front_authority(url)?;
    let mut event = read_event(path)?;
    if as_is {
        // Exactly as the file holds it: a body changed after signing, or a signature past its
        // tolerance, is refused as a sender's would be.
    } else if claimonce_local::bridge::is_eventbridge(&event) {
        // Not signed: an EventBridge event carries no signature. Sent to the route of the
        // function that takes its source, as a rule would put it on that function's queue.
        let registry = functions::all()?;
        event = claimonce_local::bridge::request(registry, &event)?;
    } else {
        sign::resign(&mut event, now()).map_err(|e| format!("{path}: {e}"))?;
        if tamper {
            sign::tamper(&mut event).map_err(|e| format!("{path}: {e}"))?;
        }
    }
    let response = gateway::send(authority, &event).await?;
    let route = sign::event_path(&event).unwrap_or("/");
    println!("POST {url}{route} -> {}", response.status());
    println!("{}", String::from_utf8_lossy(response.body()));
    // An EventBridge route answers the function's batch response, which names no disposition;
    // the front read it from the function's `bridged` line.
    if let Some(disposition) = response.headers().get(gateway::DISPOSITION) {
        println!(
            "disposition: {} (the function's bridged line)",
            String::from_utf8_lossy(disposition.as_bytes())
        );
    }
    let status = response.status();
    if status.is_client_error() || status.is_server_error() {
        return Err(format!("the answer was {status}"));
    }
    Ok(())
}

/// The `HOST:PORT` of `--url`: the front's base, `http://HOST:PORT`; the route comes from the
/// event, so a path is a mistake to name rather than a port to misread.
fn front_authority(url: &str) -> Result<&str, String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or("--url must be an http:// URL")?
        .trim_end_matches('/');
    if rest.contains('/') {
        return Err(format!(
            "--url is the front's base (http://HOST:PORT) without a path: the route comes from \
             the event (given {url:?})"
        ));
    }
    Ok(rest)
}

/// True when this binary is the `claimonce-local` that `PATH` finds (as `cargo install` puts
/// it), not a build in a checkout: a project of its own then sends with it, since cargo's copy
/// of the claimonce source is no place to `cargo run` from.
fn installed() -> bool {
    let Ok(this) = std::env::current_exe().and_then(std::fs::canonicalize) else {
        return false;
    };
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path)
            .any(|dir| std::fs::canonicalize(dir.join("claimonce-local")).is_ok_and(|p| p == this))
    })
}

/// The database: `DATABASE_URL` when set, else a private server kept under
/// `target/claimonce-dev/` (or `CLAIMONCE_LOCAL_DIR`); deleting that folder starts clean.
async fn database() -> Result<(String, Option<Postgres>), String> {
    if let Some(url) = claimonce::config::optional("DATABASE_URL") {
        return Ok((url, None));
    }
    let dir = claimonce::config::optional("CLAIMONCE_LOCAL_DIR")
        .map_or_else(
            || functions::project_root().join("target/claimonce-dev"),
            std::path::PathBuf::from,
        )
        .join("postgres");
    let options = Options {
        keep: true,
        ..Options::default()
    };
    let server = tokio::task::spawn_blocking(move || Postgres::start(&dir, &options))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    let admin = connect(&server.url("postgres")).await?;
    let exists = admin
        .query_opt("SELECT 1 FROM pg_database WHERE datname = 'claimonce'", &[])
        .await
        .map_err(|e| e.to_string())?
        .is_some();
    if !exists {
        admin
            .batch_execute("CREATE DATABASE claimonce")
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok((server.url("claimonce"), Some(server)))
}

async fn connect(url: &str) -> Result<claimonce::db::Connection, String> {
    let timeouts = Timeouts::from_env().map_err(|e| e.to_string())?;
    let root = claimonce::config::optional("PGSSLROOTCERT");
    Settings::from_url(url, root.as_deref().map(std::path::Path::new), timeouts)
        .map_err(|e| e.to_string())?
        .connect()
        .await
        .map_err(|e| e.to_string())
}

async fn run(port: u16, instances: usize, json: bool, spill: bool) -> Result<(), String> {
    use std::io::IsTerminal;
    use tokio::signal::unix::{SignalKind, signal};
    // A closed terminal (SIGHUP) or a kill (SIGTERM) stops the run as Ctrl-C does, from the
    // first moment, even where the run was started with them ignored (nohup, some CI runners):
    // the functions stop with it and its PostgreSQL's watchdog stops the server.
    let mut hangup = signal(SignalKind::hangup()).map_err(|e| e.to_string())?;
    let mut terminate = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let raw = json || !std::io::stdout().is_terminal();
    let (url, server) = database().await?;
    let mut client = connect(&url).await?;
    let applied = claimonce::migrate::apply(&mut client, &functions::migrations()?)
        .await
        .map_err(|e| e.to_string())?;
    // On the private server each function logs in as its provider's own login, as in a
    // deployment (DEPLOY.md): granted only claimonce_<provider>, with the statement bound the
    // migrate function gives. With DATABASE_URL, the functions use that URL as it is.
    let registry = functions::all()?;
    let mut urls = HashMap::new();
    if let Some(server) = &server {
        for function in registry {
            let login = format!("claimonce_local_{}", function.provider);
            client
                .batch_execute(&claimonce_local::postgres::provider_login_sql(
                    &login,
                    function.provider,
                ))
                .await
                .map_err(|e| format!("the {} function's login: {e}", function.provider))?;
            urls.insert(function.provider, server.url_as(&login, "claimonce"));
        }
    }
    drop(client);
    // CLAIMONCE_LOCAL_BINARIES: binaries built already (the tests' own build), so this run
    // builds nothing and rewrites none that another process is running.
    let bin_dir = match claimonce::config::optional("CLAIMONCE_LOCAL_BINARIES") {
        Some(dir) => std::path::PathBuf::from(dir),
        None => {
            eprintln!(
                "claimonce-local: building the function binaries (the first build takes a few \
                 minutes; later ones only rebuild what changed)..."
            );
            tokio::task::spawn_blocking(|| functions::build(functions::Binaries::Providers))
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?
        }
    };

    // --spill: moto's SQS for the spill queues, and the database behind a forwarder SIGUSR1
    // takes down and brings back, so that what a deployment does in an outage can be seen.
    // moto's SQS also holds the event queues of the functions that take EventBridge events,
    // whose records a function applies only as SQS received them (shared/src/bridge.rs).
    let mut toggle = signal(SignalKind::user_defined1()).map_err(|e| e.to_string())?;
    let bridging = registry
        .iter()
        .any(|f| claimonce_local::bridge::local_source(f).is_some());
    let moto = if spill || bridging {
        match claimonce_local::moto::start().await {
            Ok(moto) => Some(moto),
            Err(e) if !spill => {
                eprintln!("claimonce-local: no EventBridge routes: moto's SQS did not start ({e})");
                None
            }
            Err(e) => return Err(e),
        }
    } else {
        None
    };
    let spilling = match (&moto, spill) {
        (Some(moto), true) => {
            let (outage, _) = claimonce_local::outage::Outage::in_front_of(&url).await?;
            Some((
                moto.clone(),
                claimonce_local::spill::client(moto).await,
                outage,
            ))
        }
        _ => None,
    };
    let mut children = Vec::new();
    let mut routes = HashMap::new();
    for function in registry {
        let url = urls.get(function.provider).unwrap_or(&url);
        let url = &match &spilling {
            Some((_, _, outage)) => outage.through(url),
            None => url.clone(),
        };
        let api = Arc::new(
            RuntimeApi::start(function.binary)
                .await
                .map_err(|e| e.to_string())?,
        );
        // The local secret always works (the sample events are signed with it); a secret from
        // the environment (the one `stripe listen` prints) is accepted beside it, as during a
        // rotation.
        let secret = match claimonce::config::optional(function.secret_var) {
            Some(extra) => format!("{},{extra}", function.dev_secret),
            None => function.dev_secret.to_owned(),
        };
        let mut env: Vec<(String, String)> = vec![
            ("DATABASE_URL".into(), url.clone()),
            (function.secret_var.into(), secret),
        ];
        // A failed EventBridge event back after 5 s rather than the template's 90, with the
        // next event sent, for a person watching.
        let bridged = match (claimonce_local::bridge::local_source(function), &moto) {
            (Some(source), Some(moto)) => {
                let prefix = format!("claimonce-local-{}", function.provider);
                let queues = claimonce_local::bridge::EventQueues::create(moto, &prefix, 5).await?;
                let bridge_env = queues.function_env(function.provider, &source);
                env.extend(bridge_env);
                Some((source, queues))
            }
            _ => None,
        };
        if let Some((moto, sqs, _)) = &spilling {
            use aws_sdk_sqs::types::QueueAttributeName;
            // A failed message back after 5 s rather than the template's 90, for a person
            // watching.
            let queue = claimonce_local::spill::create_queue(
                sqs,
                &format!("local-{}-spill", function.provider),
                &[
                    (QueueAttributeName::VisibilityTimeout, "5".into()),
                    (QueueAttributeName::MaximumMessageSize, "1048576".into()),
                ],
            )
            .await?;
            env.extend(
                claimonce_local::spill::function_env(&queue, moto)
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v)),
            );
            tokio::spawn(claimonce_local::spill::drain_forever(
                sqs.clone(),
                queue,
                Arc::clone(&api),
                5,
            ));
        }
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        for _ in 0..instances.max(1) {
            let mut command = api.command(&bin_dir.join(function.binary), &env);
            command.stdout(std::process::Stdio::piped());
            let mut child = command
                .spawn()
                .map_err(|e| format!("{}: {e}", function.binary))?;
            // Each line printed as it is or readably; a `bridged` line also tells the event
            // queue's route what became of the event it sent.
            let bridged_lines = bridged.as_ref().map(|(_, q)| q.lines().clone());
            if let Some(out) = child.stdout.take() {
                tokio::spawn(async move {
                    use tokio::io::AsyncBufReadExt;
                    let mut lines = tokio::io::BufReader::new(out).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        if let Some(bridged) = &bridged_lines {
                            bridged.read(&line);
                        }
                        if raw {
                            println!("{line}");
                        } else {
                            println!("{}", claimonce_local::readable::readable(&line));
                        }
                    }
                });
            }
            children.push(child);
        }
        if let Some((_, queues)) = bridged {
            routes.insert(
                claimonce_local::bridge::route(function.provider),
                gateway::Route::EventQueue(Arc::clone(&api), queues),
            );
        }
        routes.insert(function.path(), gateway::Route::Function(api));
    }
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .map_err(|e| format!("127.0.0.1:{port}: {e} (choose another with --port)"))?;
    // The port bound, which `--port 0` leaves to the system.
    let port = listener.local_addr().map_or(port, |a| a.port());
    let base = format!("http://127.0.0.1:{port}");
    let database = if server.is_some() {
        url.as_str()
    } else {
        "DATABASE_URL (from the environment)"
    };
    println!("claimonce is running locally at {base}");
    println!("  database:   {database} (migrations applied now: {applied:?})");
    // Inherited by every function, as Lambda sets it on Managed Instances.
    if let Some(n) = claimonce::config::optional("AWS_LAMBDA_MAX_CONCURRENCY") {
        println!(
            "  concurrency: {n} invocations at once in each instance (AWS_LAMBDA_MAX_CONCURRENCY)"
        );
    }
    for function in registry {
        println!(
            "  POST {base}{}  ->  {} x{instances} (local secret: {})",
            function.path(),
            function.binary,
            function.dev_secret
        );
        let route = claimonce_local::bridge::route(function.provider);
        if let (Some(source), true) = (
            claimonce_local::bridge::local_source(function),
            routes.contains_key(&route),
        ) {
            println!(
                "  POST {base}{}  ->  {} (EventBridge events of {source}, through its event queue)",
                claimonce_local::bridge::route(function.provider),
                function.binary
            );
        }
    }
    println!();
    // A sample of the first provider that has one, as this project keeps them.
    let project = functions::project_root();
    let sample = registry.iter().find_map(|f| f.samples().into_iter().next());
    if let Some(sample) = sample {
        let shown = sample.strip_prefix(&project).unwrap_or(&sample).display();
        let run = if project == functions::workspace_root() {
            "cargo run -q -p claimonce-local --".to_owned()
        } else if installed() {
            format!("CLAIMONCE_PROJECT={} claimonce-local", project.display())
        } else {
            format!(
                "CLAIMONCE_PROJECT={} cargo run -q --manifest-path {} --",
                project.display(),
                functions::workspace_root()
                    .join("local/Cargo.toml")
                    .display()
            )
        };
        println!("Send a signed sample event (a second send answers duplicate):");
        println!("  {run} send {shown} --url {base}");
    }
    if registry.iter().any(|f| f.provider == "stripe") {
        println!("Forward test events from the Stripe CLI:");
        println!("  stripe listen --forward-to {base}/webhooks/stripe");
        println!(
            "  (restart this with STRIPE_WEBHOOK_SECRET=<the whsec_ it prints> so its signatures verify)"
        );
    }
    if let Some((moto, _, _)) = &spilling {
        let pid = std::process::id();
        println!("Spill queues in moto's SQS at {moto}, drained as Lambda's event source would.");
        println!(
            "  kill -USR1 {pid}    takes the database down for the functions (deliveries answer queued);"
        );
        println!("  kill -USR1 {pid}    again brings it back (the queued deliveries are applied)");
    }
    println!("Ctrl-C stops the functions and the database.");
    let serving = gateway::serve(listener, routes);
    tokio::pin!(serving);
    loop {
        tokio::select! {
            () = &mut serving => break,
            _ = tokio::signal::ctrl_c() => break,
            _ = hangup.recv() => break,
            _ = terminate.recv() => break,
            _ = toggle.recv() => {
                if let Some((_, _, outage)) = &spilling {
                    if outage.is_up().await {
                        outage.down().await;
                        println!("claimonce-local: the database is down for the functions; deliveries are queued");
                    } else {
                        outage.up().await?;
                        println!("claimonce-local: the database is back; the queued deliveries are being applied");
                    }
                }
            }
        }
    }
    drop(children);
    println!("claimonce-local: stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Result<Command, String> {
        command(line.split_whitespace().map(str::to_owned))
    }

    #[test]
    fn help_and_wrong_flags_answer_at_once() {
        assert_eq!(parse("--help"), Ok(Command::Help));
        // The help names every option and every variable the run reads.
        for word in [
            "--port",
            "--instances",
            "--json",
            "--spill",
            "--url",
            "--as-is",
            "--tamper",
            "--scheme",
            "--claimonce-path",
            "--check",
            "--list",
            "DATABASE_URL",
            "CLAIMONCE_LOCAL_DIR",
            "CLAIMONCE_PROJECT",
            "_WEBHOOK_SECRET",
            "PG_BIN",
        ] {
            assert!(USAGE.contains(word), "{word}");
        }
        // And every scheme `new` writes a provider for.
        for scheme in claimonce_local::scaffold::SCHEMES {
            assert!(USAGE.contains(scheme), "{scheme}");
        }
        let Ok(Command::New(new)) = parse("new acme --scheme own") else {
            panic!("new")
        };
        assert_eq!(
            (new.provider.as_str(), new.dir.to_str(), new.scheme.as_str()),
            ("acme", Some("acme"), "own")
        );
        let Ok(Command::New(new)) = parse("new acme elsewhere/acme --claimonce-path /c") else {
            panic!("new")
        };
        assert_eq!(
            (
                new.dir.to_str(),
                new.scheme.as_str(),
                new.claimonce.to_str()
            ),
            (Some("elsewhere/acme"), "standard-webhooks", Some("/c"))
        );
        for wrong in [
            "new",
            "new a b c",
            "new acme --as-is",
            "send a.json --scheme own",
            "send a.json --as-is --tamper",
            "run --tamper",
        ] {
            assert!(parse(wrong).is_err(), "{wrong}");
        }
        assert_eq!(parse("send x.json -h"), Ok(Command::Help));
        assert_eq!(
            parse(""),
            Ok(Command::Run {
                port: 9000,
                instances: 2,
                json: false,
                spill: false
            })
        );
        assert_eq!(
            parse("--port=9100 --instances 1 --json --spill"),
            Ok(Command::Run {
                port: 9100,
                instances: 1,
                json: true,
                spill: true
            })
        );
        assert_eq!(
            parse("send e.json --url http://127.0.0.1:3000"),
            Ok(Command::Send {
                file: "e.json".into(),
                url: "http://127.0.0.1:3000".into(),
                as_is: false,
                tamper: false
            })
        );
        assert_eq!(
            parse("send e.json --as-is"),
            Ok(Command::Send {
                file: "e.json".into(),
                url: "http://127.0.0.1:9000".into(),
                as_is: true,
                tamper: false
            })
        );
        assert_eq!(
            parse("template --check"),
            Ok(Command::Template {
                check: true,
                list: false
            })
        );
        assert_eq!(
            parse("template --list"),
            Ok(Command::Template {
                check: false,
                list: true
            })
        );
        for wrong in ["run --check", "template --check --list", "template x.json"] {
            assert!(parse(wrong).is_err(), "{wrong}");
        }
        assert_eq!(
            front_authority("http://127.0.0.1:9000/"),
            Ok("127.0.0.1:9000")
        );
        let with_path =
            front_authority("http://127.0.0.1:9000/webhooks/stripe").expect_err("a path");
        assert!(with_path.contains("without a path"), "{with_path}");
        for wrong in [
            "--bogus",
            "frobnicate",
            "send",
            "send a.json b.json",
            "sign",
            "run --url http://x",
            "--port notaport",
            "run extra.json",
            "sign a.json --json",
            "send a.json --spill",
            "run --as-is",
            "sign a.json --as-is",
        ] {
            assert!(parse(wrong).is_err(), "{wrong}");
        }
    }
}
