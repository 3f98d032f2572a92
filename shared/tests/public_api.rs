//! The public API of the `claimonce` crate, held to `shared/public-api.txt`: every public path
//! (a module, a type and its public fields, variants and inherent items, a trait and its items, a
//! function, a constant, a re-export), one `kind path declaration` line each, and each trait a
//! listed type implements (`impl path: Trait`), sorted, marked with the feature that brings it
//! when it is not there without one, and `hidden` when it is public but left out of the
//! documentation (`#[doc(hidden)]`). The declaration is what the item promises a caller: a
//! function's signature, a field's or constant's type, a variant's fields, generics and bounds
//! (`declaration`). An item added, moved or removed, a signature or a type changed, or a trait
//! no longer implemented fails this test until the file is written again with
//! `CLAIMONCE_BLESS=1 cargo test -p claimonce --test public_api`, so the surface changes only in
//! a diff someone reads.
//!
//! The paths come from rustdoc's JSON output, which stable rustdoc gives only to a caller that
//! allows unstable options: cargo runs rustdoc through a two-line wrapper that allows them for
//! rustdoc alone, so no build script sees the setting and nothing already built is built again.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Map, Value};

#[path = "public_api/declaration.rs"]
mod declaration;

use declaration::{Renderer, key};

/// The feature sets documented, each after the one before it: an item is marked with the first
/// that brings it. `jobs` includes `sender-api`.
const FEATURES: [&str; 3] = ["", "sender-api", "jobs"];

const SNAPSHOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/public-api.txt");

const HEADER: &str = "\
# The public API of the claimonce crate: `kind path declaration`, sorted by path; [feature] marks what only
# that feature brings, [hidden] what is public but not documented (#[doc(hidden)]). Checked by
# shared/tests/public_api.rs; after a deliberate change:
#   CLAIMONCE_BLESS=1 cargo test -p claimonce --test public_api
";

#[test]
fn the_public_api_is_the_one_written_down() {
    let mut lines: BTreeMap<Line, (&str, bool)> = BTreeMap::new();
    for features in FEATURES {
        let json = rustdoc_json(features).unwrap_or_else(|e| panic!("{e}"));
        for (line, hidden) in render(&json).unwrap_or_else(|e| panic!("rustdoc's JSON: {e}")) {
            lines.entry(line).or_insert((features, hidden));
        }
        let twice: Vec<String> = documented_paths(&json)
            .unwrap_or_else(|e| panic!("rustdoc's JSON: {e}"))
            .into_values()
            .filter(|paths| paths.len() > 1)
            .map(|paths| paths.into_iter().collect::<Vec<_>>().join(" and "))
            .collect();
        assert!(
            twice.is_empty(),
            "one path per name (features {features:?}); reached twice: {twice:#?}"
        );
    }
    // What is public but undocumented is only what the `fields!` macro expands to in a caller's
    // crate; everything else is documented, the jobs' behind their feature.
    let hidden: Vec<&str> = lines
        .iter()
        .filter(|((_, kind, _), (_, hidden))| *hidden && kind != "impl")
        .map(|((path, _, _), _)| path.as_str())
        .collect();
    assert_eq!(
        hidden,
        ["claimonce::__log_fields", "claimonce::log::SerializeMap"],
        "public but hidden from the documentation"
    );
    assert!(
        lines
            .keys()
            .any(|(path, kind, _)| path == "claimonce::prelude::Provider" && kind == "trait"),
        "the rendering found no claimonce::prelude::Provider: {} lines",
        lines.len()
    );
    let mut text = HEADER.to_owned();
    for ((path, kind, declared), (features, hidden)) in &lines {
        let marks: Vec<&str> = [*features, if *hidden { "hidden" } else { "" }]
            .into_iter()
            .filter(|mark| !mark.is_empty())
            .collect();
        text.push_str(&format!("{kind} {path}{declared}"));
        if !marks.is_empty() {
            text.push_str(&format!(" [{}]", marks.join(", ")));
        }
        text.push('\n');
    }
    if std::env::var("CLAIMONCE_BLESS").is_ok_and(|v| v == "1") {
        std::fs::write(SNAPSHOT, &text).expect("writing the snapshot");
        eprintln!("wrote {SNAPSHOT}: {} lines", lines.len());
        return;
    }
    let written = std::fs::read_to_string(SNAPSHOT).unwrap_or_default();
    if written != text {
        let old: BTreeSet<&str> = written.lines().collect();
        let new: BTreeSet<&str> = text.lines().collect();
        let mut diff = String::new();
        for gone in old.difference(&new) {
            diff.push_str(&format!("\n- {gone}"));
        }
        for added in new.difference(&old) {
            diff.push_str(&format!("\n+ {added}"));
        }
        panic!(
            "the public API differs from shared/public-api.txt (- written there, + now):{diff}\n\
             if the change is meant: CLAIMONCE_BLESS=1 cargo test -p claimonce --test public_api"
        );
    }
}

/// Runs `cargo rustdoc` for claimonce's library with `features` and reads the JSON it writes.
fn rustdoc_json(features: &str) -> Result<Value, String> {
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let target = scratch.parent().ok_or("no target directory")?;
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .ok_or("no workspace")?;
    let wrapper = rustdoc_wrapper(scratch)?;
    let output = target.join("doc/claimonce.json");
    // An earlier run's file must not pass for this one's.
    let _ = std::fs::remove_file(&output);
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(workspace)
        .env("RUSTDOC", &wrapper)
        .env("CARGO_TARGET_DIR", target)
        .args(["rustdoc", "--quiet", "--package", "claimonce", "--lib"]);
    if !features.is_empty() {
        command.args(["--features", features]);
    }
    command.args(["--", "-Z", "unstable-options", "--output-format", "json"]);
    command.arg("--document-hidden-items");
    // What cargo sets for this test's own crate would reach the build scripts under rustdoc,
    // and one that reads such a variable (ring's read CARGO_MANIFEST_DIR) would build again,
    // with everything above it.
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(|n| {
            [
                "CARGO_PKG_",
                "CARGO_MANIFEST_",
                "CARGO_CRATE_",
                "CARGO_BIN_",
            ]
            .iter()
            .any(|prefix| n.starts_with(prefix))
                || ["CARGO_PRIMARY_PACKAGE", "CARGO_TARGET_TMPDIR", "OUT_DIR"].contains(&n)
        }) {
            command.env_remove(name);
        }
    }
    let run = command
        .output()
        .map_err(|e| format!("running cargo rustdoc: {e}"))?;
    if !run.status.success() {
        return Err(format!(
            "cargo rustdoc (features {features:?}) failed:\n{}",
            String::from_utf8_lossy(&run.stderr)
        ));
    }
    let text = std::fs::read_to_string(&output)
        .map_err(|e| format!("{}: {e} (features {features:?})", output.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", output.display()))
}

/// The rustdoc cargo runs: the toolchain's own, allowed its unstable JSON output.
fn rustdoc_wrapper(scratch: &Path) -> Result<PathBuf, String> {
    use std::os::unix::fs::PermissionsExt;
    let wrapper = scratch.join("rustdoc-json");
    std::fs::create_dir_all(scratch).map_err(|e| format!("{}: {e}", scratch.display()))?;
    std::fs::write(
        &wrapper,
        "#!/bin/sh\nRUSTC_BOOTSTRAP=1 exec rustdoc \"$@\"\n",
    )
    .and_then(|()| std::fs::set_permissions(&wrapper, PermissionsExt::from_mode(0o755)))
    .map_err(|e| format!("{}: {e}", wrapper.display()))?;
    Ok(wrapper)
}

/// The crate's items by id, and the items of other crates it names by id.
struct Crate<'a> {
    index: &'a Map<String, Value>,
    paths: &'a Map<String, Value>,
}

/// Each public path and kind found: whether it is hidden from the documentation, and the id of
/// the item (none for another crate's, re-exported), whose declaration is rendered once every
/// path is known.
type Found = BTreeMap<(String, String), (bool, Option<String>)>;

/// A line of the snapshot: path, kind and declaration.
type Line = (String, String, String);

/// Where a type or trait is reached by the shortest documented path (or, if it has none, the
/// shortest hidden one; of equal ones, the path it is defined at): its members are listed there
/// once, not again under every path that re-exports it. Keyed by its id: the path and whether
/// it is hidden.
type Homes = BTreeMap<String, (String, bool)>;

/// The crate in `json`, walked from its root: every public path of each module, and where each
/// type's members will be listed.
fn walked(json: &Value) -> Result<(Crate<'_>, Walk<'_>), String> {
    let field = |name: &str| {
        json.get(name)
            .and_then(Value::as_object)
            .ok_or(format!("no {name}"))
    };
    let krate = Crate {
        index: field("index")?,
        paths: field("paths")?,
    };
    let mut walk = Walk {
        found: Found::new(),
        homes: Homes::new(),
        modules: Vec::new(),
        impls: Vec::new(),
    };
    let root = json.get("root").ok_or("no root")?;
    krate.named(root, "claimonce", false, false, &mut walk)?;
    Ok((krate, walk))
}

/// The documented paths of each item of this crate (by id) reached at more than its members'
/// home: a name a caller can import in two ways.
fn documented_paths(json: &Value) -> Result<BTreeMap<String, BTreeSet<String>>, String> {
    let (_, walk) = walked(json)?;
    let mut by_item: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for ((path, _), (hidden, id)) in walk.found {
        if let (false, Some(id)) = (hidden, id) {
            by_item.entry(id).or_default().insert(path);
        }
    }
    Ok(by_item)
}

/// Every public path of the crate in `json`, with its kind and declaration, and whether it is
/// hidden; and each trait a listed type implements.
fn render(json: &Value) -> Result<BTreeMap<Line, bool>, String> {
    let (krate, mut walk) = walked(json)?;
    for (id, (home, hidden)) in &walk.homes {
        krate.members(id, home, *hidden, &mut walk.found, &mut walk.impls)?;
    }
    // Each item is named by its home, the shortest documented path it has.
    let mut shortest: BTreeMap<String, (bool, usize, String)> = BTreeMap::new();
    for ((path, _), (hidden, id)) in &walk.found {
        if let Some(id) = id {
            let rank = (*hidden, path.matches("::").count(), path.clone());
            let best = shortest.entry(id.clone()).or_insert_with(|| rank.clone());
            if rank < *best {
                *best = rank;
            }
        }
    }
    let mut homes: BTreeMap<String, String> = shortest
        .into_iter()
        .map(|(id, (_, _, path))| (id, path))
        .collect();
    homes.extend(
        walk.homes
            .iter()
            .map(|(id, (home, _))| (id.clone(), home.clone())),
    );
    let renderer = Renderer {
        index: krate.index,
        paths: krate.paths,
        homes,
    };
    let mut lines = BTreeMap::new();
    for ((path, kind), (hidden, id)) in walk.found {
        let item = id.and_then(|id| krate.index.get(&id)).and_then(inner);
        let (qualifiers, declared) = item
            .map(|(kind, body)| {
                (
                    Renderer::qualifiers(kind, body),
                    renderer.declaration(kind, body),
                )
            })
            .unwrap_or_default();
        lines.insert((path, qualifiers + &kind, declared), hidden);
    }
    for (home, hidden, block) in walk.impls {
        if let Some(implemented) = renderer.trait_impl(block) {
            lines.insert(
                (home, "impl".to_owned(), format!(": {implemented}")),
                hidden,
            );
        }
    }
    Ok(lines)
}

/// What a walk from the crate's root has found so far, and the modules it is inside.
struct Walk<'a> {
    found: Found,
    homes: Homes,
    modules: Vec<String>,
    /// The trait impls of listed types: the type's home, whether it is hidden, the impl.
    impls: Vec<(String, bool, &'a Value)>,
}

/// An item's kind (the one key of its `inner`) and what that key holds.
fn inner(item: &Value) -> Option<(&str, &Value)> {
    let (kind, body) = item.get("inner")?.as_object()?.iter().next()?;
    Some((kind.as_str(), body))
}

/// The word a kind of item is declared with.
fn word(kind: &str) -> &str {
    match kind {
        "module" => "mod",
        "function" => "fn",
        "constant" | "assoc_const" => "const",
        "type_alias" | "assoc_type" => "type",
        "struct_field" => "field",
        "proc_macro" => "macro",
        "trait_alias" => "trait-alias",
        other => other,
    }
}

/// The ids listed under `name` in `body`.
fn ids<'b>(body: &'b Value, name: &str) -> &'b [Value] {
    body.get(name)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn is_public(item: &Value) -> bool {
    item.get("visibility").and_then(Value::as_str) == Some("public")
}

/// Whether the item carries `#[doc(hidden)]` (rustdoc gives the attribute as its text).
fn is_hidden(item: &Value) -> bool {
    ids(item, "attrs")
        .iter()
        .any(|attr| attr.to_string().replace(' ', "").contains("doc(hidden)"))
}

/// A re-export marked `#[doc(inline)]`.
fn is_inlined(item: &Value) -> bool {
    ids(item, "attrs")
        .iter()
        .any(|attr| attr.to_string().replace(' ', "").contains("doc(inline)"))
}

fn name(item: &Value) -> Result<&str, String> {
    item.get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("an item without a name: {}", key(&item["id"])))
}

impl<'a> Crate<'a> {
    /// The item `id` reached at `path` (`hidden`: through a hidden item): a module with
    /// everything public in it, anything else as itself (its members later, at its home).
    fn named(
        &self,
        id: &Value,
        path: &str,
        hidden: bool,
        inlined: bool,
        walk: &mut Walk<'a>,
    ) -> Result<(), String> {
        let Some(item) = self.index.get(&key(id)) else {
            // Another crate's item, re-exported: its kind is all this crate says of it.
            let kind = self
                .paths
                .get(&key(id))
                .and_then(|p| p.get("kind"))
                .and_then(Value::as_str)
                .unwrap_or("use");
            walk.found
                .insert((path.to_owned(), word(kind).to_owned()), (hidden, None));
            return Ok(());
        };
        // rustdoc documents a hidden item at a re-export marked `#[doc(inline)]`.
        let hidden = hidden || (is_hidden(item) && !inlined);
        let (kind, body) = inner(item).ok_or_else(|| format!("{path}: no kind"))?;
        walk.found.insert(
            (path.to_owned(), word(kind).to_owned()),
            (hidden, Some(key(id))),
        );
        match kind {
            // A module re-exported inside itself would never end.
            "module" if !walk.modules.contains(&key(id)) => {
                walk.modules.push(key(id));
                for child_id in ids(body, "items") {
                    self.child(child_id, path, hidden, walk)?;
                }
                walk.modules.pop();
            }
            "struct" | "enum" | "union" | "trait" => {
                // Ties go to the path it is defined at, then to the first in order.
                let defined = self.defined_at(id);
                let rank = |(path, hidden): (&str, bool)| {
                    let elsewhere = defined.as_deref() != Some(path);
                    (
                        hidden,
                        path.matches("::").count(),
                        elsewhere,
                        path.to_owned(),
                    )
                };
                let home = walk
                    .homes
                    .entry(key(id))
                    .or_insert_with(|| (path.to_owned(), hidden));
                if rank((path, hidden)) < rank((home.0.as_str(), home.1)) {
                    *home = (path.to_owned(), hidden);
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// The path rustdoc gives the item `id` as the one it is defined at.
    fn defined_at(&self, id: &Value) -> Option<String> {
        let segments = self.paths.get(&key(id))?.get("path")?.as_array()?;
        let names: Option<Vec<&str>> = segments.iter().map(Value::as_str).collect();
        Some(names?.join("::"))
    }

    /// An item of the module at `path`: a re-export under its own name, an impl not at all
    /// (impls are read from their types), anything else under its name.
    fn child(
        &self,
        id: &Value,
        path: &str,
        hidden: bool,
        walk: &mut Walk<'a>,
    ) -> Result<(), String> {
        let child = self
            .index
            .get(&key(id))
            .ok_or_else(|| format!("{path}: item {} is missing", key(id)))?;
        if !is_public(child) {
            return Ok(());
        }
        let hidden = hidden || is_hidden(child);
        match inner(child) {
            Some(("use", import)) => {
                let alias = import.get("name").and_then(Value::as_str).unwrap_or("*");
                let child_path = format!("{path}::{alias}");
                match import.get("id").filter(|target| !target.is_null()) {
                    Some(target) if import["is_glob"] != Value::Bool(true) => {
                        self.named(target, &child_path, hidden, is_inlined(child), walk)
                    }
                    _ => {
                        let source = import["source"].as_str().unwrap_or_default();
                        walk.found
                            .insert((child_path, format!("use {source}")), (hidden, None));
                        Ok(())
                    }
                }
            }
            Some(("impl", _)) => Ok(()),
            _ => self.named(
                id,
                &format!("{path}::{}", name(child)?),
                hidden,
                false,
                walk,
            ),
        }
    }

    /// The public members of the type or trait `id`, under `home`: fields, variants, the items
    /// of its inherent impls, a trait's items; and into `impls`, the type's trait impls.
    fn members(
        &self,
        id: &str,
        home: &str,
        hidden: bool,
        found: &mut Found,
        impls: &mut Vec<(String, bool, &'a Value)>,
    ) -> Result<(), String> {
        let item = self
            .index
            .get(id)
            .ok_or_else(|| format!("{home}: missing"))?;
        let (kind, body) = inner(item).ok_or_else(|| format!("{home}: no kind"))?;
        let mut listed: Vec<&Value> = Vec::new();
        match kind {
            "trait" => listed.extend(ids(body, "items")),
            "enum" => listed.extend(ids(body, "variants")),
            _ => match body.get("kind") {
                Some(Value::Object(shape)) => {
                    if let Some(plain) = shape.get("plain") {
                        listed.extend(ids(plain, "fields"));
                    }
                    if let Some(Value::Array(fields)) = shape.get("tuple") {
                        listed.extend(fields.iter().filter(|f| !f.is_null()));
                    }
                }
                // A union's fields.
                _ => listed.extend(ids(body, "fields")),
            },
        }
        for impl_id in ids(body, "impls") {
            let Some(("impl", block)) = self.index.get(&key(impl_id)).and_then(inner) else {
                continue;
            };
            let inherent = block["trait"].is_null()
                && block["blanket_impl"].is_null()
                && block["is_synthetic"] != Value::Bool(true);
            if inherent {
                listed.extend(ids(block, "items"));
            } else if !block["trait"].is_null() {
                impls.push((home.to_owned(), hidden, block));
            }
        }
        for member_id in listed {
            let member = self
                .index
                .get(&key(member_id))
                .ok_or_else(|| format!("{home}: member {} is missing", key(member_id)))?;
            // A trait's items and an enum's variants are public with it, and say "default".
            let public = is_public(member) || matches!(kind, "trait" | "enum");
            if let (true, Some((member_kind, _))) = (public, inner(member)) {
                let path = format!("{home}::{}", name(member)?);
                found.insert(
                    (path, word(member_kind).to_owned()),
                    (hidden || is_hidden(member), Some(key(member_id))),
                );
            }
        }
        Ok(())
    }
}
