//! The files in `migrations/`, compiled in, in the order they apply. They live in the
//! `claimonce-migrations` crate (so the `migrate` Lambda function can carry them without this
//! crate's server code); this module keeps `claimonce_local::migrations::ALL` working.

pub use claimonce_migrations::{ALL, latest};
