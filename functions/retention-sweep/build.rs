//! The registry's retention windows, compiled in: each provider crate's
//! `[package.metadata.claimonce.deploy] retention` (`never`, or a number of days), so that the
//! sweep's own default keeps what the registry says to keep, whatever its environment omits.
//! `src/lib.rs` includes the generated list.

// A build script fails the build by panicking, with the message it prints.
#![allow(clippy::expect_used, clippy::panic)]

use std::fmt::Write as _;
use std::path::PathBuf;

// The manifest conventions, shared with the claimonce crate as source (as the migrations
// crate's build script does).
#[path = "../../shared/src/conventions.rs"]
#[allow(dead_code)]
mod conventions;

fn main() {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let functions = dir.join("..");
    println!("cargo:rerun-if-changed={}", functions.display());
    let mut crates: Vec<PathBuf> = std::fs::read_dir(&functions)
        .expect("the functions directory")
        .map(|entry| entry.expect("a directory entry").path().join("Cargo.toml"))
        .filter(|manifest| manifest.is_file())
        .collect();
    crates.sort();
    let mut out = String::from("/// (provider, `never` or a number of days), from the registry.\n");
    out.push_str("pub const REGISTERED: &[(&str, &str)] = &[\n");
    for manifest in crates {
        println!("cargo:rerun-if-changed={}", manifest.display());
        let text = std::fs::read_to_string(&manifest).expect("a manifest");
        let provider = conventions::registry_value(&text, "provider");
        let retention =
            conventions::table_value(&text, "package.metadata.claimonce.deploy", "retention");
        if let (Some(provider), Some(retention)) = (provider, retention) {
            writeln!(out, "    ({provider:?}, {retention:?}),").expect("a String");
        }
    }
    out.push_str("];\n");
    let target = PathBuf::from(std::env::var_os("OUT_DIR").expect("set by cargo"));
    std::fs::write(target.join("registered.rs"), out).expect("write registered.rs");
}
