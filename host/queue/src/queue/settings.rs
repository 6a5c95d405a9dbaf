//! The queue's settings: the `wal`, `dedupe`, `archive` and `tenants`
//! sections, and how they make the [`QueueConfig`] a queue opens with.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::WalMode;
use crate::problem::Checker;
use crate::settings::as_millis;

/// How long a dedupe key absorbs retries unless configured.
pub const DEFAULT_DEDUPE_TTL_MS: u64 = 72 * 3600 * 1000;

#[derive(Clone, Debug)]
pub struct QueueConfig {
    /// `disk` or `dual` (`none` runs no queue at all).
    pub wal: WalMode,
    /// `dual`: where the intake log lives (ideally another volume).
    pub intake_dir: Option<PathBuf>,
    /// `dual`: roll intake segments at this size.
    pub intake_segment_bytes: u64,
    /// `dual`: refuse new hooks while the intake log holds more.
    pub intake_max_bytes: u64,
    pub dedupe_ttl_ms: u64,
    pub dedupe_max_entries: Option<u64>,
    pub dedupe_max_entries_per_tenant: Option<u64>,
    pub tenants_max: Option<usize>,
    /// Keep every accepted hook this long for `archive` replays (no archive
    /// when absent).
    pub archive_retention_ms: Option<u64>,
    /// The store's live WAL at most (see [`StoreOptions::wal_max_bytes`]).
    pub store_wal_max_bytes: u64,
    /// Readiness fails while the store's filesystem has fewer free bytes
    /// (0: never on free space alone).
    pub disk_reserve_bytes: u64,
    /// Failures to inject into the store (fault tests only).
    pub store_faults: Option<Arc<crate::store::Faults>>,
    /// Where commits read the time (dedupe expiry, due times).
    pub clock: Clock,
}

/// The queue's wall clock: the system's, or one a test moves by hand.
#[derive(Clone, Debug, Default)]
pub enum Clock {
    #[default]
    System,
    /// Unix milliseconds, set by the test.
    Manual(Arc<std::sync::atomic::AtomicU64>),
}

impl Clock {
    /// A manual clock standing at `unix_ms`.
    pub fn manual(unix_ms: u64) -> Clock {
        Clock::Manual(Arc::new(std::sync::atomic::AtomicU64::new(unix_ms)))
    }

    pub fn now_ms(&self) -> u64 {
        match self {
            Clock::System => super::now_ms(),
            Clock::Manual(at) => at.load(Ordering::SeqCst),
        }
    }

    /// Move a manual clock forward (the system clock moves by itself).
    pub fn advance(&self, by_ms: u64) {
        if let Clock::Manual(at) = self {
            at.fetch_add(by_ms, Ordering::SeqCst);
        }
    }
}

/// The free space under the store below which a node is not ready.
pub const DEFAULT_DISK_RESERVE_BYTES: u64 = 128 << 20;

/// `wal`: where a hook is durable before it is acked.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct WalSettings {
    /// What an ack means: fsynced in this host's store (`disk`), also in an
    /// intake log (`dual`), confirmed by every sink (`none`), or also in a
    /// replicated JetStream stream (`fleet`).
    pub mode: WalMode,
    /// `dual`: the intake log's folder (default `<data_dir>/intake`);
    /// ideally on another volume.
    #[schema(value_type = Option<String>)]
    pub intake_dir: Option<PathBuf>,
    /// `dual`: roll intake segments at this size.
    pub intake_segment_bytes: u64,
    /// `dual`: refuse new hooks while the intake log holds more.
    pub intake_max_bytes: u64,
    /// The store's own write-ahead log at most: past it, the oldest log
    /// file is retired (its column families flushed) and reused. Bounds
    /// what a restart replays.
    pub store_wal_max_bytes: u64,
    /// `none`: every sink must confirm within this.
    #[serde(rename = "direct_deadline_ms", with = "crate::settings::millis")]
    #[schema(value_type = u64)]
    pub direct_deadline: Duration,
}

impl Default for WalSettings {
    fn default() -> Self {
        WalSettings {
            mode: WalMode::Disk,
            intake_dir: None,
            intake_segment_bytes: 64 << 20,
            intake_max_bytes: 4 << 30,
            store_wal_max_bytes: crate::store::DEFAULT_WAL_MAX_BYTES,
            direct_deadline: Duration::from_secs(8),
        }
    }
}

impl WalSettings {
    pub fn check(&self, c: &mut Checker) {
        c.at_least("intake_segment_bytes", self.intake_segment_bytes, 64 << 10);
        c.at_least("intake_max_bytes", self.intake_max_bytes, self.intake_segment_bytes);
        c.at_least("store_wal_max_bytes", self.store_wal_max_bytes, 64 << 10);
        c.within_ms("direct_deadline_ms", self.direct_deadline, 1, 600_000);
    }
}

/// `dedupe`: how long and how many dedupe keys are kept.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct DedupeSettings {
    /// How long a dedupe key absorbs retries.
    #[serde(rename = "ttl_ms", with = "crate::settings::millis")]
    #[schema(value_type = u64)]
    pub ttl: Duration,
    /// Dedupe keys the node holds at most (unbounded when absent); past it a
    /// new hook with a key is refused `429 dedupe_quota`.
    pub max_entries: Option<u64>,
    /// The same bound for each tenant.
    pub max_entries_per_tenant: Option<u64>,
}

impl Default for DedupeSettings {
    fn default() -> Self {
        DedupeSettings {
            ttl: Duration::from_millis(DEFAULT_DEDUPE_TTL_MS),
            max_entries: None,
            max_entries_per_tenant: None,
        }
    }
}

impl DedupeSettings {
    pub fn check(&self, c: &mut Checker) {
        c.at_least_ms("ttl_ms", self.ttl, 1_000);
    }
}

/// `archive`: every accepted hook kept for `archive` replays.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ArchiveSettings {
    /// Keep every accepted hook (in the same synced batch as its commit)
    /// for `archive` replays.
    pub enabled: bool,
    /// How long an archived hook is kept.
    #[serde(rename = "retention_ms", with = "crate::settings::millis")]
    #[schema(value_type = u64)]
    pub retention: Duration,
}

impl Default for ArchiveSettings {
    fn default() -> Self {
        ArchiveSettings { enabled: false, retention: Duration::from_secs(7 * 24 * 3600) }
    }
}

impl ArchiveSettings {
    pub fn check(&self, c: &mut Checker) {
        c.at_least_ms("retention_ms", self.retention, 60_000);
    }
}

/// `tenants`: how many may hold data at once.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct TenantsSettings {
    /// Tenants that may hold data at once (unbounded when absent).
    pub max: Option<usize>,
}

impl TenantsSettings {
    pub fn check(&self, c: &mut Checker) {
        if let Some(max) = self.max {
            c.at_least("max", max as u64, 1);
        }
    }
}

impl QueueConfig {
    /// What a queue opens with, from its sections (`intake_dir`: where
    /// `dual` keeps its log, resolved against the data directory).
    pub fn new(
        wal: &WalSettings,
        intake_dir: PathBuf,
        dedupe: &DedupeSettings,
        archive: &ArchiveSettings,
        tenants: &TenantsSettings,
        disk_reserve_bytes: u64,
    ) -> QueueConfig {
        QueueConfig {
            wal: wal.mode,
            intake_dir: (wal.mode == WalMode::Dual).then_some(intake_dir),
            intake_segment_bytes: wal.intake_segment_bytes,
            intake_max_bytes: wal.intake_max_bytes,
            dedupe_ttl_ms: as_millis(dedupe.ttl),
            dedupe_max_entries: dedupe.max_entries,
            dedupe_max_entries_per_tenant: dedupe.max_entries_per_tenant,
            tenants_max: tenants.max,
            archive_retention_ms: archive.enabled.then_some(as_millis(archive.retention)),
            store_wal_max_bytes: wal.store_wal_max_bytes,
            disk_reserve_bytes,
            store_faults: None,
            clock: Clock::System,
        }
    }
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig::new(
            &WalSettings::default(),
            PathBuf::new(),
            &DedupeSettings::default(),
            &ArchiveSettings::default(),
            &TenantsSettings::default(),
            DEFAULT_DISK_RESERVE_BYTES,
        )
    }
}
