//! The test kit of a provider crate, in this repository or out of it: what its tests need
//! beyond [`crate::scratch`]'s databases, so that none of it is copied from an example.
//!
//! - [`databases`]: a private server whose databases hold claimonce's shared migrations and the
//!   crate's own, in one sequence;
//! - [`receiver`]: the crate's receiver on a database, as a deployment builds it;
//! - [`sign`]: an API Gateway event signed now through the crate's own scheme;
//! - [`deliver`] and [`answer`]: a delivery's (status, disposition or problem);
//! - [`Binary`]: one of the crate's binaries under the Lambda Runtime API emulator;
//! - [`count`]: one number read from the database, for assertions on the ledger and effects.
//!
//! ```no_run
//! # async fn example() -> std::io::Result<()> {
//! use claimonce_local::kit;
//! let databases = kit::databases("my-provider-tests", &[]).await?;
//! let db = databases.migrated().await?;
//! let login = db.login("my_provider").await?;
//! // let receiver = kit::receiver(&login, MyProvider::new(..));
//! // assert_eq!(kit::deliver(&receiver, &kit::sign(event, &scheme)).await, (200, "processed".into()));
//! let admin = db.admin().await?;
//! let claims = kit::count(&admin, "SELECT count(*) FROM processed_events").await;
//! # Ok(()) }
//! ```

use std::io;
use std::time::Duration;

use claimonce::db::{Database, Settings, Timeouts};
use claimonce::log::Log;
use claimonce::migrate::Migration;
use claimonce::prelude::ConfigError;
use claimonce::prelude::Provider;
use claimonce::prelude::Sign;
use claimonce::{Limits, Receiver};
use serde_json::Value;
use tokio_postgres::Client;

use crate::runtime_api::{Outcome, RuntimeApi};
use crate::scratch::Scratch;

/// A private server named after `name` whose migrated databases hold claimonce's shared
/// migrations and `own` (the crate's `MIGRATIONS`), in one version sequence.
pub async fn databases(name: &str, own: &[Migration]) -> io::Result<Scratch> {
    let migrations = claimonce::migrate::sequence(&[claimonce_migrations::SHARED, own])
        .map_err(|e| io::Error::other(e.to_string()))?;
    Scratch::start(name, migrations).await
}

/// `provider`'s receiver on the database at `url` (the crate's login: `ScratchDb::login`),
/// with a deployment's connect and delivery bounds and its log captured, not printed.
pub fn receiver<P: Provider>(url: &str, provider: P) -> Result<Receiver<P>, ConfigError> {
    let timeouts = Timeouts::new(Duration::from_secs(2), Duration::from_secs(5));
    let settings = Settings::from_url(url, None, timeouts)?;
    Ok(Receiver::new(
        provider,
        Database::new(settings),
        Limits::default(),
        Log::capture().0,
    ))
}

/// `event` (an API Gateway event with a text `body`) with the headers `scheme` signs its body
/// with now, as the sender would send it.
pub fn sign(mut event: Value, scheme: &impl Sign) -> Value {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_owned();
    let body = text(event.get("body"));
    let id = text(event.pointer("/headers/webhook-id"));
    let signed = scheme.sign(body.as_bytes(), claimonce::timestamp::unix_now(), &id);
    if let Some(headers) = event.get_mut("headers").and_then(Value::as_object_mut) {
        for (name, value) in signed {
            headers.insert(name, Value::String(value));
        }
    }
    event
}

/// The (status, disposition or problem type) of a response payload as API Gateway gets it.
pub fn answer(payload: &Value) -> (u16, String) {
    let body: Value = payload
        .get("body")
        .and_then(Value::as_str)
        .and_then(|b| serde_json::from_str(b).ok())
        .unwrap_or_default();
    let said = ["disposition", "type"]
        .iter()
        .find_map(|key| body.get(key).and_then(Value::as_str))
        .unwrap_or_default();
    let status = payload
        .get("statusCode")
        .and_then(Value::as_u64)
        .unwrap_or_default();
    (u16::try_from(status).unwrap_or(0), said.to_owned())
}

/// Hands `event` to `receiver` as the function's runtime does; its [`answer`].
pub async fn deliver<P: Provider>(receiver: &Receiver<P>, event: &Value) -> (u16, String) {
    let payload = claimonce::lambda::handle_event(receiver, &event.to_string()).await;
    answer(&serde_json::to_value(&payload).unwrap_or_default())
}

/// The first column of the first row of `sql`, as a number (a count, a balance).
pub async fn count(client: &Client, sql: &str) -> Result<i64, tokio_postgres::Error> {
    client.query_one(sql, &[]).await?.try_get(0)
}

/// One running copy of a binary under the Lambda Runtime API emulator; stopped when dropped.
#[derive(Debug)]
pub struct Binary {
    api: RuntimeApi,
    _child: tokio::process::Child,
}

impl Binary {
    /// Starts `path` (a test's `env!("CARGO_BIN_EXE_<name>")`) as function `name` with `env`.
    pub async fn start(name: &str, path: &str, env: &[(&str, &str)]) -> io::Result<Self> {
        let api = RuntimeApi::start(name).await?;
        let mut command = api.command(std::path::Path::new(path), env);
        command.stdout(std::process::Stdio::null());
        let child = command.spawn()?;
        Ok(Self { api, _child: child })
    }

    /// Invokes it with `event` and returns its answer, or the function's error as an error.
    pub async fn invoke(&self, event: &Value) -> io::Result<Value> {
        match self
            .api
            .invoke(event.to_string(), Duration::from_secs(30))
            .await
            .map_err(|e| io::Error::other(format!("{e:?}")))?
        {
            Outcome::Response(payload) => {
                serde_json::from_slice(&payload).map_err(|e| io::Error::other(e.to_string()))
            }
            Outcome::Error(e) => Err(io::Error::other(format!(
                "the function failed: {}",
                String::from_utf8_lossy(&e)
            ))),
        }
    }
}
