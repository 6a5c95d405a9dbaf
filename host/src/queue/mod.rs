//! The durable queue: hooks and their delivery rows in the store.
//!
//! Owns the stored formats of envelopes ([`Envelope`]) and delivery rows
//! ([`DeliveryRow`]) and the commit path ([`Queue::enqueue`]): an acked
//! hook is in a synced batch together with its rows, their index entries,
//! its dedupe key and the counters that count them. Seqs are assigned only
//! by the writer, strictly increasing and never reused, across restarts.
//!
//! A delivery row is in exactly one state — due, inflight or dead — and
//! has exactly the index entries of that state; every transition is one
//! store batch, so no row is ever in two states or lost between them.
//!
//! Callers: the edge (enqueue), dispatch (row transitions), admin (DLQ,
//! stats). Depends only on the store.

pub mod codec;
pub mod dedupe;
mod dlq;
pub mod envelope;
pub mod rows;
mod transitions;
mod writer;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use thiserror::Error;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

pub use dlq::{DeadEntry, DeadPage, DeadQuery, MAX_EXAMINED};
pub use envelope::{Envelope, Verification};
pub use rows::{DeliveryRow, RowState};
pub use transitions::TenantPending;
pub use writer::DEFAULT_DEDUPE_TTL_MS;

use crate::store::keys::{KeyBuf, KeyReader};
use crate::store::{Cf, RocksStore, Scan, Store, StoreError, StoreOptions};

/// What became of one entry of an `enqueue`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntryOutcome {
    /// Durable, with its fresh seq.
    Committed(Envelope),
    /// Its dedupe key is live: the envelope of the hook that first had it.
    Duplicate(Envelope),
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum QueueError {
    /// The writer could not start the batch before the caller's deadline;
    /// nothing was written and no seq was consumed.
    #[error("deadline_exceeded")]
    DeadlineExceeded,
    /// The commit failed: nothing of the batch is acked.
    #[error("store_unavailable: {0}")]
    Store(String),
    /// A DLQ cursor this node did not issue.
    #[error("invalid_cursor")]
    InvalidCursor,
    /// A stored row does not decode.
    #[error("corrupt store: {0}")]
    Corrupt(String),
    /// The writer has stopped (the node is shutting down).
    #[error("the queue is closed")]
    Closed,
}

impl From<StoreError> for QueueError {
    fn from(e: StoreError) -> Self {
        QueueError::Store(e.to_string())
    }
}

/// One hook to enqueue, with the sinks bound to its source at ack time.
#[derive(Clone, Debug)]
pub struct Entry {
    pub envelope: Envelope,
    /// (sink index, component sha256).
    pub sinks: Vec<(u16, String)>,
}

/// What `stats` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueStats {
    pub next_seq: u64,
    pub hooks: u64,
    pub deliveries: u64,
    pub disk_bytes: u64,
}

#[derive(Clone, Debug)]
pub struct QueueConfig {
    pub dedupe_ttl_ms: u64,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig { dedupe_ttl_ms: DEFAULT_DEDUPE_TTL_MS }
    }
}

/// The counter key of `kind` for a tenant, or for the node.
pub fn counter_key(tenant: Option<&str>, kind: &str) -> Vec<u8> {
    match tenant {
        None => KeyBuf::new().tag(b'n').tail(kind.as_bytes()).build(),
        Some(t) => KeyBuf::new().tag(b't').short(t).tail(kind.as_bytes()).build(),
    }
}

pub struct Queue {
    store: Arc<RocksStore>,
    writer: mpsc::Sender<writer::Call>,
    writer_task: tokio::task::JoinHandle<()>,
    stats: Arc<writer::WriterStats>,
    config: QueueConfig,
    /// Serialises row transitions (see `transitions`).
    transitions: std::sync::Mutex<()>,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl Queue {
    /// Open (or create) the queue's store and start its writer. Must run
    /// inside a tokio runtime.
    pub fn open(path: &Path, config: QueueConfig) -> Result<Queue, QueueError> {
        let store = Arc::new(RocksStore::open(&StoreOptions::new(path))?);
        let next_seq = recover_next_seq(&store)?;
        let spawned = writer::spawn(store.clone(), next_seq, config.dedupe_ttl_ms);
        Ok(Queue {
            store,
            writer: spawned.calls,
            writer_task: spawned.task,
            stats: spawned.stats,
            config,
            transitions: std::sync::Mutex::new(()),
        })
    }

    /// Stop the writer after the calls already queued, and release the
    /// store (so it can be opened again, by this process or another).
    pub async fn close(self) {
        let Queue { store, writer, writer_task, .. } = self;
        drop(writer);
        let _ = writer_task.await;
        drop(store);
    }

    pub fn config(&self) -> &QueueConfig {
        &self.config
    }

    /// Commit `entries` durably in one synced batch (with whatever other
    /// calls the writer merges them with). `deadline` bounds only the wait
    /// for the writer to start: once started, the call waits for the
    /// commit's outcome. Dropping the future before the writer starts the
    /// batch withdraws the call; nothing of it is written.
    pub async fn enqueue(
        &self,
        entries: Vec<Entry>,
        deadline: Option<Instant>,
    ) -> Result<Vec<EntryOutcome>, QueueError> {
        let prepared = entries
            .into_iter()
            .map(|entry| writer::Prepared {
                encoded: entry.envelope.encode(),
                dedupe: entry.envelope.dedupe_key.as_deref().map(dedupe::stored_key),
                sinks: entry.sinks,
                envelope: entry.envelope,
            })
            .collect();
        let (reply, outcome) = oneshot::channel();
        let call = writer::Call { entries: prepared, deadline, now_ms: now_ms(), reply };
        self.writer.send(call).await.map_err(|_| QueueError::Closed)?;
        outcome.await.map_err(|_| QueueError::Closed)?
    }

    /// Committed envelopes with seq > `after_seq`, ascending.
    pub fn hooks(&self, after_seq: u64, limit: usize) -> Result<Vec<Envelope>, QueueError> {
        let from = KeyBuf::new().u64(after_seq.saturating_add(1)).build();
        let rows = self.store.scan(&Scan { cf: Cf::Hooks, from, to: None, reverse: false, limit })?;
        rows.into_iter()
            .map(|(key, value)| {
                let seq = KeyReader::new(&key).u64().ok_or_else(|| QueueError::Corrupt("hook key".into()))?;
                Envelope::decode(seq, &value).map_err(|e| QueueError::Corrupt(format!("hook {seq}: {e}")))
            })
            .collect()
    }

    /// A node or tenant counter.
    pub fn counter(&self, tenant: Option<&str>, kind: &str) -> Result<i64, QueueError> {
        Ok(self.store.counter(&counter_key(tenant, kind))?)
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

    /// (synced commits, calls committed) so far.
    pub fn commit_stats(&self) -> (u64, u64) {
        (self.stats.commits.load(Ordering::Relaxed), self.stats.calls.load(Ordering::Relaxed))
    }
}

/// `next_seq = max(stored marker, last hook key + 1)`: the marker covers
/// seqs whose hooks were since deleted, the scan covers a marker that is
/// behind (it never is after a clean commit, but costs nothing to check).
fn recover_next_seq(store: &RocksStore) -> Result<u64, QueueError> {
    let marker = store.seq_marker()?.unwrap_or(1);
    let after_last = match store.last_key(Cf::Hooks)? {
        Some(key) => KeyReader::new(&key).u64().ok_or_else(|| QueueError::Corrupt("hook key".into()))? + 1,
        None => 1,
    };
    Ok(marker.max(after_last))
}
