//! Provider discovery: what a registry entry is (its tables, its provider name) and every
//! provider crate of a project, read from the manifests of its workspace.

use std::path::{Path, PathBuf};

use crate::migrations::{MigrationFile, migration_files};
use crate::source::constructor;
use crate::toml::{array, array_names, bin_path, table, value};

/// The table that holds a crate's registry entry.
pub const ENTRY: &str = "package.metadata.claimonce";
/// What the SAM template says about a provider.
pub const DEPLOY: &str = "package.metadata.claimonce.deploy";
/// What each sample event under `events/<provider>/` does.
pub const SAMPLES: &str = "package.metadata.claimonce.samples";

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
    use super::*;

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
