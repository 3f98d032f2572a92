//! The integration suite: one binary, a module per feature.

mod boundary;
mod concurrent;
mod connection;
mod docs;
mod eventbridge;
mod faults;
mod gate;
mod lambda;
mod layers;
mod migrate_fn;
mod migrations;
mod new_crate;
mod observability;
mod outbox;
mod production_auth;
mod recover;
mod resend;
mod retention;
mod round_trips;
mod runbook;
mod sam;
mod spill;
mod storm;
mod stripe;
mod sweep;
mod thin;
