//! Pieces the fault suites share (the integration suite's and each provider crate's): a
//! replayable generator for storms, and the wait for a delivery held at a test's gate.

use std::time::Duration;

use crate::TestDb;

/// A tiny deterministic generator, so a failing storm can be replayed.
#[derive(Debug)]
pub struct XorShift(pub u64);

impl XorShift {
    /// The next number.
    fn step(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.step() % n
    }

    /// Shuffles `items` in place (Fisher-Yates, drawing from this generator).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = usize::try_from(self.below(u64::try_from(i + 1).expect("n"))).expect("j");
            items.swap(i, j);
        }
    }
}

/// Waits until `n` backends of `db` wait on a lock, one of them on an advisory lock (the
/// test's gate); returns the pid of the one at the gate.
pub async fn at_the_gate(db: &TestDb, n: i64) -> i32 {
    let admin = db.client().await;
    for _ in 0..2000 {
        let row = admin
            .query_one(
                "SELECT count(*), max(pid) FILTER (WHERE wait_event = 'advisory') \
                 FROM pg_stat_activity WHERE datname = $1 AND wait_event_type = 'Lock'",
                &[&db.name],
            )
            .await
            .expect("activity");
        if let (count, Some(pid)) = (row.get::<_, i64>(0), row.get::<_, Option<i32>>(1))
            && count == n
        {
            return pid;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no delivery reached the gate");
}
