//! The integration suite: one binary, a module per feature.

mod connection;
mod migrations;
mod resend;
mod stripe;
