//! Migration files: a `V<n>__<name>.sql` file's name, a folder of them, and the list a
//! build script writes for `include!`.

use std::path::{Path, PathBuf};

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

#[cfg(test)]
mod tests {
    use super::*;

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
