//! `claimonce-local`: run every provider function locally, exactly as on AWS (the real
//! binaries under a Lambda Runtime API, behind an API Gateway front), and sign or send the
//! sample events.
//!
//! ```text
//! claimonce-local [run] [--port 9000] [--instances 2]
//! claimonce-local sign <event.json>...
//! claimonce-local send <event.json> [--url http://127.0.0.1:9000]
//! ```

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use claimonce::db::{Settings, Timeouts};
use claimonce_local::postgres::{Options, Postgres};
use claimonce_local::runtime_api::RuntimeApi;
use claimonce_local::{functions, gateway, migrations, sign};
use serde_json::Value;

const USAGE: &str = "usage:
  claimonce-local [run] [--port 9000] [--instances 2]   run every function locally
  claimonce-local sign <event.json>...                  re-sign sample events in place
  claimonce-local send <event.json> [--url URL]         re-sign and POST an event (default URL http://127.0.0.1:9000)";

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        None | Some("run") | Some("--port") | Some("--instances") => run(&args).await,
        Some("sign") => sign_files(args.get(1..).unwrap_or_default()),
        Some("send") => send(&args).await,
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            Ok(())
        }
        Some(other) => Err(format!("unknown command {other}\n{USAGE}")),
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
    if files.is_empty() {
        return Err(format!("sign needs at least one event file\n{USAGE}"));
    }
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

async fn send(args: &[String]) -> Result<(), String> {
    let path = args.get(1).ok_or(USAGE)?;
    let url = flag(args, "--url").unwrap_or("http://127.0.0.1:9000");
    let authority = url
        .strip_prefix("http://")
        .ok_or("--url must be an http:// URL")?
        .trim_end_matches('/');
    let mut event = read_event(path)?;
    sign::resign(&mut event, now()).map_err(|e| format!("{path}: {e}"))?;
    let (status, body) = gateway::send(authority, &event).await?;
    let route = sign::event_path(&event).unwrap_or("/");
    println!("POST {url}{route} -> {status}");
    println!("{}", String::from_utf8_lossy(&body));
    Ok(())
}

/// The database: `DATABASE_URL` when set, else a private server kept under `target/`.
async fn database() -> Result<(String, Option<Postgres>), String> {
    if let Some(url) = claimonce::config::optional("DATABASE_URL") {
        return Ok((url, None));
    }
    let dir = functions::workspace_root().join("target/claimonce-dev/postgres");
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

async fn run(args: &[String]) -> Result<(), String> {
    let port: u16 = flag(args, "--port")
        .unwrap_or("9000")
        .parse()
        .map_err(|_| "--port must be a port number")?;
    let instances: usize = flag(args, "--instances")
        .unwrap_or("2")
        .parse()
        .map_err(|_| "--instances must be a number")?;
    let (url, server) = database().await?;
    let mut client = connect(&url).await?;
    let applied = claimonce::migrate::apply(&mut client, migrations::ALL)
        .await
        .map_err(|e| e.to_string())?;
    drop(client);
    eprintln!("claimonce-local: building the function binaries...");
    let bin_dir = tokio::task::spawn_blocking(functions::build)
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;

    let mut children = Vec::new();
    let mut routes = HashMap::new();
    for function in functions::ALL {
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
        for _ in 0..instances.max(1) {
            let child = api
                .spawn(
                    &bin_dir.join(function.binary),
                    &[("DATABASE_URL", &url), (function.secret_var, &secret)],
                )
                .map_err(|e| format!("{}: {e}", function.binary))?;
            children.push(child);
        }
        routes.insert(function.path(), api);
    }
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .map_err(|e| format!("127.0.0.1:{port}: {e} (choose another with --port)"))?;
    let base = format!("http://127.0.0.1:{port}");
    let database = if server.is_some() {
        url.as_str()
    } else {
        "DATABASE_URL (from the environment)"
    };
    println!("claimonce is running locally at {base}");
    println!("  database:   {database} (migrations applied now: {applied:?})");
    for function in functions::ALL {
        println!(
            "  POST {base}{}  ->  {} x{instances} (local secret: {})",
            function.path(),
            function.binary,
            function.dev_secret
        );
    }
    println!();
    println!("Send a signed sample event (a second send answers duplicate):");
    println!(
        "  cargo run -q -p claimonce-local -- send events/stripe/invoice.paid.json --url {base}"
    );
    println!("Forward test events from the Stripe CLI:");
    println!("  stripe listen --forward-to {base}/webhooks/stripe");
    println!(
        "  (restart this with STRIPE_WEBHOOK_SECRET=<the whsec_ it prints> so its signatures verify)"
    );
    println!("Ctrl-C stops the functions and the database.");
    tokio::select! {
        () = gateway::serve(listener, routes) => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    drop(children);
    println!("claimonce-local: stopped");
    Ok(())
}
