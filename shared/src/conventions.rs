//! The two text conventions a provider crate follows, read here and by the migrations crate's
//! build script, which includes this file as it is (it uses nothing but `core`): a migration
//! file is named `V<n>__<name>.sql`, and a crate's registry entry is the
//! `[package.metadata.claimonce]` table of its `Cargo.toml`, written as `key = "value"` lines.

/// The version and name of a migration file named `V<n>__<name>.sql`; `None` for any other
/// name.
pub fn migration_file_name(file: &str) -> Option<(i32, &str)> {
    let (version, name) = file
        .strip_suffix(".sql")?
        .strip_prefix('V')?
        .split_once("__")?;
    Some((version.parse().ok()?, name))
}

/// The value of `key` in the `[package.metadata.claimonce]` table of a crate's manifest text:
/// only `key = "value"` lines are read (a comment may follow), which is how the entries are
/// written; other tables, and other shapes of line, are left alone.
pub fn registry_value<'a>(manifest: &'a str, key: &str) -> Option<&'a str> {
    table_value(manifest, "package.metadata.claimonce", key)
}

/// The value of `key` in the table `[<table>]` of a manifest's text (such as the registry
/// entry's `package.metadata.claimonce.deploy`), read as [`registry_value`] reads its own.
pub fn table_value<'a>(manifest: &'a str, table: &str, key: &str) -> Option<&'a str> {
    let mut in_table = false;
    for line in manifest.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix('[') {
            in_table = name.strip_suffix(']') == Some(table);
            continue;
        }
        let Some((k, value)) = line.split_once('=').filter(|_| in_table) else {
            continue;
        };
        if k.trim() == key
            && let Some((text, _)) = value
                .trim()
                .strip_prefix('"')
                .and_then(|v| v.split_once('"'))
        {
            return Some(text);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_read_from_its_own_table_only() {
        let manifest = "[package]\nname = \"x\"\n[package.metadata.claimonce]\n\
                        provider = \"x\"\n[package.metadata.claimonce.deploy]\n\
                        retention = \"never\" # kept\n";
        assert_eq!(registry_value(manifest, "provider"), Some("x"));
        assert_eq!(registry_value(manifest, "retention"), None);
        assert_eq!(
            table_value(manifest, "package.metadata.claimonce.deploy", "retention"),
            Some("never")
        );
        assert_eq!(
            table_value(manifest, "package.metadata.claimonce.deploy", "provider"),
            None
        );
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
}
