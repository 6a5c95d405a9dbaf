//! When a failed attempt is tried again, and when it is given up on.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error_class::ErrorClass;
use crate::problem::Checker;
use crate::settings::as_millis;

/// `Retry-After` is honoured up to this much.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// `dispatch.retry`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RetryPolicy {
    /// The first backoff; each next one is `factor` times longer.
    #[serde(rename = "initial_ms", with = "crate::settings::millis")]
    #[schema(value_type = u64)]
    pub initial: Duration,
    /// Each backoff is this many times the one before.
    pub factor: f64,
    /// The longest backoff.
    #[serde(rename = "max_ms", with = "crate::settings::millis")]
    #[schema(value_type = u64)]
    pub max: Duration,
    /// Attempts in all, the first included; then the row is dead.
    pub max_attempts: u32,
    /// Each backoff is scaled by a random factor in `1 ± jitter`.
    pub jitter: f64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            initial: Duration::from_millis(100),
            factor: 2.0,
            max: Duration::from_secs(300),
            max_attempts: 84,
            jitter: 0.2,
        }
    }
}

impl RetryPolicy {
    pub fn check(&self, c: &mut Checker) {
        c.at_least_ms("initial_ms", self.initial, 1);
        c.at_least("max_ms", as_millis(self.max), as_millis(self.initial));
        c.at_least("max_attempts", u64::from(self.max_attempts), 1);
        if !(self.factor.is_finite() && (1.0..=100.0).contains(&self.factor)) {
            c.add("factor", format!("{} is out of range: between 1 and 100", self.factor));
        }
        if !(self.jitter.is_finite() && (0.0..1.0).contains(&self.jitter)) {
            c.add("jitter", format!("{} is out of range: at least 0, below 1", self.jitter));
        }
    }
}

/// What to do with a row after an attempt failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Due again after this long.
    RetryIn(Duration),
    /// Dead now.
    GiveUp,
}

impl RetryPolicy {
    /// The backoff after the `attempts`-th failed attempt (1-based),
    /// before jitter.
    pub fn backoff(&self, attempts: u32) -> Duration {
        let exponent = attempts.saturating_sub(1).min(64) as i32;
        let secs = self.initial.as_secs_f64() * self.factor.powi(exponent);
        Duration::from_secs_f64(secs.min(self.max.as_secs_f64()))
    }

    /// Decide after the `attempts`-th attempt failed with `class`;
    /// `unit` in [0, 1) draws the jitter.
    pub fn next(&self, class: ErrorClass, retry_after: Option<Duration>, attempts: u32, unit: f64) -> Next {
        match class {
            ErrorClass::Permanent | ErrorClass::Denied | ErrorClass::Gone => return Next::GiveUp,
            ErrorClass::Transient | ErrorClass::RetryAfter | ErrorClass::Timeout | ErrorClass::Fault => {}
        }
        if attempts >= self.max_attempts {
            return Next::GiveUp;
        }
        let scale = 1.0 + self.jitter * (2.0 * unit - 1.0);
        let backoff = self.backoff(attempts).mul_f64(scale.max(0.0));
        match (class, retry_after) {
            (ErrorClass::RetryAfter, Some(asked)) => Next::RetryIn(asked.min(MAX_RETRY_AFTER).max(backoff)),
            _ => Next::RetryIn(backoff),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_its_cap_and_attempts_run_out() {
        let p = RetryPolicy { jitter: 0.0, ..RetryPolicy::default() };
        assert_eq!(p.backoff(1), Duration::from_millis(100));
        assert_eq!(p.backoff(2), Duration::from_millis(200));
        assert_eq!(p.backoff(5), Duration::from_millis(1600));
        assert_eq!(p.backoff(30), Duration::from_secs(300));
        assert_eq!(p.next(ErrorClass::Transient, None, 3, 0.5), Next::RetryIn(Duration::from_millis(400)));
        assert_eq!(p.next(ErrorClass::Timeout, None, 83, 0.5), Next::RetryIn(Duration::from_secs(300)));
        assert_eq!(p.next(ErrorClass::Fault, None, 84, 0.5), Next::GiveUp);
        for class in [ErrorClass::Permanent, ErrorClass::Denied, ErrorClass::Gone] {
            assert_eq!(p.next(class, None, 1, 0.5), Next::GiveUp);
        }
    }

    #[test]
    fn retry_after_is_a_floor_capped_at_an_hour() {
        let p = RetryPolicy { jitter: 0.0, ..RetryPolicy::default() };
        let asked = |d| p.next(ErrorClass::RetryAfter, Some(d), 1, 0.5);
        assert_eq!(asked(Duration::from_secs(2)), Next::RetryIn(Duration::from_secs(2)));
        assert_eq!(
            asked(Duration::from_millis(10)),
            Next::RetryIn(Duration::from_millis(100)),
            "never sooner than backoff"
        );
        assert_eq!(asked(Duration::from_secs(86_400)), Next::RetryIn(MAX_RETRY_AFTER));
        let jittered = RetryPolicy::default();
        let low = jittered.next(ErrorClass::Transient, None, 1, 0.0);
        let high = jittered.next(ErrorClass::Transient, None, 1, 0.999);
        assert_eq!(low, Next::RetryIn(Duration::from_millis(80)));
        assert!(matches!(high, Next::RetryIn(d) if d > Duration::from_millis(119)));
    }
}
