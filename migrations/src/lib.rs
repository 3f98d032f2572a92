//! The files in `migrations/` and in each provider's `functions/<provider>/migrations/`,
//! compiled in, in the order they apply.
//!
//! A migration is never edited once it has been applied anywhere: the runner
//! ([`claimonce::migrate::apply`]) refuses a recorded migration whose SQL changed. A change is a
//! new file with the next number; the build script finds it, so [`ALL`] needs no edit.

use claimonce::migrate::Migration;

/// Every migration of the project.
pub const ALL: &[Migration] = include!(concat!(env!("OUT_DIR"), "/all.rs"));

/// The newest version in [`ALL`]: what a fully migrated database records last.
pub fn latest() -> i32 {
    ALL.iter().map(|m| m.version).max().unwrap_or(0)
}
