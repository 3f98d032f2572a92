//! The registry's retention windows, compiled in: each provider crate's
//! `[package.metadata.claimonce.deploy] retention` (`never`, or a number of days), so that the
//! sweep's own default keeps what the registry says to keep, whatever its environment omits.
//! `src/lib.rs` includes the generated list.

// A build script fails the build by panicking, with the message it prints.
#![allow(clippy::expect_used, clippy::panic)]

use std::fmt::Write as _;
use std::path::PathBuf;

fn main() {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let root = dir.join("../..");
    // A packaged copy (from crates.io, on docs.rs, in `cargo package`'s check: cargo writes
    // Cargo.toml.orig beside its manifest) has no registry around it: the sweep's defaults alone.
    let providers = if dir.join("Cargo.toml.orig").exists() {
        Vec::new()
    } else {
        println!(
            "cargo:rerun-if-changed={}",
            root.join("functions").display()
        );
        claimonce_registry::providers(&root).unwrap_or_else(|e| panic!("{e}"))
    };
    let mut out = String::from("/// (provider, `never` or a number of days), from the registry.\n");
    out.push_str("pub const REGISTERED: &[(&str, &str)] = &[\n");
    for provider in &providers {
        println!(
            "cargo:rerun-if-changed={}",
            provider.folder.join("Cargo.toml").display()
        );
        if let Some(retention) = provider.deploy("retention") {
            writeln!(out, "    ({:?}, {retention:?}),", provider.provider).expect("a String");
        }
    }
    out.push_str("];\n");
    let target = PathBuf::from(std::env::var_os("OUT_DIR").expect("set by cargo"));
    std::fs::write(target.join("registered.rs"), out).expect("write registered.rs");
}
