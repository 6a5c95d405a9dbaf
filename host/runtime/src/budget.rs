//! A call's CPU deadline, counted in the guest's own running time.
//!
//! The epoch ticker advances the engine's epoch every `epoch_tick`; a
//! guest running past its epoch deadline calls back into the host, which
//! yields to the executor and counts the tick. A tick counts against the
//! call only when the guest ran through it: the epoch moved by exactly one
//! since the guest was last seen running. A guest that waited meanwhile,
//! for a core on a loaded machine, for the executor while other guests
//! ran, or in a host call, sees the epoch move by more and is not charged
//! for the wait. So a guest that loops is stopped after its own CPU time,
//! and a healthy one beside it never for time it spent waiting. (The
//! call's wall-clock bound is the pool's async timeout.)

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The engine's epoch as its ticker counts it, and how often it moves.
#[derive(Clone, Debug)]
pub struct EpochClock {
    ticks: Arc<AtomicU64>,
    tick: Duration,
}

impl EpochClock {
    pub fn new(tick: Duration) -> EpochClock {
        EpochClock { ticks: Arc::new(AtomicU64::new(0)), tick }
    }

    /// The ticks so far.
    pub fn now(&self) -> u64 {
        self.ticks.load(Ordering::Acquire)
    }

    /// One tick more; the ticker calls it just before it moves the
    /// engine's epoch, so a guest that sees the new epoch sees this too.
    pub fn advance(&self) {
        self.ticks.fetch_add(1, Ordering::AcqRel);
    }
}

/// The CPU time one call may still use, in ticks the guest ran through.
#[derive(Debug)]
pub struct CpuBudget {
    clock: EpochClock,
    left: u64,
    /// The tick the guest was last seen running at.
    seen: u64,
}

impl CpuBudget {
    pub fn new(clock: EpochClock) -> CpuBudget {
        CpuBudget { clock, left: 0, seen: 0 }
    }

    /// A new call, allowed `limit` of guest CPU time (at least a tick).
    pub fn start(&mut self, limit: Duration) {
        let tick = self.clock.tick.as_nanos().max(1);
        self.left = limit.as_nanos().div_ceil(tick).clamp(1, u128::from(u64::MAX)) as u64;
        self.seen = self.clock.now();
    }

    /// The guest, running, saw the epoch move: whether its time is up.
    pub fn ran(&mut self) -> bool {
        let now = self.clock.now();
        if now == self.seen.wrapping_add(1) {
            self.left = self.left.saturating_sub(1);
        }
        self.seen = now;
        self.left == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_ticks_the_guest_ran_through_are_charged() {
        let clock = EpochClock::new(Duration::from_millis(10));
        let mut budget = CpuBudget::new(clock.clone());
        budget.start(Duration::from_millis(30));
        // Running: each tick seen as it comes is charged.
        clock.advance();
        assert!(!budget.ran());
        clock.advance();
        assert!(!budget.ran());
        // Waiting (for a core, for the executor) across five ticks: the
        // tick it resumes on is not charged.
        for _ in 0..5 {
            clock.advance();
        }
        assert!(!budget.ran());
        clock.advance();
        assert!(budget.ran(), "the third tick it ran through ends it");
    }

    #[test]
    fn a_budget_is_at_least_a_tick_and_restarts_with_each_call() {
        let clock = EpochClock::new(Duration::from_millis(10));
        let mut budget = CpuBudget::new(clock.clone());
        budget.start(Duration::from_micros(1));
        clock.advance();
        assert!(budget.ran());
        budget.start(Duration::from_millis(20));
        clock.advance();
        assert!(!budget.ran(), "a new call has its own budget");
    }
}
