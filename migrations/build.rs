//! Lists the `V<n>__<name>.sql` files beside this crate and in each provider's own
//! `functions/<provider>/migrations/`, in version order, so that adding a migration is adding
//! its file (a provider's with its crate): `src/lib.rs` includes the generated list. Versions
//! are one sequence across all of them.

// A build script fails the build by panicking, with the message it prints.
#![allow(clippy::expect_used, clippy::panic)]

use std::fmt::Write as _;
use std::path::PathBuf;

fn main() {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let functions = dir.join("../functions");
    println!("cargo:rerun-if-changed={}", dir.display());
    println!("cargo:rerun-if-changed={}", functions.display());
    let mut folders = vec![dir.clone()];
    for entry in std::fs::read_dir(&functions).expect("the functions directory") {
        let own = entry.expect("a directory entry").path().join("migrations");
        if own.is_dir() {
            println!("cargo:rerun-if-changed={}", own.display());
            folders.push(own);
        }
    }
    let mut found: Vec<(i32, String, PathBuf)> = Vec::new();
    for folder in &folders {
        for entry in std::fs::read_dir(folder).expect("a migrations directory") {
            let path = entry.expect("a directory entry").path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()).map(str::to_owned) else {
                continue;
            };
            let Some(stem) = name.strip_suffix(".sql") else {
                continue;
            };
            let parsed = stem
                .strip_prefix('V')
                .and_then(|rest| rest.split_once("__"))
                .and_then(|(version, label)| Some((version.parse::<i32>().ok()?, label)));
            let Some((version, label)) = parsed else {
                panic!(
                    "{}: a migration is named V<number>__<name>.sql",
                    path.display()
                );
            };
            if let Some((_, _, other)) = found.iter().find(|(v, _, _)| *v == version) {
                panic!(
                    "{}: version {version} is taken by {}",
                    path.display(),
                    other.display()
                );
            }
            found.push((
                version,
                label.to_owned(),
                path.canonicalize().expect("a path"),
            ));
        }
    }
    found.sort();
    let mut out = String::from("&[\n");
    for (version, label, path) in &found {
        let _ = writeln!(
            out,
            "    Migration {{ version: {version}, name: {label:?}, sql: include_str!({:?}) }},",
            path.display().to_string()
        );
    }
    out.push(']');
    let target = PathBuf::from(std::env::var_os("OUT_DIR").expect("set by cargo")).join("all.rs");
    std::fs::write(target, out).expect("write the migration list");
}
