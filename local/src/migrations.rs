//! The files in `migrations/`, compiled in, in the order they apply.

use claimonce::migrate::Migration;

macro_rules! migration {
    ($version:literal, $name:literal) => {
        Migration {
            version: $version,
            name: $name,
            sql: include_str!(concat!(
                "../../migrations/V",
                stringify!($version),
                "__",
                $name,
                ".sql"
            )),
        }
    };
}

/// Every migration of the project.
pub const ALL: &[Migration] = &[
    migration!(1, "ledger"),
    migration!(2, "stripe"),
    migration!(3, "resend"),
    migration!(4, "roles"),
];
