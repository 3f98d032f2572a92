//! Lists the `V<n>__<name>.sql` files beside this crate, in version order, so that adding a
//! migration is adding its file: `src/lib.rs` includes the generated list.

// A build script fails the build by panicking, with the message it prints.
#![allow(clippy::expect_used, clippy::panic)]

use std::fmt::Write as _;
use std::path::PathBuf;

fn main() {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut found: Vec<(i32, String)> = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("the migrations directory") {
        let name = entry.expect("a directory entry").file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(stem) = name.strip_suffix(".sql") else {
            continue;
        };
        let parsed = stem
            .strip_prefix('V')
            .and_then(|rest| rest.split_once("__"))
            .and_then(|(version, label)| Some((version.parse::<i32>().ok()?, label)));
        let Some((version, label)) = parsed else {
            panic!("{name}: a migration is named V<number>__<name>.sql");
        };
        if let Some((_, other)) = found.iter().find(|(v, _)| *v == version) {
            panic!("{name}: version {version} is taken by V{version}__{other}.sql");
        }
        found.push((version, label.to_owned()));
    }
    found.sort();
    let mut out = String::from("&[\n");
    for (version, label) in &found {
        let _ = writeln!(out, "    migration!({version}, {label:?}),");
    }
    out.push(']');
    let target = PathBuf::from(std::env::var_os("OUT_DIR").expect("set by cargo")).join("all.rs");
    std::fs::write(target, out).expect("write the migration list");
}
