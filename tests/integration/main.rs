//! The integration suite: one binary, a module per feature.

mod boundary;
mod connection;
mod lambda;
mod migrations;
mod resend;
mod round_trips;
mod stripe;
