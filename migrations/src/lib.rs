//! The files in `migrations/`, compiled in, in the order they apply.
//!
//! A migration is never edited once it has been applied anywhere: the runner
//! ([`claimonce::migrate::apply`]) refuses a recorded migration whose SQL changed. A change is a
//! new file with the next number; the build script finds it, so [`ALL`] needs no edit.

use claimonce::migrate::Migration;

macro_rules! migration {
    ($version:literal, $name:literal) => {
        Migration {
            version: $version,
            name: $name,
            sql: include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/V",
                stringify!($version),
                "__",
                $name,
                ".sql"
            )),
        }
    };
}

/// Every migration of the project.
pub const ALL: &[Migration] = include!(concat!(env!("OUT_DIR"), "/all.rs"));

/// The newest version in [`ALL`]: what a fully migrated database records last.
pub fn latest() -> i32 {
    ALL.iter().map(|m| m.version).max().unwrap_or(0)
}
