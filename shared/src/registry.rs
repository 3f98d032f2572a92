//! What a function binary reads from its provider's registry entry, the
//! `[package.metadata.claimonce]` table of the provider crate's `Cargo.toml`
//! ([`crate::prelude::Provider::MANIFEST`], compiled in), through [`claimonce_registry`], the one reader
//! of the registry: the provider's name (at compile time: [`crate::prelude::ProviderName::NAME`]), its
//! secret variable and where its sender's API is configured.

use crate::config::ConfigError;

/// What a function binary needs from its registry entry besides the provider's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// `secret_var`: the variable its signing secrets come from (or `<secret_var>_ARN`).
    pub secret_var: &'static str,
    /// `api_key_var`, `api_base_var` and `api_base`, when the provider completes events from
    /// its sender's API ([`crate::complete`]).
    pub api: Option<ApiEntry>,
}

/// Where a provider's sender API is configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiEntry {
    /// The variable holding its key (or `<var>_ARN`, a Secrets Manager secret).
    pub key_var: &'static str,
    /// The variable that may name another base URL (a test's stand-in).
    pub base_var: &'static str,
    /// The base URL otherwise.
    pub base: &'static str,
}

impl Entry {
    /// Reads the entry from a crate manifest's text.
    pub fn from_manifest(manifest: &'static str) -> Result<Self, ConfigError> {
        let optional = |key: &str| claimonce_registry::entry_value(manifest, key);
        let value = |key: &str| {
            optional(key).ok_or_else(|| {
                ConfigError::new(format!(
                    "the crate's manifest has no {key} in its [package.metadata.claimonce] table"
                ))
            })
        };
        let api = match optional("api_key_var") {
            None => None,
            Some(key_var) => Some(ApiEntry {
                key_var,
                base_var: value("api_base_var")?,
                base: value("api_base")?,
            }),
        };
        Ok(Self {
            secret_var: value("secret_var")?,
            api,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_names_its_variables_and_a_missing_one_is_named() {
        let manifest = "[package.metadata.claimonce]\nprovider = \"x\"\n\
                        secret_var = \"X_WEBHOOK_SECRET\"\napi_key_var = \"X_API_KEY\"\n\
                        api_base_var = \"X_API_BASE\"\napi_base = \"https://x.example\"\n";
        let entry = Entry::from_manifest(manifest).expect("an entry");
        assert_eq!(entry.secret_var, "X_WEBHOOK_SECRET");
        let api = entry.api.expect("an API");
        assert_eq!(
            (api.key_var, api.base_var, api.base),
            ("X_API_KEY", "X_API_BASE", "https://x.example")
        );
        let refused = Entry::from_manifest("[package]\nname = \"y\"\n").expect_err("no table");
        assert!(refused.to_string().contains("secret_var"), "{refused}");
        let half = "[package.metadata.claimonce]\nsecret_var = \"S\"\napi_key_var = \"K\"\n";
        let refused = Entry::from_manifest(half).expect_err("a key without its base");
        assert!(refused.to_string().contains("api_base_var"), "{refused}");
    }
}
