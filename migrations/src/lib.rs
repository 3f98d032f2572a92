//! The files in `migrations/` (the shared migrations) and in each provider's own
//! `functions/<provider>/migrations/`, compiled in, in the order they apply.
//!
//! A migration is never edited once it has been applied anywhere: the runner
//! ([`claimonce::migrate::apply`]) refuses a recorded migration whose SQL changed. A change is a
//! new file with the next number; the build script finds it, so no list here needs an edit.
//!
//! **Versions.** Shared and provider migrations are one version sequence, and a run applies,
//! lowest version first, every migration of the deployment's set that is not yet recorded
//! ([`claimonce::migrate::sequence`] puts a set together and refuses a version taken twice).
//! This repository's migrations stay below 10000; a provider crate kept in another repository
//! numbers its own from 10000 up, so no release of claimonce takes one of its numbers, and its
//! migrations always run after the shared ones of the same release. A provider migration may
//! use what the shared migrations before it made; a shared migration never uses a provider's,
//! so a provider added to a deployment later gets its migrations applied then, after shared
//! ones with higher numbers.

use claimonce::migrate::Migration;

/// Every migration of this repository: the shared ones and every provider's.
pub const ALL: &[Migration] = include!(concat!(env!("OUT_DIR"), "/all.rs"));

/// The shared migrations: the ledger, the claim, the outbox, the roles, and the tables of the
/// providers that came before providers shipped their own (Stripe, Resend, GitHub).
pub const SHARED: &[Migration] = include!(concat!(env!("OUT_DIR"), "/shared.rs"));

/// Every provider crate of this repository, by provider name, in provider order, with its own
/// migrations (none for the providers whose tables are in [`SHARED`]).
pub const PROVIDERS: &[(&str, &[Migration])] = include!(concat!(env!("OUT_DIR"), "/providers.rs"));

/// The newest version in [`ALL`]: what a fully migrated database records last.
pub fn latest() -> i32 {
    ALL.iter().map(|m| m.version).max().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_is_the_shared_migrations_and_every_providers_in_one_sequence() {
        let mut joined: Vec<i32> = SHARED.iter().map(|m| m.version).collect();
        for (_, own) in PROVIDERS {
            joined.extend(own.iter().map(|m| m.version));
        }
        joined.sort_unstable();
        let all: Vec<i32> = ALL.iter().map(|m| m.version).collect();
        assert_eq!(joined, all);
        assert!(
            PROVIDERS
                .iter()
                .any(|(p, own)| *p == "shopify" && !own.is_empty())
        );
        assert!(all.iter().all(|v| *v < 10_000));
    }
}
