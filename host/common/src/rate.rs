//! One rate limiter, GCRA (the generic cell rate algorithm): a rate and a
//! burst held in one number, the theoretical arrival time of the next
//! event. [`Gcra`] keeps one per key (tenants' rate limits, the quarantine
//! pen's per-source bucket); [`Limiter`] one for a single stream (a sink's
//! log lines).

use std::collections::HashMap;
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::problem::Checker;

/// A rate limit as written in settings (`rate`, `burst`).
#[derive(Clone, Copy, Debug, PartialEq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Rate {
    /// Sustained events per second.
    #[serde(rename = "rate")]
    pub per_second: f64,
    /// Events allowed at once on top of the rate.
    pub burst: u32,
}

impl Rate {
    pub fn check(&self, c: &mut Checker) {
        c.rate(self.per_second, self.burst);
    }

    /// Charge one event at `now_ns` against the arrival time `tat` (`None`:
    /// none yet): `Err(wait)` when over, with how long until one would pass.
    fn charge(&self, tat: Option<u64>, now_ns: u64) -> Result<u64, Duration> {
        if self.per_second <= 0.0 {
            return Err(Duration::from_secs(1));
        }
        let interval = (1e9 / self.per_second) as u64;
        let tolerance = interval.saturating_mul(u64::from(self.burst.max(1) - 1));
        let current = tat.unwrap_or(now_ns).max(now_ns);
        let allow_at = current.saturating_sub(tolerance);
        if now_ns < allow_at {
            return Err(Duration::from_nanos(allow_at - now_ns));
        }
        Ok(current + interval)
    }
}

/// A limiter over many keys.
#[derive(Debug)]
pub struct Gcra {
    default: Rate,
    /// Keys with a rate of their own (set from config or at runtime).
    overrides: RwLock<HashMap<String, Rate>>,
    /// Key → theoretical arrival time (ns on the caller's clock).
    tat: Mutex<HashMap<String, u64>>,
}

impl Gcra {
    pub fn new(default: Rate, overrides: HashMap<String, Rate>) -> Gcra {
        Gcra { default, overrides: RwLock::new(overrides), tat: Mutex::new(HashMap::new()) }
    }

    /// The rate `key` is held to, and whether it is its own.
    pub fn rate_of(&self, key: &str) -> (Rate, bool) {
        match self.overrides.read().unwrap_or_else(|e| e.into_inner()).get(key) {
            Some(rate) => (*rate, true),
            None => (self.default, false),
        }
    }

    /// Give `key` a rate of its own, or (`None`) put it back on the default.
    pub fn set_rate(&self, key: &str, rate: Option<Rate>) {
        let mut overrides = self.overrides.write().unwrap_or_else(|e| e.into_inner());
        match rate {
            Some(rate) => overrides.insert(key.to_string(), rate),
            None => overrides.remove(key),
        };
    }

    /// Charge one request of `key` at `now_ns`: `Err(wait)` when over the
    /// limit, with how long until one would pass.
    pub fn check(&self, key: &str, now_ns: u64) -> Result<(), Duration> {
        let (rate, _) = self.rate_of(key);
        let mut tat = self.tat.lock().unwrap_or_else(|e| e.into_inner());
        let next = rate.charge(tat.get(key).copied(), now_ns)?;
        tat.insert(key.to_string(), next);
        // Keys whose arrival time has passed carry no state worth keeping.
        if tat.len() > 100_000 {
            tat.retain(|_, t| *t > now_ns);
        }
        Ok(())
    }
}

/// A limiter of one stream, on the monotonic clock.
#[derive(Debug)]
pub struct Limiter {
    rate: Rate,
    started: Instant,
    tat: Mutex<Option<u64>>,
}

impl Limiter {
    pub fn new(rate: Rate) -> Limiter {
        Limiter { rate, started: Instant::now(), tat: Mutex::new(None) }
    }

    /// Whether one more event may pass now (it is charged if so).
    pub fn try_take(&self) -> bool {
        let now_ns = self.started.elapsed().as_nanos() as u64;
        let mut tat = self.tat.lock().unwrap_or_else(|e| e.into_inner());
        match self.rate.charge(*tat, now_ns) {
            Ok(next) => {
                *tat = Some(next);
                true
            }
            Err(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn a_burst_then_the_rate() {
        let gcra = Gcra::new(Rate { per_second: 10.0, burst: 5 }, HashMap::new());
        let t0 = 1000 * S;
        for n in 0..5 {
            assert_eq!(gcra.check("acme", t0), Ok(()), "burst request {n}");
        }
        let wait = gcra.check("acme", t0).expect_err("over the burst");
        assert_eq!(wait, Duration::from_millis(100), "one interval at 10/s");
        assert_eq!(gcra.check("acme", t0 + S / 10), Ok(()));
        assert!(gcra.check("acme", t0 + S / 10).is_err());
        assert_eq!(gcra.check("other", t0), Ok(()), "keys are independent");
        // After a quiet second the full burst is back.
        for _ in 0..5 {
            assert_eq!(gcra.check("acme", t0 + 2 * S), Ok(()));
        }
    }

    #[test]
    fn overrides_and_zero_rates() {
        let overrides = HashMap::from([("vip".to_string(), Rate { per_second: 1000.0, burst: 100 })]);
        let gcra = Gcra::new(Rate { per_second: 1.0, burst: 1 }, overrides);
        assert!((0..100).all(|_| gcra.check("vip", S).is_ok()));
        assert!(gcra.check("small", S).is_ok());
        assert_eq!(gcra.check("small", S), Err(Duration::from_secs(1)));
        let closed = Gcra::new(Rate { per_second: 0.0, burst: 1 }, HashMap::new());
        assert!(closed.check("x", S).is_err());
    }

    #[test]
    fn a_stream_gets_its_burst_at_once_and_then_no_more_within_the_moment() {
        let limiter = Limiter::new(Rate { per_second: 1.0, burst: 200 });
        assert_eq!((0..300).filter(|_| limiter.try_take()).count(), 200);
    }
}
