//! A circuit breaker per sink key (source, sink index): after enough
//! consecutive failures the key is open and its rows are parked (attempts
//! unchanged) until a probe may go; a failed probe reopens it for twice as
//! long, up to a cap; a success closes it.
//!
//! Only the probe's failure reopens an open breaker. Attempts that were
//! already running when it opened fail too, but they say nothing new about
//! the destination: each one doubling the wait would take the breaker to
//! its cap within milliseconds.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::problem::Checker;
use crate::settings::as_millis;

/// `dispatch.breaker`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct BreakerPolicy {
    /// Consecutive non-permanent failures that open a sink's breaker.
    pub failures: u32,
    /// How long it stays open first ...
    #[serde(rename = "open_ms", with = "crate::settings::millis")]
    #[schema(value_type = u64)]
    pub open_for: Duration,
    /// ... and at most, doubling after each failed probe.
    #[serde(rename = "max_open_ms", with = "crate::settings::millis")]
    #[schema(value_type = u64)]
    pub max_open_for: Duration,
}

impl Default for BreakerPolicy {
    fn default() -> Self {
        BreakerPolicy { failures: 5, open_for: Duration::from_secs(30), max_open_for: Duration::from_secs(300) }
    }
}

impl BreakerPolicy {
    pub fn check(&self, c: &mut Checker) {
        c.at_least("failures", u64::from(self.failures), 1);
        c.at_least_ms("open_ms", self.open_for, 1);
        c.at_least("max_open_ms", as_millis(self.max_open_for), as_millis(self.open_for));
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Closed {
        failures: u32,
    },
    /// Rows wait until `until_ms`; the next opening lasts `next_ms`.
    Open {
        until_ms: u64,
        next_ms: u64,
    },
    /// One probe is running.
    HalfOpen {
        next_ms: u64,
    },
}

/// A state change worth a log line and a metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    Opened { for_ms: u64 },
    Probing,
    Closed,
}

#[derive(Clone, Debug)]
pub struct Breaker {
    state: State,
}

impl Default for Breaker {
    fn default() -> Self {
        Breaker { state: State::Closed { failures: 0 } }
    }
}

impl Breaker {
    pub fn state(&self) -> State {
        self.state
    }

    /// May a row of this key start at `now_ms`? `Err(until)` parks it.
    /// An open breaker whose time is up lets exactly one probe through.
    pub fn admit(&mut self, now_ms: u64) -> Result<Option<Transition>, u64> {
        match self.state {
            State::Closed { .. } => Ok(None),
            State::Open { until_ms, next_ms } if now_ms >= until_ms => {
                self.state = State::HalfOpen { next_ms };
                Ok(Some(Transition::Probing))
            }
            State::Open { until_ms, .. } => Err(until_ms),
            // The probe's outcome decides; until then, wait a little.
            State::HalfOpen { .. } => Err(now_ms + 1000),
        }
    }

    pub fn succeeded(&mut self) -> Option<Transition> {
        let was_closed = matches!(self.state, State::Closed { .. });
        self.state = State::Closed { failures: 0 };
        (!was_closed).then_some(Transition::Closed)
    }

    /// A non-permanent failure (a permanent one says nothing of the
    /// destination's health: it refused that one hook). `probe`: the
    /// attempt was the one the half-open breaker let through.
    pub fn failed(&mut self, policy: &BreakerPolicy, now_ms: u64, probe: bool) -> Option<Transition> {
        let first = policy.open_for.as_millis() as u64;
        let cap = policy.max_open_for.as_millis() as u64;
        match self.state {
            State::Closed { failures } if failures + 1 >= policy.failures => {
                self.state = State::Open { until_ms: now_ms + first, next_ms: (first * 2).min(cap) };
                Some(Transition::Opened { for_ms: first })
            }
            State::Closed { failures } => {
                self.state = State::Closed { failures: failures + 1 };
                None
            }
            State::HalfOpen { next_ms } if probe => {
                self.state = State::Open { until_ms: now_ms + next_ms, next_ms: (next_ms * 2).min(cap) };
                Some(Transition::Opened { for_ms: next_ms })
            }
            // An attempt that was running before the breaker opened.
            State::HalfOpen { .. } | State::Open { .. } => None,
        }
    }

    /// The probe ended without an outcome (its row went elsewhere): the
    /// next row may probe at once.
    pub fn probe_lost(&mut self, now_ms: u64) {
        if let State::HalfOpen { next_ms } = self.state {
            self.state = State::Open { until_ms: now_ms, next_ms };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_five_probes_after_the_wait_and_doubles() {
        let policy = BreakerPolicy::default();
        let mut b = Breaker::default();
        for _ in 0..4 {
            assert_eq!(b.failed(&policy, 0, false), None);
        }
        assert_eq!(b.failed(&policy, 0, false), Some(Transition::Opened { for_ms: 30_000 }));
        assert_eq!(b.admit(29_999), Err(30_000), "parked while open");
        assert_eq!(b.admit(30_000), Ok(Some(Transition::Probing)));
        assert!(b.admit(30_001).is_err(), "one probe at a time");
        assert_eq!(b.failed(&policy, 31_000, true), Some(Transition::Opened { for_ms: 60_000 }));
        assert_eq!(b.admit(91_000), Ok(Some(Transition::Probing)));
        assert_eq!(b.succeeded(), Some(Transition::Closed));
        assert_eq!(b.admit(91_001), Ok(None));
        let mut long = Breaker { state: State::HalfOpen { next_ms: 300_000 } };
        assert_eq!(long.failed(&policy, 0, true), Some(Transition::Opened { for_ms: 300_000 }));
        assert_eq!(long.state(), State::Open { until_ms: 300_000, next_ms: 300_000 }, "capped at 5 min");
    }

    #[test]
    fn failures_of_attempts_running_when_it_opened_do_not_lengthen_it() {
        let policy = BreakerPolicy::default();
        let mut b = Breaker::default();
        for _ in 0..5 {
            b.failed(&policy, 1_000, false);
        }
        assert_eq!(b.state(), State::Open { until_ms: 31_000, next_ms: 60_000 });
        // Eight more attempts were in flight when it opened; they fail now.
        for _ in 0..8 {
            assert_eq!(b.failed(&policy, 1_002, false), None, "an in-flight failure is absorbed");
        }
        assert_eq!(b.state(), State::Open { until_ms: 31_000, next_ms: 60_000 }, "still 30 s, not the cap");
        assert_eq!(b.admit(31_000), Ok(Some(Transition::Probing)));
        // A late in-flight failure while the probe runs is not the probe's.
        assert_eq!(b.failed(&policy, 31_001, false), None);
        assert_eq!(b.failed(&policy, 31_500, true), Some(Transition::Opened { for_ms: 60_000 }));
        assert_eq!(b.state(), State::Open { until_ms: 91_500, next_ms: 120_000 });
    }

    #[test]
    fn a_lost_probe_lets_the_next_row_probe() {
        let mut b = Breaker { state: State::HalfOpen { next_ms: 60_000 } };
        assert!(b.admit(5).is_err(), "one probe at a time");
        b.probe_lost(10);
        assert_eq!(b.admit(10), Ok(Some(Transition::Probing)));
    }
}
