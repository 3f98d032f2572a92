//! When work must stop starting: a drain's batch, a recover run and a scheduled job each
//! start another unit only while their [`Budget`] allows it.

#[cfg(feature = "jobs")]
use std::time::SystemTime;
use std::time::{Duration, Instant};

/// When a job must stop starting new units of work.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    stop_at: Instant,
}

impl Budget {
    /// A budget that ends at `stop_at` (tests choose it freely).
    pub fn until(stop_at: Instant) -> Self {
        Self { stop_at }
    }

    #[cfg(feature = "jobs")]
    /// A budget that ends `margin` before the invocation's `deadline` (the Lambda context's
    /// deadline, a wall-clock time). The margin must cover the longest unit of work plus the
    /// report, so a unit started just before the budget ends still finishes in time.
    pub fn before_deadline(deadline: SystemTime, margin: Duration) -> Self {
        let left = deadline
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO)
            .saturating_sub(margin);
        Self {
            stop_at: Instant::now() + left,
        }
    }

    #[cfg(feature = "jobs")]
    /// True while another unit of work may start.
    pub fn allows_more(&self) -> bool {
        self.allows(Duration::ZERO)
    }

    /// True while a unit of work that may take `need` can still end within the budget.
    pub fn allows(&self, need: Duration) -> bool {
        Instant::now() + need < self.stop_at
    }

    #[cfg(feature = "jobs")]
    /// Time left in the budget.
    pub fn remaining(&self) -> Duration {
        self.stop_at.saturating_duration_since(Instant::now())
    }
}

#[cfg(all(test, feature = "jobs"))]
mod tests {
    use super::*;

    #[test]
    fn a_budget_ends_a_margin_before_the_deadline() {
        let deadline = SystemTime::now() + Duration::from_secs(60);
        let budget = Budget::before_deadline(deadline, Duration::from_secs(10));
        assert!(budget.allows_more());
        let left = budget.remaining();
        assert!(
            left <= Duration::from_secs(50) && left > Duration::from_secs(48),
            "{left:?}"
        );
        let spent = Budget::before_deadline(deadline, Duration::from_secs(90));
        assert!(!spent.allows_more());
        let past = Budget::before_deadline(SystemTime::UNIX_EPOCH, Duration::ZERO);
        assert!(!past.allows_more());
    }
}
