//! The writer's counters: what it committed and synced, the epoch callers
//! prefetch at, and whether the store failed under it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of the writer, for metrics and tests.
#[derive(Debug, Default)]
pub struct WriterStats {
    /// WAL syncs that acked groups (one per synced write in `dual` mode).
    pub commits: AtomicU64,
    /// Time spent making those commits durable (the WAL syncs, or in
    /// `dual` mode the synced writes), µs.
    pub sync_micros: AtomicU64,
    /// Calls committed.
    pub calls: AtomicU64,
    /// Hooks committed.
    pub hooks: AtomicU64,
    /// The seq the next committed hook gets.
    pub next_seq: AtomicU64,
    /// Commits made visible; callers note it before their prefetch.
    pub epoch: AtomicU64,
    /// Intake log checkpoints (store flushed, old segments deleted).
    pub checkpoints: AtomicU64,
    /// When a commit last failed (unix ms; 0: never), for readiness.
    pub last_failure_ms: AtomicU64,
    /// A WAL sync failed: the store refuses commits until it recovers.
    pub sync_failed: std::sync::atomic::AtomicBool,
    /// A store write failed: commits go on being tried, and the store is
    /// reopened once the disk takes writes again (a full disk leaves the
    /// engine refusing writes until then).
    pub write_failed: std::sync::atomic::AtomicBool,
    /// Notified after each commit with hooks (wakes dispatch).
    pub committed: Arc<tokio::sync::Notify>,
    /// `fleet`: hooks perhaps in the intake log and not in the store.
    pub unsettled: AtomicU64,
}

impl WriterStats {
    /// A commit's write or WAL sync failed and the store has not recovered.
    pub(crate) fn failed(&self) -> bool {
        self.sync_failed.load(Ordering::Acquire) || self.write_failed.load(Ordering::Acquire)
    }

    /// `hooks` are durable: count them and wake dispatch.
    pub(crate) fn count_durable(&self, hooks: u64) {
        self.hooks.fetch_add(hooks, Ordering::Relaxed);
        if hooks > 0 {
            self.committed.notify_one();
        }
    }

    /// A commit that acks groups took `took` to reach the disk.
    pub(crate) fn count_commit(&self, took: std::time::Duration, hooks: u64) {
        self.commits.fetch_add(1, Ordering::Relaxed);
        self.sync_micros.fetch_add(u64::try_from(took.as_micros()).unwrap_or(u64::MAX), Ordering::Relaxed);
        let metrics = crate::metrics::metrics();
        metrics.commit_seconds.observe(took.as_secs_f64());
        metrics.commit_group_hooks.observe(hooks as f64);
    }
}
