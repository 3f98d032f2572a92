//! A provider crate's registry entry, the `[package.metadata.claimonce]` table of its
//! `Cargo.toml`: the one place its secret variable and provider name are written. The local
//! run, the harness and `scripts/template` read it with `cargo metadata`; the function binary
//! reads it from its own manifest, compiled in (`include_str!("../Cargo.toml")`), so `main.rs`
//! names neither.

use crate::config::ConfigError;

/// What a function binary needs from its registry entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// `provider`: the ledger namespace, which the provider's `name()` must return.
    pub provider: &'static str,
    /// `secret_var`: the variable its signing secrets come from (or `<secret_var>_ARN`).
    pub secret_var: &'static str,
    /// `api_key_var`, `api_base_var` and `api_base`, when the provider completes events from
    /// its sender's API ([`crate::fetch`]).
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
    /// Reads the entry from a crate manifest's text ([`crate::conventions::registry_value`]).
    pub fn from_manifest(manifest: &'static str) -> Result<Self, ConfigError> {
        let value = |key: &str| {
            crate::conventions::registry_value(manifest, key).ok_or_else(|| {
                ConfigError::new(format!(
                    "the crate's manifest has no {key} in its [package.metadata.claimonce] table"
                ))
            })
        };
        let optional = |key: &str| crate::conventions::registry_value(manifest, key);
        let api = match optional("api_key_var") {
            None => None,
            Some(key_var) => Some(ApiEntry {
                key_var,
                base_var: value("api_base_var")?,
                base: value("api_base")?,
            }),
        };
        Ok(Self {
            provider: value("provider")?,
            secret_var: value("secret_var")?,
            api,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_is_read_from_its_table_only() {
        let manifest = r#"
[package]
name = "x-webhook"
provider = "not-this-one"

[package.metadata.claimonce]
# a comment
provider = "x"
secret_var = "X_WEBHOOK_SECRET" # the secrets
scheme = "body-hmac-sha256"

[package.metadata.claimonce.deploy]
secret_var = "NOT_THIS_ONE"
"#;
        let entry = Entry::from_manifest(manifest).expect("an entry");
        assert_eq!(entry.provider, "x");
        assert_eq!(entry.secret_var, "X_WEBHOOK_SECRET");
        let refused = Entry::from_manifest("[package]\nname = \"y\"\n").expect_err("no table");
        assert!(refused.to_string().contains("provider"), "{refused}");
    }
}
