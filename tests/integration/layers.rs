//! The shared crate's modules import one way: a module that another depends on never depends
//! back on it, through any path. Read from the source as written (`crate::<module>` outside
//! comments and the test modules), so a new cycle fails here before a reader meets it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use claimonce::jobs::CLAIM_FUNCTION;
use claimonce_local::functions;

/// Each source file of `shared/src`: its top-level module, and its code before its tests,
/// without comments.
fn sources(src: &Path) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut pending = vec![src.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("a source folder") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            if path.extension().and_then(|e| e.to_str()) != Some("rs") {
                continue;
            }
            let relative = path.strip_prefix(src).expect("under src");
            let module = relative
                .components()
                .next()
                .and_then(|c| c.as_os_str().to_str())
                .expect("a name")
                .trim_end_matches(".rs")
                .to_owned();
            let text = std::fs::read_to_string(&path).expect("a source file");
            let code = [
                "#[cfg(test)]\nmod tests",
                "#[cfg(test)]\nmod proptests",
                "#[cfg(test)]\nmod sign_tests",
            ]
            .iter()
            .filter_map(|marker| text.find(marker))
            .min()
            .map_or(text.as_str(), |end| &text[..end])
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
            found.push((module, code));
        }
    }
    found
}

/// Each top-level module of `shared/src` and the modules it names with `crate::`.
fn imports(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, code) in sources(src) {
        let names = graph.entry(module.clone()).or_default();
        for part in code.split("crate::").skip(1) {
            let name: String = part
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            if !name.is_empty() && name != module {
                names.insert(name);
            }
        }
    }
    graph
}

/// The Lambda boundary is the crate's outer edge: only `lambda/` names a Lambda crate's type,
/// and no module of the core imports the boundary, so the receiver can be read, run and
/// tested without Lambda.
#[test]
fn only_the_lambda_boundary_knows_lambda() {
    let src = functions::workspace_root().join("shared").join("src");
    let mut files = 0;
    let mut mixed = Vec::new();
    for (module, code) in sources(&src) {
        files += 1;
        if module == "lambda" || module == "lib" {
            continue;
        }
        for name in [
            "lambda_runtime",
            "lambda_http",
            "aws_lambda_events",
            "crate::lambda",
        ] {
            if code.contains(name) {
                mixed.push(format!("{module} names {name}"));
            }
        }
    }
    assert!(files > 30, "only {files} source files read");
    assert_eq!(
        mixed,
        Vec::<String>::new(),
        "the core names the Lambda boundary"
    );
}

#[test]
fn the_shared_crate_s_modules_import_one_way() {
    let src = functions::workspace_root().join("shared").join("src");
    let graph = imports(&src);
    assert!(graph.len() > 20, "{graph:?}");
    let reaches = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_owned()];
        while let Some(module) = stack.pop() {
            for next in graph.get(&module).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        seen
    };
    let cycles: Vec<String> = graph
        .iter()
        .flat_map(|(module, names)| {
            names
                .iter()
                .filter(|name| reaches(name).contains(module))
                .map(move |name| format!("{module} -> {name}"))
        })
        .collect();
    assert_eq!(
        cycles,
        Vec::<String>::new(),
        "import cycles among shared/src modules"
    );
}

/// No module reaches back up to the crate's root: every `crate::<name>` a module writes names a
/// module (or a macro a module defines, which the language exports at the root: `log` re-exports
/// its `fields!` from there),
/// and `lib.rs` holds only modules and re-exports, so the house drawn from the imports has the
/// root above everything and nothing under it pointing up.
#[test]
fn no_module_imports_back_up_to_the_crate_s_root() {
    let src = functions::workspace_root().join("shared").join("src");
    let graph = imports(&src);
    let sources = sources(&src);
    let macro_named = |name: &str| {
        sources
            .iter()
            .any(|(_, code)| code.contains(&format!("macro_rules! {name}")))
    };
    let mut up = Vec::new();
    for (module, names) in &graph {
        for name in names {
            if module != "lib" && !graph.contains_key(name) && !macro_named(name) {
                up.push(format!("{module} -> crate::{name}"));
            }
        }
    }
    assert_eq!(up, Vec::<String>::new(), "imports back up to lib.rs");
    let lib = sources
        .iter()
        .find(|(m, _)| m == "lib")
        .map(|(_, code)| code.clone())
        .expect("lib.rs");
    // A re-export that runs over several lines continues until its `;`.
    let mut in_use = false;
    let items: Vec<&str> = lib
        .lines()
        .map(str::trim_start)
        .filter(|l| {
            let continued = in_use;
            if ["pub use ", "use "].iter().any(|p| l.starts_with(p)) || in_use {
                in_use = !l.ends_with(';');
            }
            !continued
                && !l.is_empty()
                && !l.starts_with('#')
                && !l.starts_with("//")
                && !l.starts_with('}')
                && !["mod ", "pub mod ", "pub use ", "use "]
                    .iter()
                    .any(|p| l.starts_with(p))
        })
        .collect();
    assert_eq!(
        items,
        Vec::<&str>::new(),
        "lib.rs defines more than modules and re-exports"
    );
}

/// A provider crate is handed a claim's transaction, never a connection: none of the registered
/// ones (each `functions/*` crate with a registry table, and the out-of-tree example) turns on
/// the shared crate's `jobs` feature, without which `db::Settings::connect` and `sender_api` do
/// not exist. Only the jobs (sweep, relay, migrate, recover), the tools and the tests do.
#[test]
fn no_provider_crate_can_open_a_connection_of_its_own() {
    let root = functions::workspace_root();
    let mut manifests: Vec<_> = std::fs::read_dir(root.join("functions"))
        .expect("functions/")
        .filter_map(|e| Some(e.ok()?.path().join("Cargo.toml")))
        .collect();
    manifests.push(root.join("examples/paddle/Cargo.toml"));
    let mut providers = 0;
    for manifest in manifests {
        let text = std::fs::read_to_string(&manifest).expect("a manifest");
        if !text.contains("[package.metadata.claimonce]") {
            continue;
        }
        providers += 1;
        let dependencies = text
            .split_once("\n[dependencies]\n")
            .map(|(_, rest)| rest.split("\n[").next().unwrap_or(""))
            .expect("a [dependencies] table");
        let claimonce = dependencies
            .lines()
            .find(|l| l.starts_with("claimonce ") || l.starts_with("claimonce."))
            .expect("a claimonce dependency");
        assert!(
            !claimonce.contains("jobs"),
            "{}: a provider crate turns on claimonce's jobs feature: {claimonce}",
            manifest.display()
        );
    }
    assert!(providers >= 5, "{providers} provider crates found");
}

/// The `.rs` files under `dir`, outside `target/` and hidden folders.
fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source folder") {
        let path = entry.expect("an entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                rust_files(&path, found);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// The claim's SQL function is named once in Rust, by `CLAIM_FUNCTION` in shared/src/claim.rs:
/// every other `.rs` file of the repository reaches it through the constant (or the harness's
/// `claim_call`), so a new version of the claim is one edit. Comments may name it as prose.
#[test]
fn the_claim_function_is_spelled_only_by_its_constant() {
    let root = functions::workspace_root();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    assert!(files.len() > 100, "only {} source files read", files.len());
    let mut spelled = Vec::new();
    for path in &files {
        let relative = path.strip_prefix(&root).expect("under the root");
        // Where the constant is defined.
        if relative == Path::new("shared/src/claim.rs") {
            continue;
        }
        let text = std::fs::read_to_string(path).expect("a source file");
        for (n, line) in text.lines().enumerate() {
            if !line.trim_start().starts_with("//") && line.contains(CLAIM_FUNCTION) {
                spelled.push(format!("{}:{}: {}", relative.display(), n + 1, line.trim()));
            }
        }
    }
    assert_eq!(
        spelled,
        Vec::<String>::new(),
        "the claim function's name spelled by hand: use claimonce::jobs::CLAIM_FUNCTION"
    );
}
