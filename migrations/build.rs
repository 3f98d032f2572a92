//! Lists the `V<n>__<name>.sql` files beside this crate (the shared migrations) and in each
//! provider's own `functions/<provider>/migrations/` (that provider's, named by its registry
//! entry's `provider`), in version order, so that adding a migration is adding its file (a
//! provider's with its crate): `src/lib.rs` includes the generated lists. Versions are one
//! sequence across all of them.

// A build script fails the build by panicking, with the message it prints.
#![allow(clippy::expect_used, clippy::panic)]

use std::fmt::Write as _;
use std::path::PathBuf;

// The file and manifest conventions, shared with the claimonce crate as source: a build
// script cannot depend on the crate it builds beside without compiling it twice.
#[path = "../shared/src/conventions.rs"]
mod conventions;

/// The `provider` of the `[package.metadata.claimonce]` table in `manifest`, if it has one.
fn registered_provider(manifest: &std::path::Path) -> Option<String> {
    let text = std::fs::read_to_string(manifest).ok()?;
    conventions::registry_value(&text, "provider").map(str::to_owned)
}

fn main() {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let functions = dir.join("../functions");
    println!("cargo:rerun-if-changed={}", dir.display());
    println!(
        "cargo:rerun-if-changed={}",
        dir.join("../shared/src/conventions.rs").display()
    );
    println!("cargo:rerun-if-changed={}", functions.display());
    // (provider, its folder when it has one): the shared migrations' provider is None.
    let mut folders: Vec<(Option<String>, Option<PathBuf>)> = vec![(None, Some(dir.clone()))];
    let mut crates: Vec<PathBuf> = std::fs::read_dir(&functions)
        .expect("the functions directory")
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    crates.sort();
    for path in crates {
        let manifest = path.join("Cargo.toml");
        println!("cargo:rerun-if-changed={}", manifest.display());
        let own = path.join("migrations");
        let own = own.is_dir().then_some(own);
        match (registered_provider(&manifest), own) {
            (Some(provider), own) => {
                if let Some(own) = &own {
                    println!("cargo:rerun-if-changed={}", own.display());
                }
                folders.push((Some(provider), own));
            }
            (None, Some(own)) => panic!(
                "{}: only a provider crate (one with a [package.metadata.claimonce] table) \
                 ships migrations",
                own.display()
            ),
            (None, None) => {}
        }
    }
    let mut found: Vec<(i32, String, PathBuf, Option<String>)> = Vec::new();
    for (provider, folder) in &folders {
        let Some(folder) = folder else { continue };
        for entry in std::fs::read_dir(folder).expect("a migrations directory") {
            let path = entry.expect("a directory entry").path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()).map(str::to_owned) else {
                continue;
            };
            // schema.sql is the rendered schema (a test keeps it current), not a migration.
            if !name.ends_with(".sql") || name == "schema.sql" {
                continue;
            }
            let Some((version, label)) = conventions::migration_file_name(&name) else {
                panic!(
                    "{}: a migration is named V<number>__<name>.sql",
                    path.display()
                );
            };
            if let Some((_, _, other, _)) = found.iter().find(|(v, ..)| *v == version) {
                panic!(
                    "{}: version {version} is taken by {}",
                    path.display(),
                    other.display()
                );
            }
            if version >= 10_000 {
                panic!(
                    "{}: versions from 10000 up are left to provider crates outside this \
                     repository",
                    path.display()
                );
            }
            found.push((
                version,
                label.to_owned(),
                path.canonicalize().expect("a path"),
                provider.clone(),
            ));
        }
    }
    found.sort();
    let list = |keep: &dyn Fn(&Option<String>) -> bool| {
        let mut out = String::from("&[\n");
        for (version, label, path, _) in found.iter().filter(|m| keep(&m.3)) {
            let _ = writeln!(
                out,
                "    Migration {{ version: {version}, name: {label:?}, sql: include_str!({:?}) }},",
                path.display().to_string()
            );
        }
        out.push(']');
        out
    };
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("set by cargo"));
    let write = |file: &str, text: String| {
        std::fs::write(out.join(file), text).expect("write a migration list");
    };
    write("all.rs", list(&|_| true));
    write("shared.rs", list(&|p| p.is_none()));
    let mut providers: Vec<&str> = folders.iter().filter_map(|(p, _)| p.as_deref()).collect();
    providers.sort_unstable();
    providers.dedup();
    let mut table = String::from("&[\n");
    for provider in providers {
        let _ = writeln!(
            table,
            "    ({provider:?}, {}),",
            list(&|p| p.as_deref() == Some(provider))
        );
    }
    table.push(']');
    write("providers.rs", table);
}
