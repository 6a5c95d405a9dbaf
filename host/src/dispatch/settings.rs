//! `dispatch`: the dispatcher's settings, with their defaults and checks.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{BreakerPolicy, RetryPolicy};
use crate::problem::Checker;

/// `dispatch`: how many deliveries run at once, and what a failure costs.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct DispatchConfig {
    /// Deliveries running at once, all sinks together.
    pub concurrency: usize,
    /// Deliveries running at once per sink key.
    pub sink_concurrency: usize,
    /// Rows claimed per store batch.
    pub claim_batch: usize,
    /// Claimed rows (running or waiting for a slot) at most.
    pub max_inflight: usize,
    /// Bodies of claimed rows, in bytes, at most.
    pub max_inflight_bytes: u64,
    /// Rows waiting per key beyond this are parked, so one stuck sink
    /// cannot fill the window.
    #[serde(skip)]
    pub max_waiting_per_key: usize,
    /// Bounds every attempt (the runtime enforces it with epochs and an
    /// async timeout).
    #[serde(rename = "attempt_timeout_ms", with = "crate::settings::millis")]
    #[schema(value_type = u64)]
    pub attempt_timeout: Duration,
    pub retry: RetryPolicy,
    pub breaker: BreakerPolicy,
}

impl Default for DispatchConfig {
    fn default() -> Self {
        DispatchConfig {
            concurrency: 32,
            sink_concurrency: 8,
            claim_batch: 128,
            max_inflight: 4096,
            max_inflight_bytes: 128 << 20,
            max_waiting_per_key: 256,
            attempt_timeout: Duration::from_secs(30),
            retry: RetryPolicy::default(),
            breaker: BreakerPolicy::default(),
        }
    }
}

impl DispatchConfig {
    pub fn check(&self, c: &mut Checker) {
        c.within("concurrency", self.concurrency as u64, 1, 65_536);
        c.at_least("sink_concurrency", self.sink_concurrency as u64, 1);
        if self.concurrency >= 1 && self.sink_concurrency > self.concurrency {
            c.add(
                "sink_concurrency",
                format!(
                    "{} is above dispatch.concurrency ({}): one sink cannot use more",
                    self.sink_concurrency, self.concurrency
                ),
            );
        }
        c.within("claim_batch", self.claim_batch as u64, 1, 65_536);
        c.at_least("max_inflight", self.max_inflight as u64, self.claim_batch as u64);
        c.within_ms("attempt_timeout_ms", self.attempt_timeout, 1, 3_600_000);
        self.retry.check(&mut c.section("retry"));
        self.breaker.check(&mut c.section("breaker"));
    }
}
