//! The provider functions as the local run and the tests start them.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

/// How a provider signs its deliveries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// `t=…,v1=<hex>` in the named header.
    TimestampV1(&'static str),
    /// Standard Webhooks (`webhook-*` / `svix-*` headers).
    StandardWebhooks,
}

/// One provider function.
#[derive(Debug, Clone, Copy)]
pub struct Function {
    /// Ledger namespace and route segment: `POST /webhooks/<provider>`.
    pub provider: &'static str,
    /// The cargo binary.
    pub binary: &'static str,
    /// The variable its signing secrets come from.
    pub secret_var: &'static str,
    /// The secret used locally: sample events are signed with it.
    pub dev_secret: &'static str,
    /// Its signature scheme.
    pub scheme: Scheme,
}

impl Function {
    /// The route API Gateway exposes it on.
    pub fn path(&self) -> String {
        format!("/webhooks/{}", self.provider)
    }
}

/// Every provider function of the workspace.
pub const ALL: &[Function] = &[
    Function {
        provider: "stripe",
        binary: "stripe-webhook",
        secret_var: "STRIPE_WEBHOOK_SECRET",
        dev_secret: "whsec_claimonce_local_dev",
        scheme: Scheme::TimestampV1("stripe-signature"),
    },
    Function {
        provider: "resend",
        binary: "resend-webhook",
        secret_var: "RESEND_WEBHOOK_SECRET",
        // base64 of "claimonce-local-development-key!"
        dev_secret: "whsec_Y2xhaW1vbmNlLWxvY2FsLWRldmVsb3BtZW50LWtleSE=",
        scheme: Scheme::StandardWebhooks,
    },
];

/// The function whose route is `path`.
pub fn by_path(path: &str) -> Option<&'static Function> {
    ALL.iter().find(|f| f.path() == path)
}

/// The workspace root (this crate lives in `<root>/local`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// What [`build`] builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binaries {
    /// The provider functions only (their packages, with their own features): what the local
    /// run starts. Building nothing else leaves the `claimonce-local` binary that `cargo run
    /// -p claimonce-local` built untouched, so the next `cargo run -p claimonce-local -- send`
    /// does not build it again with the workspace's features.
    Providers,
    /// Every binary of the workspace, with the workspace's features, as `cargo test
    /// --workspace` builds them: what the tests start.
    Workspace,
}

/// Builds `which` binaries (debug profile) and returns the directory they are in. Cargo is
/// whichever cargo is running us (`CARGO`), else the one on `PATH`.
pub fn build(which: Binaries) -> io::Result<PathBuf> {
    let root = workspace_root();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(&root)
        .args(["build", "--quiet", "--bins"]);
    // `cargo run` and `cargo test` hand the program they start the variables they set for a
    // crate (CARGO_MANIFEST_DIR and the like). Some build scripts rerun when one changes
    // (ring's reads CARGO_MANIFEST_DIR), so passing them on to this build would rebuild ring
    // and everything above it, and the next `cargo run -p claimonce-local` would rebuild it all
    // again: a build started from a shell has none of them, and neither has this one.
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
            for function in ALL {
                command.args(["-p", function.binary]);
            }
        }
        Binaries::Workspace => {
            command.arg("--workspace");
        }
    }
    if !command.status()?.success() {
        return Err(io::Error::other(format!("cargo build ({which:?}) failed")));
    }
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    Ok(target.join("debug"))
}
