//! The provider functions as the local run and the tests start them.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use claimonce::migrate::Migration;
use claimonce::prelude::Sign;
use claimonce::verify::body_hmac::{BodyHmac, Encoding};
use claimonce::verify::standard_webhooks::StandardWebhooks;
use claimonce::verify::timestamp_v1::TimestampV1;

/// How a provider signs its deliveries: one of the shared crate's schemes, with what the
/// provider's registry entry configures, or a scheme of the provider crate's own, which signs
/// through the crate's signer binary (`claimonce::verify::signer_command`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// `t=…,v1=<hex>` in the named header (`timestamp-v1`).
    TimestampV1(&'static str),
    /// Standard Webhooks, `webhook-*` / `svix-*` headers (`standard-webhooks`).
    StandardWebhooks,
    /// The HMAC-SHA256 of the body in one header, as a prefix and an encoding
    /// (`body-hmac-sha256`: GitHub's `sha256=` and hex, Shopify's base64).
    BodyHmac {
        /// The lower-case header name.
        header: &'static str,
        /// What precedes the encoded tag.
        prefix: &'static str,
        /// How the tag is written.
        encoding: Encoding,
    },
    /// `own`: the crate's own scheme; `signer` is the crate's binary that signs with it.
    Own {
        /// The signer binary's name.
        signer: &'static str,
    },
}

impl Scheme {
    /// The scheme's signer with `secret`: the shared crate's own type, which the provider
    /// verifies with. A scheme of the crate's own signs through its binary instead
    /// ([`crate::sign::resign`]).
    pub fn signer(&self, secret: &str) -> Result<Box<dyn Sign + Send + Sync>, String> {
        let no_secret = || "the scheme needs a secret".to_owned();
        Ok(match *self {
            Scheme::TimestampV1(header) => {
                Box::new(TimestampV1::new(header, &[secret], 0).ok_or_else(no_secret)?)
            }
            Scheme::StandardWebhooks => {
                Box::new(StandardWebhooks::new(&[secret], 0).map_err(|e| e.to_string())?)
            }
            Scheme::BodyHmac {
                header,
                prefix,
                encoding,
            } => {
                Box::new(BodyHmac::new(header, prefix, encoding, &[secret]).ok_or_else(no_secret)?)
            }
            Scheme::Own { signer } => {
                return Err(format!(
                    "the scheme is the crate's own: its binary {signer} signs with it"
                ));
            }
        })
    }
}

/// One provider function, as its crate's `[package.metadata.claimonce]` table declares it.
#[derive(Debug, Clone, Copy)]
pub struct Function {
    /// Ledger namespace and route segment: `POST /webhooks/<provider>`.
    pub provider: &'static str,
    /// The cargo package.
    pub package: &'static str,
    /// The cargo binary.
    pub binary: &'static str,
    /// The variable its signing secrets come from.
    pub secret_var: &'static str,
    /// The secret used locally: sample events are signed with it.
    pub dev_secret: &'static str,
    /// Its signature scheme.
    pub scheme: Scheme,
    /// The migrations its crate ships (`<crate>/migrations/V<n>__<name>.sql`), read from disk:
    /// the local run applies them after the shared ones.
    pub migrations: &'static [Migration],
}

impl Function {
    /// The route API Gateway exposes it on.
    pub fn path(&self) -> String {
        format!("/webhooks/{}", self.provider)
    }

    /// Its sample events, `events/<provider>/*.json` of the project, in name order (none when
    /// it has no folder there).
    pub fn samples(&self) -> Vec<PathBuf> {
        json_files(&project_root().join("events").join(self.provider))
    }

    /// Its sample EventBridge events, `events/<provider>/eventbridge/*.json`, in name order:
    /// a provider whose sender delivers through EventBridge has some.
    pub fn eventbridge_samples(&self) -> Vec<PathBuf> {
        json_files(
            &project_root()
                .join("events")
                .join(self.provider)
                .join("eventbridge"),
        )
    }
}

/// The `.json` files of `dir`, in name order (none when it does not exist).
fn json_files(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| entries.filter_map(|e| Some(e.ok()?.path())).collect())
        .unwrap_or_default();
    found.retain(|p| p.extension().is_some_and(|x| x == "json"));
    found.sort();
    found
}

static REGISTRY: OnceLock<Result<Vec<Function>, String>> = OnceLock::new();

/// Every provider function of the project ([`project_root`]), in route order: each crate of
/// its workspace that declares a `[package.metadata.claimonce]` table, read once per process by
/// [`claimonce_registry::providers`]. This is the one registry the local run, the signer and the
/// tests' generic cases read, so a new provider crate is picked up with no edit of theirs.
pub fn all() -> Result<&'static [Function], String> {
    REGISTRY
        .get_or_init(read_registry)
        .as_deref()
        .map_err(Clone::clone)
}

fn read_registry() -> Result<Vec<Function>, String> {
    // Leaked once per process: the registry lives as long as the program.
    let keep = |s: &str| -> &'static str { Box::leak(s.to_owned().into_boxed_str()) };
    let mut functions = Vec::new();
    for entry in claimonce_registry::providers(&project_root())? {
        let package = entry.package.as_str();
        let header = || {
            entry
                .get("signature_header")
                .map(keep)
                .ok_or_else(|| format!("{package}: the scheme needs signature_header"))
        };
        let scheme = match entry.require("scheme")? {
            "timestamp-v1" => Scheme::TimestampV1(header()?),
            "standard-webhooks" => Scheme::StandardWebhooks,
            "body-hmac-sha256" => Scheme::BodyHmac {
                header: header()?,
                prefix: keep(entry.get("signature_prefix").unwrap_or_default()),
                encoding: match entry.get("signature_encoding") {
                    Some("hex") => Encoding::LowerHex,
                    Some("base64") => Encoding::Base64,
                    other => {
                        return Err(format!(
                            "{package}: signature_encoding is hex or base64, not {other:?}"
                        ));
                    }
                },
            },
            "own" => {
                let signer = entry
                    .get("signer")
                    .filter(|s| entry.binaries.iter().any(|b| b == s))
                    .ok_or_else(|| {
                        format!(
                            "{package}: scheme \"own\" needs signer, the name of one of its \
                             binaries"
                        )
                    })?;
                Scheme::Own {
                    signer: keep(signer),
                }
            }
            other => return Err(format!("{package}: unknown scheme {other:?}")),
        };
        let mut migrations = Vec::new();
        for file in &entry.migrations {
            let sql = std::fs::read_to_string(&file.path)
                .map_err(|e| format!("{}: {e}", file.path.display()))?;
            migrations.push(Migration {
                version: file.version,
                name: keep(&file.name),
                sql: Box::leak(sql.into_boxed_str()),
            });
        }
        functions.push(Function {
            provider: keep(&entry.provider),
            package: keep(package),
            binary: keep(&entry.binary),
            secret_var: keep(entry.require("secret_var")?),
            dev_secret: keep(entry.require("dev_secret")?),
            scheme,
            migrations: Box::leak(migrations.into_boxed_slice()),
        });
    }
    Ok(functions)
}

/// The migrations the local run applies: the shared ones and every registered provider's, in
/// one sequence (a version taken twice is refused).
pub fn migrations() -> Result<Vec<Migration>, String> {
    let mut sets = vec![claimonce_migrations::SHARED];
    sets.extend(all()?.iter().map(|f| f.migrations));
    claimonce::migrate::sequence(&sets).map_err(|e| e.to_string())
}

/// The function whose route is `path`.
pub fn by_path(path: &str) -> Result<Option<&'static Function>, String> {
    Ok(all()?.iter().find(|f| f.path() == path))
}

/// The function of `provider`.
pub fn by_provider(provider: &str) -> Result<Option<&'static Function>, String> {
    Ok(all()?.iter().find(|f| f.provider == provider))
}

/// The workspace root (this crate lives in `<root>/local`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// The project whose providers the local run serves: `CLAIMONCE_PROJECT` (a directory of a
/// Cargo workspace or package of one's own, whose provider crates depend on `claimonce`), else
/// this repository. Its registry, its binaries and its `target/claimonce-dev` are the ones used.
pub fn project_root() -> PathBuf {
    claimonce::config::optional("CLAIMONCE_PROJECT").map_or_else(workspace_root, PathBuf::from)
}

/// What [`build`] builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binaries {
    /// The provider functions only (their packages, with their own features): what the local
    /// run starts. Building nothing else leaves the `claimonce-local` binary that `cargo run
    /// -p claimonce-local` built untouched, so the next `cargo run -p claimonce-local -- send`
    /// does not build it again with the workspace's features.
    Providers,
    /// Every binary of the workspace, with the workspace's features and the fault points
    /// (`claimonce/faults`, armed only by `CLAIMONCE_FAULTS`): what the tests start.
    Workspace,
}

impl Binaries {
    /// The project (or this workspace) whose binaries these are.
    fn root(self) -> PathBuf {
        match self {
            Binaries::Providers => project_root(),
            Binaries::Workspace => workspace_root(),
        }
    }
}

/// Builds `which` binaries (debug profile) and returns the directory they are in. Cargo is
/// whichever cargo is running us (`CARGO`), else the one on `PATH`.
pub fn build(which: Binaries) -> io::Result<PathBuf> {
    let root = which.root();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command.current_dir(&root).args(["build", "--bins"]);
    // At a terminal, cargo's own progress bar shows (a first build takes minutes); elsewhere
    // (a log, the tests, CI) cargo is quiet and a line every half minute says how far it got.
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
    if !terminal {
        command
            .args(["--quiet", "--message-format", "json-render-diagnostics"])
            .stdout(std::process::Stdio::piped());
    }
    // `cargo run` and `cargo test` hand the program they start the variables they set for a
    // crate (CARGO_MANIFEST_DIR and the like). A build script that reads one reruns when it
    // changes (ring's read CARGO_MANIFEST_DIR), so passing them on to this build would rebuild
    // that crate and everything above it, and the next `cargo run -p claimonce-local` would
    // rebuild it all again: a build started from a shell has none of them, and neither has
    // this one.
    for (name, _) in std::env::vars_os() {
        let is_crate_var = name.to_str().is_some_and(|n| {
            n.starts_with("CARGO_PKG_")
                || matches!(
                    n,
                    "CARGO_MANIFEST_DIR"
                        | "CARGO_MANIFEST_PATH"
                        | "CARGO_CRATE_NAME"
                        | "CARGO_BIN_NAME"
                        | "CARGO_PRIMARY_PACKAGE"
                        | "CARGO_TARGET_TMPDIR"
                        | "OUT_DIR"
                )
        });
        if is_crate_var {
            command.env_remove(&name);
        }
    }
    match which {
        Binaries::Providers => {
            for function in all().map_err(io::Error::other)? {
                command.args(["-p", function.package]);
            }
        }
        Binaries::Workspace => {
            command.args(["--workspace", "--features", "claimonce/faults"]);
        }
    }
    let mut child = command.spawn()?;
    if let Some(out) = child.stdout.take() {
        let started = std::time::Instant::now();
        let compiled = progress(io::BufReader::new(out), PROGRESS_EVERY, |line| {
            eprintln!("claimonce-local: {line}");
        });
        if compiled > 0 {
            eprintln!(
                "claimonce-local: built in {} s ({compiled} crates compiled)",
                started.elapsed().as_secs()
            );
        }
    }
    if !child.wait()?.success() {
        return Err(io::Error::other(format!("cargo build ({which:?}) failed")));
    }
    Ok(binaries_dir(which))
}

/// How often a build away from a terminal says how far it got.
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

/// Reads cargo's JSON messages (`--message-format json-render-diagnostics`) and hands `say` a
/// line on the first crate compiled after each `every`: how many were compiled so far and
/// which. Returns how many were compiled (crates already built, `fresh`, are not counted).
fn progress(
    messages: impl io::BufRead,
    every: std::time::Duration,
    mut say: impl FnMut(String),
) -> usize {
    let mut compiled = 0;
    let mut last = std::time::Instant::now();
    for line in messages.lines().map_while(Result::ok) {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        let artifact =
            message.get("reason").and_then(serde_json::Value::as_str) == Some("compiler-artifact");
        let fresh = message.get("fresh").and_then(serde_json::Value::as_bool) == Some(true);
        if !artifact || fresh {
            continue;
        }
        compiled += 1;
        if last.elapsed() >= every {
            last = std::time::Instant::now();
            let name = message
                .pointer("/target/name")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("?");
            say(format!(
                "still building: {compiled} crates compiled, the last {name}"
            ));
        }
    }
    compiled
}

/// Where [`build`] leaves `which` binaries: `CARGO_TARGET_DIR`, else the project's (or this
/// workspace's) `target`, debug profile.
pub fn binaries_dir(which: Binaries) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| which.root().join("target"), PathBuf::from)
        .join("debug")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_build_away_from_a_terminal_says_how_far_it_got() {
        let messages = [
            r#"{"reason":"compiler-artifact","fresh":true,"target":{"name":"serde"}}"#,
            r#"{"reason":"build-script-executed"}"#,
            "not JSON",
            r#"{"reason":"compiler-artifact","fresh":false,"target":{"name":"tokio"}}"#,
            r#"{"reason":"compiler-artifact","fresh":false,"target":{"name":"claimonce"}}"#,
            r#"{"reason":"build-finished","success":true}"#,
        ]
        .join("\n");
        let mut said = Vec::new();
        let compiled = progress(messages.as_bytes(), Duration::ZERO, |l| said.push(l));
        assert_eq!(compiled, 2);
        assert_eq!(
            said,
            [
                "still building: 1 crates compiled, the last tokio",
                "still building: 2 crates compiled, the last claimonce",
            ]
        );
        let mut quiet = Vec::new();
        progress(messages.as_bytes(), Duration::from_secs(3600), |l| {
            quiet.push(l)
        });
        assert!(quiet.is_empty(), "{quiet:?}");
    }
}
