//! Lists the `V<n>__<name>.sql` files beside this crate (the shared migrations) and in each
//! registered provider's own `migrations/` folder, in version order, so that adding a
//! migration is adding its file (a provider's with its crate): `src/lib.rs` includes the
//! generated lists. Versions are one sequence across all of them. The registry and the file
//! names are read by `claimonce-registry`, as everything else reads them.

// A build script fails the build by panicking, with the message it prints.
#![allow(clippy::expect_used, clippy::panic)]

use std::fmt::Write as _;
use std::path::PathBuf;

use claimonce_registry::MigrationFile;

fn main() {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let root = dir.join("..");
    println!("cargo:rerun-if-changed={}", dir.display());
    // A packaged copy (from crates.io, on docs.rs, in `cargo package`'s check: cargo writes
    // Cargo.toml.orig beside its manifest) has no repository around it: the shared migrations
    // alone.
    let checkout = !dir.join("Cargo.toml.orig").exists();
    let providers = if checkout {
        println!(
            "cargo:rerun-if-changed={}",
            root.join("functions").display()
        );
        claimonce_registry::providers(&root).unwrap_or_else(|e| panic!("{e}"))
    } else {
        Vec::new()
    };
    // (provider, its files): the shared migrations' provider is None.
    let mut sets: Vec<(Option<String>, Vec<MigrationFile>)> = vec![(
        None,
        claimonce_registry::migration_files(&dir).unwrap_or_else(|e| panic!("{e}")),
    )];
    for provider in providers {
        println!(
            "cargo:rerun-if-changed={}",
            provider.folder.join("Cargo.toml").display()
        );
        // Only a folder that exists: cargo runs a script again on every build while a path it
        // was told to watch is missing (a new folder shows in `functions/` above).
        if provider.folder.join("migrations").is_dir() {
            println!(
                "cargo:rerun-if-changed={}",
                provider.folder.join("migrations").display()
            );
        }
        sets.push((Some(provider.provider), provider.migrations));
    }
    // A crate with migrations but no registry entry would have them silently left out.
    let functions: Vec<_> = if checkout {
        std::fs::read_dir(root.join("functions"))
            .expect("the functions directory")
            .collect()
    } else {
        Vec::new()
    };
    for entry in functions {
        let path = entry.expect("a directory entry").path();
        let unregistered = claimonce_registry::read_manifest(&path.join("Cargo.toml"))
            .is_ok_and(|provider| provider.is_none());
        if path.join("migrations").is_dir() && unregistered {
            panic!(
                "{}: only a provider crate (one with a [package.metadata.claimonce] table) \
                 ships migrations",
                path.join("migrations").display()
            );
        }
    }
    let mut providers: Vec<String> = sets.iter().filter_map(|(p, _)| p.clone()).collect();
    providers.sort_unstable();
    let mut found: Vec<(i32, String, PathBuf, Option<String>)> = Vec::new();
    for (provider, files) in sets {
        for file in files {
            if let Some((_, _, other, _)) = found.iter().find(|(v, ..)| *v == file.version) {
                panic!(
                    "{}: version {} is taken by {}",
                    file.path.display(),
                    file.version,
                    other.display()
                );
            }
            if file.version >= 10_000 {
                panic!(
                    "{}: versions from 10000 up are left to provider crates outside this \
                     repository",
                    file.path.display()
                );
            }
            let path = file.path.canonicalize().expect("a path");
            found.push((file.version, file.name, path, provider.clone()));
        }
    }
    found.sort();
    let list = |keep: &dyn Fn(&Option<String>) -> bool| {
        let files: Vec<MigrationFile> = found
            .iter()
            .filter(|m| keep(&m.3))
            .map(|(version, name, path, _)| MigrationFile {
                version: *version,
                name: name.clone(),
                path: path.clone(),
            })
            .collect();
        claimonce_registry::migration_list(&files).unwrap_or_else(|e| panic!("{e}"))
    };
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("set by cargo"));
    let write = |file: &str, text: String| {
        std::fs::write(out.join(file), text).expect("write a migration list");
    };
    write("all.rs", list(&|_| true));
    write("shared.rs", list(&|p| p.is_none()));
    let mut table = String::from("&[\n");
    for provider in &providers {
        let _ = writeln!(
            table,
            "    ({provider:?}, {}),",
            list(&|p| p.as_ref() == Some(provider))
        );
    }
    table.push(']');
    write("providers.rs", table);
}
