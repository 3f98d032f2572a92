//! Named fault points: each step of a way in where a fault can strike, declared once below
//! with the ways in that reach it. The tests' sweep tries every point with every fault
//! (`tests/integration/sweep.rs`), so a point joins it by being declared here.
//!
//! A point does something only in a build with the `faults` feature, which only the tests'
//! builds of the function binaries turn on, and only when `CLAIMONCE_FAULTS` arms it:
//! `point=fault[;point=fault...]`, each fault fired at the point's first hit in the process,
//! then disarmed (the sender's retry then meets no fault); or
//! `storm:SEED:ERROR:PANIC:KILL:DELAY:MS`, which draws at every hit of every point an `error`,
//! a `panic`, a `kill` or a `delay:MS`, each at its rate in hits per 10,000, and never
//! disarms (the tests' storm). The faults:
//!
//! | fault | what happens at the point |
//! | --- | --- |
//! | `error` | the step fails as a genuine failure of the delivery would |
//! | `panic` | the step panics |
//! | `kill` | the process ends at once, as a killed one does (`abort`: no destructor runs) |
//! | `delay:MS` | the step waits MS milliseconds first (past a deadline) |
//! | `hold:PATH` | the step connects to the Unix socket PATH, writes the point's name and a newline, and waits for one byte (or the socket's end): the test does what it must meanwhile (stop the database) and releases it |
//!
//! Without the feature `hit` is an empty function and the variable is never read: no
//! release binary carries a fault (the CI checks the shipped binaries for the variable's
//! name).

/// A way a delivery reaches a point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Way {
    /// An API Gateway request.
    Webhook,
    /// A spilled delivery, from the spill queue's batch.
    Drain,
    /// An EventBridge event, from the event queue's batch.
    EventBridge,
    /// The outbox relay's scheduled run.
    Relay,
    /// The retention sweep's scheduled run.
    Retention,
    /// stripe-recover's scheduled run: events listed from the sender's API, applied.
    Recover,
}

macro_rules! points {
    ($( $(#[$doc:meta])* $point:ident = $name:literal, rust_effect: $rust:literal, ways: [$($way:ident),*]; )*) => {
        /// A named step where a fault can strike.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum Point {
            $( $(#[$doc])* $point, )*
        }

        impl Point {
            /// Every point, in the order declared.
            pub const ALL: &'static [Point] = &[$(Point::$point),*];

            /// Its name in `CLAIMONCE_FAULTS`.
            pub const fn name(self) -> &'static str {
                match self { $(Point::$point => $name,)* }
            }

            /// The ways in that reach it.
            pub const fn ways(self) -> &'static [Way] {
                match self { $(Point::$point => &[$(Way::$way),*],)* }
            }

            /// True when only a delivery whose effect is Rust reaches it.
            pub const fn needs_rust_effect(self) -> bool {
                match self { $(Point::$point => $rust,)* }
            }
        }
    };
}

points! {
    /// Admitted (verified and parsed), before the event is completed and claimed.
    Admitted = "admitted", rust_effect: false, ways: [Webhook, Drain, EventBridge, Recover];
    /// On the connection, before the claim's statement is sent.
    ClaimSend = "claim.send", rust_effect: false, ways: [Webhook, Drain, EventBridge, Recover];
    /// The claim won on its transaction, before the Rust effect runs.
    ClaimWon = "claim.won", rust_effect: true, ways: [Webhook, Drain, EventBridge];
    /// After each statement of a Rust effect, before its next (or its return).
    EffectStatement = "effect.statement", rust_effect: true, ways: [Webhook, Drain, EventBridge];
    /// The effect done, before `COMMIT` is sent.
    CommitSend = "commit.send", rust_effect: true, ways: [Webhook, Drain, EventBridge];
    /// The statement or the `COMMIT` answered, before the connection goes back.
    Committed = "committed", rust_effect: false, ways: [Webhook, Drain, EventBridge, Recover];
    /// The delivery settled, before it is answered.
    Answer = "answer", rust_effect: false, ways: [Webhook, Drain, EventBridge];
    /// The database unavailable, before the delivery is sent to the spill queue.
    SpillSend = "spill.send", rust_effect: false, ways: [Webhook];
    /// A queue's batch, before each record after the first.
    DrainRecord = "drain.record", rust_effect: false, ways: [Drain, EventBridge];
    /// An event queue's batch, before SQS is asked to prove its records' receipts.
    ReceiptProof = "receipt.proof", rust_effect: false, ways: [EventBridge];
    /// An outbox row claimed by the relay's batch, before it is sent.
    RelaySend = "relay.send", rust_effect: false, ways: [Relay];
    /// The relay's batch sent, before its rows are marked and committed.
    RelayMark = "relay.mark", rust_effect: false, ways: [Relay];
    /// The retention sweep's cutoff read from the database's clock, before its first batch.
    RetentionClock = "retention.clock", rust_effect: false, ways: [Retention];
    /// The retention sweep between two of its batches.
    RetentionBatch = "retention.batch", rust_effect: false, ways: [Retention];
    /// An event a recover run listed and found unclaimed, before it is applied.
    RecoverApply = "recover.apply", rust_effect: false, ways: [Recover];
}

/// A fault the step was told to fail with (`error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Injected(pub Point);

impl std::fmt::Display for Injected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "an injected fault at {}", self.0.name())
    }
}

/// The step at `point` is reached: fires its fault when one is armed. Public for the jobs'
/// crates, whose steps are points too.
#[cfg(not(feature = "faults"))]
#[inline(always)]
pub async fn hit(_point: Point) -> Result<(), Injected> {
    Ok(())
}

/// The step at `point` is reached: fires its fault when one is armed. Public for the jobs'
/// crates, whose steps are points too.
#[cfg(feature = "faults")]
#[allow(clippy::panic, reason = "a panic is one of the faults a test arms")]
pub async fn hit(point: Point) -> Result<(), Injected> {
    let fault = armed::take(point);
    if let Some(fault) = &fault {
        // The proof that it fired, before it does (a killed process writes nothing after).
        crate::log::Log::stdout().write(
            crate::log::Level::Warn,
            "fault injected",
            crate::log::fields! { point: point.name(), fault: fault.name() },
        );
    }
    match fault {
        None => Ok(()),
        Some(armed::Fault::Error) => Err(Injected(point)),
        Some(armed::Fault::Panic) => panic!("an injected panic at {}", point.name()),
        Some(armed::Fault::Kill) => std::process::abort(),
        Some(armed::Fault::Delay(ms)) => {
            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
            Ok(())
        }
        Some(armed::Fault::Hold(path)) => {
            armed::hold(&path, point).await;
            Ok(())
        }
    }
}

// Only in the tests' builds: a variable the test wrote wrong stops the binary at once.
#[cfg(feature = "faults")]
#[allow(clippy::panic, reason = "a wrongly armed point is the test's mistake")]
mod armed {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock, PoisonError};

    use super::Point;

    pub(super) enum Fault {
        Error,
        Panic,
        Kill,
        Delay(u64),
        Hold(String),
    }

    impl Fault {
        pub(super) fn name(&self) -> &'static str {
            match self {
                Fault::Error => "error",
                Fault::Panic => "panic",
                Fault::Kill => "kill",
                Fault::Delay(_) => "delay",
                Fault::Hold(_) => "hold",
            }
        }
    }

    /// The variable that arms the points.
    const VAR: &str = "CLAIMONCE_FAULTS";

    /// What `CLAIMONCE_FAULTS` arms: faults at named points, each fired once, or a storm.
    enum Armed {
        Points(HashMap<Point, Fault>),
        Storm(Storm),
    }

    /// Faults drawn at random at every hit: the rates of `error`, `panic`, `kill` and `delay`
    /// in hits per 10,000, the delay's milliseconds, and the generator's state.
    struct Storm {
        rates: [u64; 4],
        delay_ms: u64,
        state: u64,
    }

    impl Storm {
        /// `SEED:ERROR:PANIC:KILL:DELAY:MS`; each process draws its own sequence from the seed.
        fn parse(spec: &str) -> Self {
            let numbers: Vec<u64> = spec
                .split(':')
                .map(|n| {
                    n.parse()
                        .unwrap_or_else(|_| panic!("{VAR}: {n:?} in a storm is not a number"))
                })
                .collect();
            let [seed, error, panic, kill, delay, delay_ms] = numbers[..] else {
                panic!("{VAR}: a storm is storm:SEED:ERROR:PANIC:KILL:DELAY:MS");
            };
            Self {
                rates: [error, panic, kill, delay],
                delay_ms,
                state: (seed ^ u64::from(std::process::id()).rotate_left(32)) | 1,
            }
        }

        /// The fault this hit meets, if any (xorshift64*: a test's randomness, not a secret's).
        fn draw(&mut self) -> Option<Fault> {
            self.state ^= self.state >> 12;
            self.state ^= self.state << 25;
            self.state ^= self.state >> 27;
            let mut roll = self.state.wrapping_mul(0x2545_F491_4F6C_DD1D) % 10_000;
            for (n, rate) in self.rates.iter().enumerate() {
                if roll < *rate {
                    return Some(match n {
                        0 => Fault::Error,
                        1 => Fault::Panic,
                        2 => Fault::Kill,
                        _ => Fault::Delay(self.delay_ms),
                    });
                }
                roll -= rate;
            }
            None
        }
    }

    fn read() -> Armed {
        let Ok(text) = std::env::var(VAR) else {
            return Armed::Points(HashMap::new());
        };
        if let Some(spec) = text.strip_prefix("storm:") {
            return Armed::Storm(Storm::parse(spec));
        }
        let mut armed = HashMap::new();
        for entry in text.split(';').filter(|e| !e.is_empty()) {
            let (name, fault) = entry
                .split_once('=')
                .unwrap_or_else(|| panic!("{VAR}: {entry:?} is not point=fault"));
            let point = Point::ALL
                .iter()
                .copied()
                .find(|p| p.name() == name)
                .unwrap_or_else(|| panic!("{VAR}: no fault point is named {name:?}"));
            let fault = match fault.split_once(':') {
                None if fault == "error" => Fault::Error,
                None if fault == "panic" => Fault::Panic,
                None if fault == "kill" => Fault::Kill,
                Some(("delay", ms)) => Fault::Delay(
                    ms.parse()
                        .unwrap_or_else(|_| panic!("{VAR}: {ms:?} is not milliseconds")),
                ),
                Some(("hold", path)) => Fault::Hold(path.to_owned()),
                _ => panic!("{VAR}: {fault:?} is not a fault"),
            };
            armed.insert(point, fault);
        }
        Armed::Points(armed)
    }

    /// The fault armed at `point`, disarmed as it is taken; in a storm, the one drawn.
    pub(super) fn take(point: Point) -> Option<Fault> {
        static ARMED: OnceLock<Mutex<Armed>> = OnceLock::new();
        let mut armed = ARMED
            .get_or_init(|| Mutex::new(read()))
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match &mut *armed {
            Armed::Points(points) => points.remove(&point),
            Armed::Storm(storm) => storm.draw(),
        }
    }

    /// Tells the test at `path` that `point` is reached and waits until it answers.
    pub(super) async fn hold(path: &str, point: Point) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let Ok(mut socket) = tokio::net::UnixStream::connect(path).await else {
            panic!("{VAR}: nothing listens on the hold socket");
        };
        let said = format!("{}\n", point.name());
        if socket.write_all(said.as_bytes()).await.is_ok() {
            let mut released = [0u8; 1];
            let _ = socket.read(&mut released).await;
        }
    }
}
