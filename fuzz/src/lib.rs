//! What the fuzz targets share: the two receivers, built as the functions build them, with the
//! local development secrets and a database that nothing can reach.
//!
//! Only a validly signed request gets as far as the database, and the fuzzer cannot forge a
//! signature; if an input ever did get there, it would meet a refused connection on port 1 and
//! answer 500, which `apigw_event` accepts.

use std::sync::LazyLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use claimonce::db::{Database, Settings, Timeouts};
use claimonce::log::{Captured, Log};
use claimonce::{Limits, Receiver};
use github_webhook::GitHub;
use resend_webhook::Resend;
use stripe_webhook::Stripe;

/// Stripe's local development secret (`dev_secret` in `functions/stripe/Cargo.toml`): the
/// sample events are signed with it.
pub const STRIPE_SECRET: &str = "whsec_claimonce_local_dev";
/// Resend's local development secret (`functions/resend/Cargo.toml`).
pub const RESEND_SECRET: &str = "whsec_Y2xhaW1vbmNlLWxvY2FsLWRldmVsb3BtZW50LWtleSE=";
/// GitHub's local development secret (`functions/github/Cargo.toml`).
pub const GITHUB_SECRET: &str = "claimonce-local-github-secret";
/// The signature tolerance the functions default to.
pub const TOLERANCE: u64 = 300;
/// Bodies above this are refused with 413; small, so that libFuzzer's inputs reach that path.
pub const MAX_BODY_BYTES: usize = 4096;

/// A closed port on loopback: a connection attempt is refused at once.
const UNREACHABLE_DATABASE: &str = "postgres://u@127.0.0.1:1/x?sslmode=disable";

/// Every receiver, and the log lines they wrote for the current input.
#[derive(Debug)]
pub struct Receivers {
    /// The Stripe function's receiver.
    pub stripe: Receiver<Stripe>,
    /// The Resend function's receiver.
    pub resend: Receiver<Resend>,
    /// The GitHub function's receiver.
    pub github: Receiver<GitHub>,
    log: Captured,
}

impl Receivers {
    /// Takes (and clears) what was logged since the last call, so memory stays flat over
    /// millions of runs.
    pub fn take_log(&self) -> Vec<String> {
        let mut lines = match self.log.lock() {
            Ok(lines) => lines,
            Err(poisoned) => poisoned.into_inner(),
        };
        std::mem::take(&mut *lines)
    }
}

fn database() -> Database {
    let ms = Duration::from_millis;
    let timeouts = Timeouts::new(ms(50), ms(100));
    let settings =
        Settings::from_url(UNREACHABLE_DATABASE, None, timeouts).expect("a plain-TCP URL is valid");
    Database::new(settings)
}

/// The receivers, built once per process.
pub static RECEIVERS: LazyLock<Receivers> = LazyLock::new(|| {
    let (log, captured) = Log::capture();
    let limits = Limits {
        max_body_bytes: MAX_BODY_BYTES,
    };
    Receivers {
        stripe: Receiver::new(
            Stripe::new(&[STRIPE_SECRET], TOLERANCE).expect("secret"),
            database(),
            limits.clone(),
            log.clone(),
        ),
        resend: Receiver::new(
            Resend::new(&[RESEND_SECRET], TOLERANCE).expect("secret"),
            database(),
            limits.clone(),
            log.clone(),
        ),
        github: Receiver::new(
            GitHub::new(&[GITHUB_SECRET]).expect("secret"),
            database(),
            limits,
            log,
        ),
        log: captured,
    }
});

/// The current time in unix seconds, as the receivers read it.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
