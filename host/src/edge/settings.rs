//! The edge's settings: the `http`, `rate_limits` and `quarantine`
//! sections, and what the edge is started with.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::batcher::BatcherConfig;
use super::rate::Rate;
use crate::problem::Checker;
use crate::queue::{DEFAULT_PEN_BYTES, WalSettings};

/// The default limit on a request head.
pub const DEFAULT_MAX_HEADER_BYTES: usize = 64 << 10;
/// The smallest head limit: hyper's read buffer cannot be smaller.
pub const MIN_MAX_HEADER_BYTES: usize = 8 << 10;

/// What the edge is started with.
#[derive(Clone, Debug)]
pub struct EdgeConfig {
    pub http: HttpSettings,
    /// Each tenant's rate, charged after verification.
    pub rate_limits: RateLimits,
    /// The pen and each source's bucket into it.
    pub quarantine: QuarantineSettings,
    /// `wal.mode: none`: the deadline for all sinks together.
    pub direct_deadline: Duration,
    pub batcher: BatcherConfig,
}

impl Default for EdgeConfig {
    fn default() -> Self {
        EdgeConfig::new(
            HttpSettings::default(),
            RateLimits::default(),
            QuarantineSettings::default(),
            &WalSettings::default(),
            BatcherConfig::default(),
        )
    }
}

impl EdgeConfig {
    /// The edge's settings with the `wal` section's direct deadline.
    pub fn new(
        http: HttpSettings,
        rate_limits: RateLimits,
        quarantine: QuarantineSettings,
        wal: &WalSettings,
        batcher: BatcherConfig,
    ) -> EdgeConfig {
        EdgeConfig { http, rate_limits, quarantine, direct_deadline: wal.direct_deadline, batcher }
    }
}

/// `http`: where providers POST hooks, and what a request may be.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct HttpSettings {
    /// Where providers POST hooks.
    #[schema(value_type = String)]
    pub listen: SocketAddr,
    /// Bodies larger than this are refused (`413`), before reading when
    /// `Content-Length` says so.
    pub max_body_bytes: u64,
    /// A request head (request line and headers) over this is refused
    /// `431` before it is parsed; at least 8 KiB.
    pub max_header_bytes: usize,
    /// A client must send its request head within this...
    #[serde(rename = "header_timeout_ms", with = "crate::settings::millis")]
    #[schema(value_type = u64)]
    pub header_timeout: Duration,
    /// ... and its body within this.
    #[serde(rename = "body_timeout_ms", with = "crate::settings::millis")]
    #[schema(value_type = u64)]
    pub body_timeout: Duration,
    /// Also serve `/webhooks/{tenant}/{source}`.
    pub tenant_routing: bool,
}

impl Default for HttpSettings {
    fn default() -> Self {
        HttpSettings {
            listen: SocketAddr::from(([0, 0, 0, 0], 4000)),
            max_body_bytes: 8 << 20,
            max_header_bytes: DEFAULT_MAX_HEADER_BYTES,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            tenant_routing: false,
        }
    }
}

impl HttpSettings {
    pub fn check(&self, c: &mut Checker) {
        c.at_least("max_body_bytes", self.max_body_bytes, 1);
        c.within("max_header_bytes", self.max_header_bytes as u64, MIN_MAX_HEADER_BYTES as u64, 16 << 20);
        c.at_least_ms("header_timeout_ms", self.header_timeout, 1);
        c.at_least_ms("body_timeout_ms", self.body_timeout, 1);
    }
}

/// `rate_limits`: each tenant's rate, charged after verification.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RateLimits {
    /// Every tenant's limit unless named below.
    pub default: Rate,
    pub tenants: BTreeMap<String, Rate>,
}

impl Default for RateLimits {
    fn default() -> Self {
        RateLimits { default: Rate { per_second: 5_000.0, burst: 10_000 }, tenants: BTreeMap::new() }
    }
}

impl RateLimits {
    pub fn check(&self, c: &mut Checker) {
        self.default.check(&mut c.section("default"));
        for (tenant, limit) in &self.tenants {
            let mut at = c.section(&format!("tenants.{tenant}"));
            if !crate::source::valid_tenant(tenant) {
                at.add("", "a tenant id is 1-64 of A-Z a-z 0-9 _ -");
            }
            limit.check(&mut at);
        }
    }
}

/// `quarantine`: the pen for hooks whose signature failed.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct QuarantineSettings {
    /// The pen's size; when full, new entries are refused, never evicted.
    pub max_bytes: u64,
    /// Each source's admission rate into the pen.
    pub rate: f64,
    /// Entries admitted at once on top of the rate.
    pub burst: u32,
}

impl Default for QuarantineSettings {
    fn default() -> Self {
        QuarantineSettings { max_bytes: DEFAULT_PEN_BYTES, rate: 20.0, burst: 100 }
    }
}

impl QuarantineSettings {
    pub fn rate(&self) -> Rate {
        Rate { per_second: self.rate, burst: self.burst }
    }

    pub fn check(&self, c: &mut Checker) {
        c.rate(self.rate, self.burst);
        c.at_least("max_bytes", self.max_bytes, 1);
    }
}
