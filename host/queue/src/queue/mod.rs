//! The durable queue: hooks and their delivery rows in the store.
//!
//! Owns the stored formats of envelopes ([`Envelope`]) and delivery rows
//! ([`DeliveryRow`]) and the commit path ([`Intake::enqueue`]): an acked
//! hook is in a synced batch together with its rows, their index entries,
//! its dedupe key and the counters that count them. Seqs are assigned only
//! by the writer, strictly increasing and never reused, across restarts.
//!
//! A delivery row is in exactly one state — due, inflight or dead — and
//! has exactly the index entries of that state; every transition is one
//! store batch, so no row is ever in two states or lost between them.
//!
//! [`Queue`] opens and closes it; each caller holds the handle of its job
//! (see `handles.rs`): the edge an [`Intake`] and the [`Pen`], dispatch
//! [`Deliveries`], replays [`DeadLetters`], the [`Pen`] and the
//! [`Archive`], tenant erases [`Tenants`], the fleet a [`Handover`]. Job
//! records are not the queue's: it lends its store to
//! [`crate::records::Records`]. Depends only on the store.

mod archive;
mod claim;
pub mod codec;
mod commit;
mod damage;
pub mod dedupe;
mod dlq;
mod due_floor;
mod durability;
pub mod envelope;
mod erasing;
mod error;
mod gaps;
mod gate;
mod handles;
pub mod handoff;
mod hasten;
mod hook_reads;
mod import;
mod intake;
mod lines;
mod open;
mod pending;
mod purge;
mod quarantine;
mod readiness;
mod ready;
mod recount;
mod recovery;
mod reply;
pub mod rows;
mod settings;
mod settle;
mod sweep;
mod tenants;
mod transitions;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::mpsc;

pub use archive::{Archived, archive_key_tenant};

/// The tenant of a source that names none.
pub const DEFAULT_TENANT: &str = "default";

pub use crate::store::keys::index::LineId;
pub use claim::ClaimDecision;
pub use damage::{SinkNames, named_keys, rebuild_index};
pub use dlq::{DeadEntry, DeadPage, DeadQuery, MAX_EXAMINED, SinkSelector};
pub use durability::{DurabilityError, SinkDurability, SourceDurability, WalMode, check_durable, validate_config};
pub use envelope::{Envelope, Verification, VerifyStatus};
pub use error::{QueueError, Refusal, Side};
pub use handles::{Archive, DeadLetters, Deliveries, Handover, Intake, Pen, Tenants};
pub use import::Imported;
pub use lines::HeldLine;
pub use open::{Engines, has_rows, rebuild};
pub use pending::{SourcePending, TenantPending};
pub use purge::{PURGE_CHUNK, PurgeCounts, PurgeKinds, PurgeStep};
pub use quarantine::{DEFAULT_PEN_BYTES, PenCopies, PenEntry, is_pen_key};
pub use readiness::NotReady;
pub use recount::{CounterDrift, Recount, rebuild_counters};
pub use reply::EntryReply;
pub use rows::{DeliveryRow, LastFailure, Line, RowState};
pub use settings::{
    ArchiveSettings, Clock, DEFAULT_DEDUPE_TTL_MS, DEFAULT_DISK_RESERVE_BYTES, DedupeSettings, QueueConfig,
    TenantsSettings, WalSettings,
};
pub use transitions::{FinalOutcome, OutcomeLog, Settlement};

use crate::store::keys::{counters, hooks};
use crate::store::{Cf, Scan, Store};
use commit::{Message, Prepared};

/// What became of one entry of an `enqueue` or `release`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntryOutcome {
    /// Durable, with its fresh seq.
    Committed(Envelope),
    /// Its dedupe key is live: the envelope of the hook that first had it.
    Duplicate(Envelope),
    /// Not written, and not acked.
    Refused(Refusal),
}

/// One hook to enqueue, with the sinks bound to its source at ack time.
#[derive(Clone, Debug)]
pub struct Entry {
    pub envelope: Envelope,
    /// (sink index, sink name).
    pub sinks: Vec<(u16, String)>,
    /// (sink index, its line) for each binding that delivers in order.
    pub lines: Vec<(u16, Line)>,
}

impl Entry {
    /// A hook for `sinks`, none of them ordered.
    pub fn new(envelope: Envelope, sinks: Vec<(u16, String)>) -> Entry {
        Entry { envelope, sinks, lines: Vec::new() }
    }
}

/// A call's entries as its caller prepared them.
struct Planned {
    entries: Vec<Prepared>,
    /// The commit epoch the dedupe prefetch read at.
    prefetch_epoch: u64,
    /// When the call was made: its rows are due then, its keys expire from
    /// then.
    now_ms: u64,
}

/// What `stats` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueStats {
    pub next_seq: u64,
    pub hooks: u64,
    pub deliveries: u64,
    pub disk_bytes: u64,
}

/// What the writer has done since the queue opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommitStats {
    /// WAL syncs that acked groups (`dual`: synced writes, one per group).
    pub commits: u64,
    /// Time those commits waited for the disk, µs in all.
    pub sync_micros: u64,
    /// Calls answered.
    pub calls: u64,
    /// Hooks committed.
    pub hooks: u64,
    /// `dual`: store flushes that let the intake log drop segments.
    pub checkpoints: u64,
}

/// The kinds of counters kept per tenant and per node.
/// `waiting` counts the pending rows of ordered keys waiting their turn
/// (behind their key's head, or its head moved up and not yet claimed),
/// `held` the dead heads that hold their key's line.
pub const COUNTER_KINDS: [&str; 8] =
    ["pending", "scheduled", "inflight", "dead", "bytes", "dedupe_keys", "waiting", "held"];

/// The counter key of `kind` for a tenant, or for the node.
pub use counters::counter as counter_key;

/// The queue's owner: it opens and closes the store and the writer thread.
/// Callers are given the handle of their job ([`Intake`], [`Deliveries`],
/// [`DeadLetters`], [`Pen`], [`Archive`], [`Tenants`], [`Handover`]);
/// the owner keeps the node-wide readings (stats, counters, readiness).
pub struct Queue {
    core: Arc<Core>,
    writer_thread: Option<std::thread::JoinHandle<()>>,
    /// Asks the writer to recover a failed store; stopped before it.
    recovery: Option<recovery::Recovery>,
}

/// What every handle shares. Public only as the target of the handles'
/// `Deref`: nothing in it is reachable outside the queue.
pub struct Core {
    store: Arc<dyn Store>,
    /// `None` once closed: a call then answers `Closed`.
    writer: std::sync::RwLock<Option<mpsc::Sender<Message>>>,
    stats: Arc<commit::WriterStats>,
    tenants: Arc<tenants::TenantBook>,
    config: QueueConfig,
    /// Serialises row transitions (see `transitions`).
    transitions: std::sync::Mutex<()>,
    /// Serialises the pen's cap check with its write.
    pen: std::sync::Mutex<()>,
    /// Counts the pen's writes, so its copies beyond this store are
    /// looked at only after a change (see `Handover::pen_changes`).
    pen_changes: std::sync::atomic::AtomicU64,
    /// Where claims start in the due index (see `due_floor::DueFloor`).
    due_floor: Arc<due_floor::DueFloor>,
    /// Ordered lines that may keep a skipped hook's id (see `gaps`).
    gaps: gaps::Gaps,
    /// Ordered lines' heads moved up and claimable, named in memory (see
    /// `ready`).
    ready: ready::ReadyHeads,
    /// Told of final outcomes once written (`fleet`: for takeovers).
    outcome_log: std::sync::OnceLock<Arc<dyn OutcomeLog>>,
    /// Names the sinks of rows made again from their hooks (see `damage`).
    sink_names: std::sync::OnceLock<Arc<dyn SinkNames>>,
    /// No due rows are handed out (see `pause_claims`).
    claims_paused: std::sync::atomic::AtomicBool,
    /// `fleet`: due rows are handed out, and attempts run, only within
    /// the last proof of the lease (see `prove_lease`).
    lease_proof: std::sync::Mutex<Option<gate::LeaseProof>>,
}

impl std::ops::Deref for Queue {
    type Target = Core;
    fn deref(&self) -> &Core {
        &self.core
    }
}

impl Core {
    /// The writer's inbox, while the queue is open.
    fn writer(&self) -> Result<mpsc::Sender<Message>, QueueError> {
        let writer = self.writer.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        writer.clone().ok_or(QueueError::Closed)
    }

    /// A node or tenant counter.
    fn count(&self, tenant: Option<&str>, kind: &str) -> Result<i64, QueueError> {
        Ok(self.store.counter(&counter_key(tenant, kind))?)
    }

    /// Stop taking calls: once the calls holding the inbox are sent, the
    /// writer drains what is queued and stops.
    fn stop_taking_calls(&self) {
        self.writer.write().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    }
}

/// Wall-clock unix milliseconds (due times, dead times, dedupe expiry).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl Queue {
    /// The job records (replays, erases, rate limits, runtime sources)
    /// kept in this queue's store.
    pub fn records(&self) -> crate::records::Records {
        crate::records::Records::new(self.store.clone())
    }

    pub fn config(&self) -> &QueueConfig {
        &self.core.config
    }

    /// Whether a handle of this queue is still held somewhere (the store
    /// stays open until the last one goes).
    pub fn handles_held(&self) -> bool {
        Arc::strong_count(&self.core) > 1
    }

    /// The queue mode's name, for boot banners and `check-config`.
    pub fn label(&self) -> &'static str {
        self.config.wal.label()
    }

    /// Committed envelopes with seq > `after_seq`, ascending.
    pub fn hooks(&self, after_seq: u64, limit: usize) -> Result<Vec<Envelope>, QueueError> {
        let from = hooks::hook(after_seq.saturating_add(1));
        let rows = self.store.scan(&Scan { cf: Cf::Hooks, from, to: None, reverse: false, limit })?;
        rows.into_iter()
            .map(|(key, value)| {
                let seq = hooks::parse(&key).ok_or_else(|| QueueError::Corrupt("hook key".into()))?;
                Envelope::decode(seq, &value).map_err(|e| QueueError::Corrupt(format!("hook {seq}: {e}")))
            })
            .collect()
    }

    /// A node or tenant counter.
    pub fn counter(&self, tenant: Option<&str>, kind: &str) -> Result<i64, QueueError> {
        self.count(tenant, kind)
    }

    /// `next_seq` (exact), hook and delivery counts (RocksDB estimates) and
    /// the bytes of SST and blob files.
    pub fn stats(&self) -> Result<QueueStats, QueueError> {
        let store = self.store.stats()?;
        Ok(QueueStats {
            next_seq: self.stats.next_seq.load(Ordering::Relaxed),
            hooks: store.estimated_hooks,
            deliveries: store.estimated_deliveries,
            disk_bytes: store.disk_bytes,
        })
    }

    /// When a commit last failed (unix ms), if ever: readiness reports a
    /// node whose store refused a write in the last seconds.
    pub fn last_commit_failure_ms(&self) -> Option<u64> {
        if self.stats.sync_failed.load(Ordering::Relaxed) {
            // Not a moment ago but for good: only a restart clears it.
            return Some(now_ms());
        }
        Some(self.stats.last_failure_ms.load(Ordering::Relaxed)).filter(|ms| *ms > 0)
    }

    pub fn commit_stats(&self) -> CommitStats {
        CommitStats {
            commits: self.stats.commits.load(Ordering::Relaxed),
            sync_micros: self.stats.sync_micros.load(Ordering::Relaxed),
            calls: self.stats.calls.load(Ordering::Relaxed),
            hooks: self.stats.hooks.load(Ordering::Relaxed),
            checkpoints: self.stats.checkpoints.load(Ordering::Relaxed),
        }
    }
}
