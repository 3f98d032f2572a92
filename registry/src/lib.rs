//! The provider registry, read in one place.
//!
//! A provider crate's registry entry is the `[package.metadata.claimonce]` table of its
//! `Cargo.toml` (with `[package.metadata.claimonce.deploy]` and `.samples` beside it), and its
//! migrations are the `V<n>__<name>.sql` files of its `migrations/` folder. Everything that
//! needs them reads them through this crate:
//!
//! - a function binary, at compile time: [`provider_name`] and [`entry_value`] are `const`
//!   over the manifest its crate compiles in (`claimonce::prelude::Provider::MANIFEST`), so a missing
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

mod migrations;
mod provider;
mod source;
mod toml;

pub use migrations::{
    MigrationFile, embed_crate_migrations, migration_file_name, migration_files, migration_list,
};
pub use provider::{
    DEPLOY, ENTRY, Provider, SAMPLES, entry_value, is_name, provider_name, providers, read_manifest,
};
pub use toml::{Line, array, array_names, line_at, lines, table, value};
