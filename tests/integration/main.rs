//! The integration suite: one binary, a module per feature.

mod boundary;
mod connection;
mod faults;
mod lambda;
mod migrations;
mod production_auth;
mod resend;
mod round_trips;
mod stripe;
