//! The provider registry, read in one place.
//!
//! A provider crate's registry entry is the `[package.metadata.claimonce]` table of its
//! `Cargo.toml` (with `[package.metadata.claimonce.deploy]` and `.samples` beside it), and its
//! migrations are the `V<n>__<name>.sql` files of its `migrations/` folder. Everything that
//! needs them reads them through this crate:
//!
//! - a function binary, at compile time: [`provider_name`] and [`entry_value`] are `const`
//!   over the manifest its crate compiles in (`claimonce::Provider::MANIFEST`), so a missing
//!   `provider` is a build error and the name is written once, in the manifest;
//! - the build scripts of the migrations crate and the retention sweep, and the local run and
//!   the tests (`claimonce-local`), through [`providers`];
//! - the template renderer (`claimonce-local template`, which `scripts/template` runs),
//!   through [`providers`].
//!
//! A manifest is read line by line, in the shape the entries are written: `[table]` and
//! `[[table]]` headers, and `key = "text"` or `key = 'text'` lines (a bare or quoted key; a
//! comment may follow). Other values (`true`, a number, an array) are kept as their text. A
//! `"…"` string with an escape in it is not read as text: a value with a `"` in it is written
//! as a literal string, `'…'`.

#![warn(missing_docs)]

use std::path::{Path, PathBuf};

/// The table that holds a crate's registry entry.
pub const ENTRY: &str = "package.metadata.claimonce";
/// What the SAM template says about a provider.
pub const DEPLOY: &str = "package.metadata.claimonce.deploy";
/// What each sample event under `events/<provider>/` does.
pub const SAMPLES: &str = "package.metadata.claimonce.samples";

/// One line of a manifest, as the registry reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line<'a> {
    /// `[name]`.
    Table(&'a str),
    /// `[[name]]`.
    ArrayTable(&'a str),
    /// `key = "text"`: the key without its quotes, the text without its quotes.
    Text(&'a str, &'a str),
    /// `key = <anything else>`: the value's text up to any comment (`true`, `12`, `[`…).
    Other(&'a str, &'a str),
    /// A blank line, a comment, or a line of no shape above (an array's continuation).
    Blank,
}

/// The line of `text` that starts at byte `at`, and the byte where the next one starts
/// (`text.len()` after the last).
pub const fn line_at(text: &str, at: usize) -> (Line<'_>, usize) {
    let bytes = text.as_bytes();
    if at >= bytes.len() {
        return (Line::Blank, bytes.len());
    }
    let (_, rest) = bytes.split_at(at);
    let mut length = 0;
    let mut cursor = rest;
    while let [first, tail @ ..] = cursor {
        if *first == b'\n' {
            break;
        }
        length += 1;
        cursor = tail;
    }
    let (line, _) = rest.split_at(length);
    let next = if at + length < bytes.len() {
        at + length + 1
    } else {
        bytes.len()
    };
    (parse_line(line.trim_ascii()), next)
}

const fn parse_line(line: &[u8]) -> Line<'_> {
    match line {
        [b'[', b'[', inner @ ..] => match until(inner, b']') {
            Some((name, _)) => Line::ArrayTable(text(name.trim_ascii())),
            None => Line::Blank,
        },
        [b'[', inner @ ..] => match until(inner, b']') {
            Some((name, _)) => Line::Table(text(name.trim_ascii())),
            None => Line::Blank,
        },
        [] | [b'#', ..] => Line::Blank,
        [b'"', quoted @ ..] => match until(quoted, b'"') {
            Some((key, rest)) => match rest.trim_ascii_start() {
                [b'=', value @ ..] => pair(text(key), value),
                _ => Line::Blank,
            },
            None => Line::Blank,
        },
        _ => match until(line, b'=') {
            Some((key, value)) => pair(text(key.trim_ascii()), value),
            None => Line::Blank,
        },
    }
}

/// A `key = value` line's value.
const fn pair<'a>(key: &'a str, value: &'a [u8]) -> Line<'a> {
    match value.trim_ascii() {
        [b'"', quoted @ ..] => match until(quoted, b'"') {
            Some((inner, _)) if !contains(inner, b'\\') => Line::Text(key, text(inner)),
            _ => Line::Other(key, text(value.trim_ascii())),
        },
        // A literal string, which has no escapes: for a value with a `"` in it.
        [b'\'', quoted @ ..] => match until(quoted, b'\'') {
            Some((inner, _)) => Line::Text(key, text(inner)),
            None => Line::Other(key, text(value.trim_ascii())),
        },
        other => match until(other, b'#') {
            Some((before, _)) => Line::Other(key, text(before.trim_ascii())),
            None => Line::Other(key, text(other)),
        },
    }
}

/// The bytes before the first `stop`, and those after it.
const fn until(bytes: &[u8], stop: u8) -> Option<(&[u8], &[u8])> {
    let mut at = 0;
    let mut cursor = bytes;
    while let [first, tail @ ..] = cursor {
        if *first == stop {
            let (before, after) = bytes.split_at(at);
            let (_, after) = after.split_at(1);
            return Some((before, after));
        }
        at += 1;
        cursor = tail;
    }
    None
}

const fn contains(bytes: &[u8], wanted: u8) -> bool {
    until(bytes, wanted).is_some()
}

/// Bytes cut out of a `&str` at ASCII bytes, which are always a `&str` again.
const fn text(bytes: &[u8]) -> &str {
    match core::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(_) => "",
    }
}

const fn same(a: &str, b: &str) -> bool {
    let (mut a, mut b) = (a.as_bytes(), b.as_bytes());
    loop {
        match (a, b) {
            ([], []) => return true,
            ([x, a_rest @ ..], [y, b_rest @ ..]) if *x == *y => {
                a = a_rest;
                b = b_rest;
            }
            _ => return false,
        }
    }
}

/// The text of `key` in `[table]` of a manifest: `Some` for a `key = "text"` line only.
pub const fn value<'a>(manifest: &'a str, table: &str, key: &str) -> Option<&'a str> {
    let mut at = 0;
    let mut inside = false;
    while at < manifest.len() {
        let (line, next) = line_at(manifest, at);
        match line {
            Line::Table(name) => inside = same(name, table),
            Line::ArrayTable(_) => inside = false,
            Line::Text(k, text) if inside && same(k, key) => return Some(text),
            _ => {}
        }
        at = next;
    }
    None
}

/// The text of `key` in a manifest's registry entry (`[package.metadata.claimonce]`).
pub const fn entry_value<'a>(manifest: &'a str, key: &str) -> Option<&'a str> {
    value(manifest, ENTRY, key)
}

/// The provider's name (`provider`, the ledger namespace) in a manifest's registry entry.
/// Evaluated at compile time over a crate's manifest, where a panic is a build error: a
/// missing or malformed name fails the build, never a running function.
#[allow(clippy::panic)]
pub const fn provider_name(manifest: &str) -> &str {
    match entry_value(manifest, "provider") {
        Some(name) if is_name(name) => name,
        Some(_) => panic!(
            "the provider's name (provider in [package.metadata.claimonce]) is lower-case \
             letters and digits, starting with a letter"
        ),
        None => panic!("the crate's manifest has no provider in its [package.metadata.claimonce]"),
    }
}

/// Whether `name` can be a provider's name: it becomes a route segment, a role
/// (`claimonce_<name>`) and a variable prefix, so lower-case ASCII letters and digits, starting
/// with a letter.
pub const fn is_name(name: &str) -> bool {
    match name.as_bytes() {
        [b'a'..=b'z', rest @ ..] => {
            let mut cursor = rest;
            while let [first, tail @ ..] = cursor {
                if !matches!(first, b'a'..=b'z' | b'0'..=b'9') {
                    return false;
                }
                cursor = tail;
            }
            true
        }
        _ => false,
    }
}

/// The lines of a manifest, in order ([`line_at`] over the whole text).
pub fn lines(manifest: &str) -> impl Iterator<Item = Line<'_>> {
    let mut at = 0;
    std::iter::from_fn(move || {
        (at < manifest.len()).then(|| {
            let (line, next) = line_at(manifest, at);
            at = next;
            line
        })
    })
}

/// Each line of a manifest with the header of the table it is in (`[name]` or `[[name]]`; ""
/// before the first).
fn in_tables(manifest: &str) -> impl Iterator<Item = (&str, Line<'_>)> {
    let mut current = "";
    lines(manifest).map(move |line| {
        if let Line::Table(name) | Line::ArrayTable(name) = line {
            current = name;
        }
        (current, line)
    })
}

/// The `key = value` pairs of `[table]`, in order, each value as [`Line::Text`] or
/// [`Line::Other`] gives it.
pub fn table<'a>(manifest: &'a str, table: &str) -> Vec<(&'a str, &'a str)> {
    in_tables(manifest)
        .filter_map(|(name, line)| match line {
            Line::Text(key, value) | Line::Other(key, value) if name == table => Some((key, value)),
            _ => None,
        })
        .collect()
}

/// The `name` of each `[[<array>]]` table (a manifest's `[[bin]]`s), in order.
pub fn array_names<'a>(manifest: &'a str, array: &str) -> Vec<&'a str> {
    in_tables(manifest)
        .filter_map(|(table, line)| match line {
            Line::Text("name", name) if table == array => Some(name),
            _ => None,
        })
        .collect()
}

/// The strings of the array `key` in `[table]` (a workspace's `members`), which may span
/// lines.
pub fn array<'a>(manifest: &'a str, table: &str, key: &str) -> Vec<&'a str> {
    let mut at = 0;
    for (name, line) in in_tables(manifest) {
        let start = at;
        at = line_at(manifest, at).1;
        if let Line::Other(k, value) = line
            && name == table
            && k == key
            && value.starts_with('[')
        {
            let rest = manifest.get(start..).unwrap_or_default();
            let rest = rest.split_once('[').map_or("", |(_, after)| after);
            return strings(rest.split_once(']').map_or(rest, |(items, _)| items));
        }
    }
    Vec::new()
}

/// The `"…"` strings of an array's text, its comments left out.
fn strings(text: &str) -> Vec<&str> {
    text.lines()
        .flat_map(|line| {
            let code = line.split('#').next().unwrap_or_default();
            code.split('"').skip(1).step_by(2)
        })
        .collect()
}

/// The version and name of a migration file named `V<n>__<name>.sql`; `None` for any other
/// name.
pub fn migration_file_name(file: &str) -> Option<(i32, &str)> {
    let (version, name) = file
        .strip_suffix(".sql")?
        .strip_prefix('V')?
        .split_once("__")?;
    Some((version.parse().ok()?, name))
}

/// One migration file of a folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationFile {
    /// Its version, the `<n>` of `V<n>__<name>.sql`.
    pub version: i32,
    /// Its name.
    pub name: String,
    /// Where it is.
    pub path: PathBuf,
}

/// The `V<n>__<name>.sql` files of `folder`, in version order; another `.sql` file there is an
/// error (`schema.sql`, the rendered schema beside the shared migrations, aside).
pub fn migration_files(folder: &Path) -> Result<Vec<MigrationFile>, String> {
    let mut found = Vec::new();
    let entries = std::fs::read_dir(folder).map_err(|e| format!("{}: {e}", folder.display()))?;
    for entry in entries {
        let path = entry
            .map_err(|e| format!("{}: {e}", folder.display()))?
            .path();
        let Some(file) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if !file.ends_with(".sql") || file == "schema.sql" {
            continue;
        }
        let (version, name) = migration_file_name(file).ok_or_else(|| {
            format!(
                "{}: a migration is named V<number>__<name>.sql",
                path.display()
            )
        })?;
        let name = name.to_owned();
        found.push(MigrationFile {
            version,
            name,
            path,
        });
    }
    found.sort_by_key(|m| m.version);
    Ok(found)
}

/// The Rust text of a `&[claimonce::migrate::Migration]` holding `files` in the order given,
/// each file's SQL included from its absolute path: what a build script writes for `include!`.
pub fn migration_list(files: &[MigrationFile]) -> Result<String, String> {
    let mut out = String::from("&[\n");
    for file in files {
        let path = file
            .path
            .canonicalize()
            .map_err(|e| format!("{}: {e}", file.path.display()))?;
        out.push_str(&format!(
            "    Migration {{ version: {}, name: {:?}, sql: include_str!({:?}) }},\n",
            file.version,
            file.name,
            path.display().to_string()
        ));
    }
    out.push(']');
    Ok(out)
}

/// For a provider crate kept outside claimonce's repository: its build script's one call.
/// Reads the crate's `migrations/` folder (`V<n>__<name>.sql`, numbered from 10000 up, the
/// range claimonce leaves to such crates), writes their list to `$OUT_DIR/migrations.rs` for
/// `pub const MIGRATIONS: &[Migration] = include!(concat!(env!("OUT_DIR"), "/migrations.rs"));`
/// and tells cargo to build again when the folder changes. The same reader as the local run's,
/// so the migrate binary applies exactly what the folder holds.
pub fn embed_crate_migrations() -> Result<(), String> {
    let dir = std::env::var_os("CARGO_MANIFEST_DIR").ok_or("CARGO_MANIFEST_DIR is not set")?;
    let out = std::env::var_os("OUT_DIR").ok_or("OUT_DIR is not set")?;
    let folder = Path::new(&dir).join("migrations");
    println!("cargo:rerun-if-changed={}", folder.display());
    let files = migration_files(&folder)?;
    if let Some(low) = files.iter().find(|f| f.version < 10_000) {
        return Err(format!(
            "{}: a crate outside claimonce's repository numbers its migrations from 10000 up",
            low.path.display()
        ));
    }
    std::fs::write(
        Path::new(&out).join("migrations.rs"),
        migration_list(&files)?,
    )
    .map_err(|e| format!("writing the migration list: {e}"))
}

/// A provider crate, as its manifest registers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provider {
    /// `provider`: the ledger namespace, the route `/webhooks/<provider>`, the role.
    pub provider: String,
    /// The cargo package.
    pub package: String,
    /// The package's `description`.
    pub description: Option<String>,
    /// The crate's folder.
    pub folder: PathBuf,
    /// Its binaries (`[[bin]]`, or the package's own for a lone `src/main.rs`).
    pub binaries: Vec<String>,
    /// The receiver: the binary named as the package, or the only one.
    pub binary: String,
    /// What the receiver's `main.rs` hands to `claimonce::run_from_env` (the constructor of
    /// the provider), when it is one such call.
    pub constructor: Option<String>,
    /// The registry entry's keys and values.
    pub entry: Vec<(String, String)>,
    /// `[package.metadata.claimonce.deploy]`.
    pub deploy: Vec<(String, String)>,
    /// `[package.metadata.claimonce.samples]`: sample file (under `events/<provider>/`) and what
    /// it does.
    pub samples: Vec<(String, String)>,
    /// Its migrations (`<folder>/migrations/`).
    pub migrations: Vec<MigrationFile>,
}

impl Provider {
    /// The entry's `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        lookup(&self.entry, key)
    }

    /// The entry's `key`, which a provider must have.
    pub fn require(&self, key: &str) -> Result<&str, String> {
        self.get(key)
            .ok_or_else(|| format!("{}: the registry entry has no {key}", self.package))
    }

    /// The deploy table's `key`.
    pub fn deploy(&self, key: &str) -> Option<&str> {
        lookup(&self.deploy, key)
    }
}

fn lookup<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, value)| value.as_str())
}

fn owned(pairs: Vec<(&str, &str)>) -> Vec<(String, String)> {
    pairs
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// The provider crate whose manifest is `manifest`; `None` for a crate with no registry
/// entry.
pub fn read_manifest(manifest: &Path) -> Result<Option<Provider>, String> {
    let text =
        std::fs::read_to_string(manifest).map_err(|e| format!("{}: {e}", manifest.display()))?;
    let entry = table(&text, ENTRY);
    if entry.is_empty() {
        return Ok(None);
    }
    let folder = manifest
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let at = |what: String| format!("{}: {what}", manifest.display());
    let package = value(&text, "package", "name")
        .ok_or_else(|| at("no [package] name".into()))?
        .to_owned();
    let provider = entry
        .iter()
        .find(|(key, _)| *key == "provider")
        .map(|(_, name)| (*name).to_owned())
        .ok_or_else(|| at("the registry entry has no provider".into()))?;
    if !is_name(&provider) {
        return Err(at(format!(
            "provider {provider:?} is not lower-case letters and digits starting with a letter"
        )));
    }
    let mut binaries: Vec<String> = array_names(&text, "bin")
        .into_iter()
        .map(str::to_owned)
        .collect();
    if binaries.is_empty() && folder.join("src/main.rs").is_file() {
        binaries.push(package.clone());
    }
    let binary = match binaries.iter().position(|b| *b == package) {
        Some(i) => binaries.get(i).cloned(),
        None if binaries.len() == 1 => binaries.first().cloned(),
        None => None,
    }
    .ok_or_else(|| at("a provider crate has one binary, or one named as the package".into()))?;
    for table_name in [ENTRY, DEPLOY, SAMPLES] {
        if let Some((key, _)) = table(&text, table_name)
            .into_iter()
            .find(|(_, value)| value.starts_with('"'))
        {
            return Err(at(format!(
                "{key} in [{table_name}] has an escape: write it as a literal string, '…'"
            )));
        }
    }
    let main = bin_path(&text, &binary).unwrap_or_else(|| "src/main.rs".into());
    let constructor = std::fs::read_to_string(folder.join(main))
        .ok()
        .and_then(|source| constructor(&source));
    let own = folder.join("migrations");
    let migrations = if own.is_dir() {
        migration_files(&own)?
    } else {
        Vec::new()
    };
    Ok(Some(Provider {
        provider,
        description: value(&text, "package", "description").map(str::to_owned),
        package,
        binaries,
        binary,
        constructor,
        entry: owned(entry),
        deploy: owned(table(&text, DEPLOY)),
        samples: owned(table(&text, SAMPLES)),
        migrations,
        folder,
    }))
}

/// The `path` of the `[[bin]]` named `name`.
fn bin_path(manifest: &str, name: &str) -> Option<String> {
    let mut current = None;
    for (table, line) in in_tables(manifest) {
        match line {
            Line::ArrayTable(_) => current = None,
            Line::Text("name", bin) if table == "bin" => current = Some(bin),
            Line::Text("path", path) if table == "bin" && current == Some(name) => {
                return Some(path.to_owned());
            }
            _ => {}
        }
    }
    None
}

/// The argument of a `main.rs`'s one `claimonce::run_from_env(<constructor>)` call.
fn constructor(source: &str) -> Option<String> {
    let (_, after) = source.split_once("claimonce::run_from_env(")?;
    let (argument, _) = after.split_once(')')?;
    let argument = argument.trim().trim_end_matches(',').trim();
    let plain = !argument.is_empty()
        && argument
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
    plain.then(|| argument.to_owned())
}

/// Every provider crate of the project at `root`, in name order: the package at the root, if
/// it is one, and each member of its `[workspace]` (`members`, where a path ending in `/*`
/// stands for every folder under it with a `Cargo.toml`). A name taken twice is an error.
pub fn providers(root: &Path) -> Result<Vec<Provider>, String> {
    let manifest = root.join("Cargo.toml");
    let text =
        std::fs::read_to_string(&manifest).map_err(|e| format!("{}: {e}", manifest.display()))?;
    let mut manifests = vec![manifest];
    for member in array(&text, "workspace", "members") {
        match member.strip_suffix("/*") {
            Some(parent) => {
                let dir = root.join(parent);
                let mut found: Vec<PathBuf> = std::fs::read_dir(&dir)
                    .map_err(|e| format!("{}: {e}", dir.display()))?
                    .filter_map(|entry| Some(entry.ok()?.path().join("Cargo.toml")))
                    .filter(|m| m.is_file())
                    .collect();
                found.sort();
                manifests.extend(found);
            }
            None => manifests.push(root.join(member).join("Cargo.toml")),
        }
    }
    let mut providers = Vec::new();
    for manifest in manifests {
        if let Some(provider) = read_manifest(&manifest)? {
            if let Some(other) = providers
                .iter()
                .find(|p: &&Provider| p.provider == provider.provider)
            {
                return Err(format!(
                    "{}: provider {:?} is registered by {} too",
                    manifest.display(),
                    provider.provider,
                    other.package
                ));
            }
            providers.push(provider);
        }
    }
    providers.sort_by(|a, b| a.provider.cmp(&b.provider));
    Ok(providers)
}

#[cfg(test)]
mod tests {

    /// The list a build script writes names each file's version and name and includes its SQL
    /// from its absolute path, in the order given.
    #[test]
    fn a_migration_list_includes_each_file_by_its_absolute_path() {
        let dir = std::env::temp_dir().join(format!("claimonce-list-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a folder");
        for file in ["V10001__b.sql", "V10000__a.sql"] {
            std::fs::write(dir.join(file), "SELECT 1;").expect("a file");
        }
        let files = migration_files(&dir).expect("read");
        let list = migration_list(&files).expect("a list");
        let absolute = dir.canonicalize().expect("a path");
        assert_eq!(
            list,
            format!(
                "&[\n    Migration {{ version: 10000, name: \"a\", sql: include_str!({:?}) }},\n    \
                 Migration {{ version: 10001, name: \"b\", sql: include_str!({:?}) }},\n]",
                absolute.join("V10000__a.sql").display().to_string(),
                absolute.join("V10001__b.sql").display().to_string()
            )
        );
        std::fs::remove_dir_all(&dir).expect("clean up");
    }

    use super::*;

    const MANIFEST: &str = r#"
[package]
name = "x-webhook"
provider = "not-this-one"

[package.metadata.claimonce]
# a comment
provider = "x"
secret_var = "X_WEBHOOK_SECRET" # the secrets
escaped = "a\"b"
literal = 'a "b"' # kept

[package.metadata.claimonce.deploy]
secret_var = "NOT_THIS_ONE"
retention = "never" # kept
eventbridge = true

[package.metadata.claimonce.samples]
"eventbridge/a.json" = "does `a`"

[[bin]]
name = "x-webhook"
path = "src/main.rs"

[[bin]]
name = "x-sign"

[workspace]
members = [
    "shared", # the core
    "functions/*",
]
"#;

    // Evaluated by the compiler: the const reader is what a function binary uses.
    const NAME: &str = provider_name(MANIFEST);

    #[test]
    fn a_value_is_read_from_its_own_table_only() {
        assert_eq!(NAME, "x");
        assert_eq!(
            entry_value(MANIFEST, "secret_var"),
            Some("X_WEBHOOK_SECRET")
        );
        assert_eq!(entry_value(MANIFEST, "retention"), None);
        assert_eq!(
            entry_value(MANIFEST, "escaped"),
            None,
            "escapes are not read"
        );
        assert_eq!(entry_value(MANIFEST, "literal"), Some("a \"b\""));
        assert_eq!(value(MANIFEST, DEPLOY, "retention"), Some("never"));
        assert_eq!(value(MANIFEST, DEPLOY, "provider"), None);
        assert_eq!(value(MANIFEST, "package", "name"), Some("x-webhook"));
        assert_eq!(
            table(MANIFEST, DEPLOY),
            [
                ("secret_var", "NOT_THIS_ONE"),
                ("retention", "never"),
                ("eventbridge", "true")
            ]
        );
        assert_eq!(
            table(MANIFEST, SAMPLES),
            [("eventbridge/a.json", "does `a`")]
        );
        assert_eq!(array_names(MANIFEST, "bin"), ["x-webhook", "x-sign"]);
        assert_eq!(
            bin_path(MANIFEST, "x-webhook").as_deref(),
            Some("src/main.rs")
        );
        assert_eq!(bin_path(MANIFEST, "x-sign"), None);
        assert_eq!(
            array(MANIFEST, "workspace", "members"),
            ["shared", "functions/*"]
        );
    }

    #[test]
    fn a_name_is_lower_case_letters_and_digits() {
        for good in ["stripe", "x", "s3"] {
            assert!(is_name(good), "{good}");
        }
        for bad in ["", "Stripe", "3s", "a-b", "a_b", "é"] {
            assert!(!is_name(bad), "{bad}");
        }
    }

    #[test]
    fn the_constructor_is_what_main_hands_to_run_from_env() {
        let main = "async fn main() -> std::process::ExitCode {\n    \
                    claimonce::run_from_env(\n        x_webhook::X::from_secret,\n    )\n    \
                    .await\n}\n";
        assert_eq!(
            constructor(main).as_deref(),
            Some("x_webhook::X::from_secret")
        );
        assert_eq!(constructor("fn main() {}"), None);
        assert_eq!(constructor("claimonce::run_from_env(|s| X::new(s))"), None);
    }

    #[test]
    fn a_migration_file_is_v_number_and_name() {
        assert_eq!(
            migration_file_name("V13__shopify_orders.sql"),
            Some((13, "shopify_orders"))
        );
        for other in [
            "schema.sql",
            "V13_shopify.sql",
            "Vx__a.sql",
            "V1__a.txt",
            "README.md",
        ] {
            assert_eq!(migration_file_name(other), None, "{other}");
        }
    }

    #[test]
    fn this_repository_s_providers_are_read_with_their_parts() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let providers = providers(&root).expect("the registry");
        let names: Vec<&str> = providers.iter().map(|p| p.provider.as_str()).collect();
        assert!(names.contains(&"stripe"), "{names:?}");
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(names, sorted, "in name order");
        let stripe = providers
            .iter()
            .find(|p| p.provider == "stripe")
            .expect("stripe");
        assert_eq!(stripe.package, "stripe-webhook");
        assert_eq!(stripe.binary, "stripe-webhook");
        assert_eq!(
            stripe.constructor.as_deref(),
            Some("stripe_webhook::Stripe::from_secret")
        );
        assert_eq!(stripe.require("secret_var"), Ok("STRIPE_WEBHOOK_SECRET"));
        assert_eq!(stripe.deploy("name"), Some("Stripe"));
        assert!(!stripe.samples.is_empty());
        let shopify = providers.iter().find(|p| p.provider == "shopify");
        let files = shopify.map(|p| p.migrations.len()).unwrap_or_default();
        assert!(files > 0, "shopify ships its migrations");
    }
}
