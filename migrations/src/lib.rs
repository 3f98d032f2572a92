//! The files in `migrations/`, compiled in, in the order they apply.
//!
//! A migration is never edited once it has been applied anywhere: the runner
//! ([`claimonce::migrate::apply`]) refuses a recorded migration whose SQL changed. A change is a
//! new file with the next number, added to [`ALL`].

use claimonce::migrate::Migration;

macro_rules! migration {
    ($version:literal, $name:literal) => {
        Migration {
            version: $version,
            name: $name,
            sql: include_str!(concat!("../V", stringify!($version), "__", $name, ".sql")),
        }
    };
}

/// Every migration of the project.
pub const ALL: &[Migration] = &[
    migration!(1, "ledger"),
    migration!(2, "stripe"),
    migration!(3, "resend"),
    migration!(4, "roles"),
    migration!(5, "outbox"),
    migration!(6, "delivery_functions"),
    migration!(7, "welcome_ties_and_grants"),
];

/// The newest version in [`ALL`]: what a fully migrated database records last.
pub fn latest() -> i32 {
    ALL.iter().map(|m| m.version).max().unwrap_or(0)
}
