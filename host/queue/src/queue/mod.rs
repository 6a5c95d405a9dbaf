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

mod archive;
pub mod codec;
mod commit;
mod damage;
pub mod dedupe;
mod dlq;
mod durability;
pub mod envelope;
mod error;
mod gate;
pub mod handoff;
mod hasten;
mod import;
mod open;
mod pending;
mod purge;
mod quarantine;
mod readiness;
mod records;
mod recount;
mod recovery;
mod reply;
pub mod rows;
mod settings;
mod settle;
mod tenants;
mod transitions;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

pub use archive::{Archived, archive_key_tenant};

/// The tenant of a source that names none.
pub const DEFAULT_TENANT: &str = "default";

pub use damage::{named_keys, rebuild_index};
pub use dlq::{DeadEntry, DeadPage, DeadQuery, MAX_EXAMINED, SinkSelector};
pub use durability::{DurabilityError, SinkDurability, SourceDurability, WalMode, check_durable, validate_config};
pub use envelope::{Envelope, Verification, VerifyStatus};
pub use error::{QueueError, Refusal, Side};
pub use import::Imported;
pub use open::{Engines, has_rows, rebuild};
pub use pending::{SourcePending, TenantPending};
pub use purge::{PURGE_CHUNK, PurgeCounts, PurgeKinds, PurgeStep};
pub use quarantine::{DEFAULT_PEN_BYTES, PenEntry, is_pen_key};
pub use readiness::NotReady;
pub use records::record_write;
pub use recount::{CounterDrift, Recount, rebuild_counters};
pub use reply::EntryReply;
pub use rows::{DeliveryRow, LastFailure, RowState};
pub use settings::{
    ArchiveSettings, Clock, DEFAULT_DEDUPE_TTL_MS, DEFAULT_DISK_RESERVE_BYTES, DedupeSettings, QueueConfig,
    TenantsSettings, WalSettings,
};
pub use transitions::{ClaimDecision, FinalOutcome, OutcomeLog, Settlement};

use crate::store::keys::{self, counters, deliveries, hooks};
use crate::store::{Batch, Cf, Scan, Store};
use commit::{Call, Kind, Logged, Message, Prepared};
use reply::Reply;

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
pub const COUNTER_KINDS: [&str; 6] = ["pending", "scheduled", "inflight", "dead", "bytes", "dedupe_keys"];

/// The counter key of `kind` for a tenant, or for the node.
pub use counters::counter as counter_key;

pub struct Queue {
    store: Arc<dyn Store>,
    /// `None` only while closing.
    writer: Option<mpsc::Sender<Message>>,
    writer_thread: Option<std::thread::JoinHandle<()>>,
    stats: Arc<commit::WriterStats>,
    tenants: Arc<tenants::TenantBook>,
    config: QueueConfig,
    /// Serialises row transitions (see `transitions`).
    transitions: std::sync::Mutex<()>,
    /// Serialises the pen's cap check with its write.
    pen: std::sync::Mutex<()>,
    /// Where claims start in the due index (see `transitions::DueFloor`).
    due_floor: Arc<transitions::DueFloor>,
    /// Asks the writer to recover a failed store; stopped before it.
    recovery: Option<recovery::Recovery>,
    /// Told of final outcomes once written (`fleet`: for takeovers).
    outcome_log: std::sync::OnceLock<Arc<dyn OutcomeLog>>,
    /// No due rows are handed out (see `pause_claims`).
    claims_paused: std::sync::atomic::AtomicBool,
    /// `fleet`: due rows are handed out only before this instant, which
    /// each proof of the lease moves on (see `prove_claims_until`).
    claims_until: std::sync::Mutex<Option<std::time::Instant>>,
}

/// Wall-clock unix milliseconds (due times, dead times, dedupe expiry).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl Queue {
    fn writer(&self) -> Result<&mpsc::Sender<Message>, QueueError> {
        self.writer.as_ref().ok_or(QueueError::Closed)
    }

    pub fn config(&self) -> &QueueConfig {
        &self.config
    }

    /// The queue mode's name, for boot banners and `check-config`.
    pub fn label(&self) -> &'static str {
        self.config.wal.label()
    }

    /// Prepare a call's entries: every piece of work that needs no seq,
    /// done here in the caller so the writer only assigns seqs and keys.
    /// Each hook is encoded, with one encoded delivery row per sink (due
    /// now, carrying `replay_id`), and its dedupe key is prefetched, noting
    /// the commit epoch the read saw.
    fn prepare(&self, entries: Vec<Entry>, dedupe: bool, replay_id: Option<&str>) -> Result<Planned, QueueError> {
        let prefetch_epoch = self.stats.epoch.load(Ordering::Acquire);
        let now_ms = self.config.clock.now_ms();
        let stored: Vec<Option<String>> = entries
            .iter()
            .map(|e| e.envelope.dedupe_key.as_deref().filter(|_| dedupe).map(dedupe::stored_key))
            .collect();
        let keys: Vec<Vec<u8>> = entries
            .iter()
            .zip(&stored)
            .filter_map(|(e, s)| {
                s.as_ref().map(|s| keys::dedupe::entry(&e.envelope.tenant_id, &e.envelope.source_id, s))
            })
            .collect();
        let mut found = if keys.is_empty() {
            Vec::new()
        } else {
            damage::absent_if_damaged(self.store.multi_get_each(Cf::Dedupe, &keys)?)?
        }
        .into_iter();
        let entries = entries
            .into_iter()
            .zip(stored)
            .map(|(Entry { envelope, sinks }, dedupe)| {
                let prefetched = match dedupe {
                    Some(_) => found.next().flatten().and_then(|v| dedupe::Original::decode(&v).ok()),
                    None => None,
                };
                let rows_of_hook = u16::try_from(sinks.len()).unwrap_or(0);
                let rows = sinks
                    .into_iter()
                    .map(|(sink, sink_name)| {
                        let row = DeliveryRow {
                            seq: 0,
                            sink,
                            tenant: envelope.tenant_id.clone(),
                            source: envelope.source_id.clone(),
                            sink_name,
                            bytes: envelope.size(),
                            attempts: 0,
                            replay_id: replay_id.map(str::to_string),
                            state: RowState::Due { due_at: now_ms },
                            rows_of_hook,
                            last_failure: None,
                        };
                        // The row's value holds neither its seq nor its sink:
                        // they are its key, which the writer makes.
                        (sink, row.encode())
                    })
                    .collect();
                Prepared {
                    encoded: envelope.encode(),
                    envelope,
                    rows,
                    dedupe,
                    prefetched,
                    msg_id: None,
                    logged: Logged::Not,
                }
            })
            .collect();
        Ok(Planned { entries, prefetch_epoch, now_ms })
    }

    async fn call(
        &self,
        kind: Kind,
        planned: Planned,
        extra: Batch,
        deadline: Option<Instant>,
    ) -> Result<Vec<EntryOutcome>, QueueError> {
        let (reply, outcome) = oneshot::channel();
        let Planned { entries, prefetch_epoch, now_ms } = planned;
        let reply = Reply::Call(reply);
        self.hand_over(Call { kind, entries, extra, deadline, now_ms, prefetch_epoch, reply }).await;
        outcome.await.map_err(|_| QueueError::Closed)?
    }

    /// Queue `call` for the writer; its reply hears the outcome, or that
    /// the queue is closed.
    async fn hand_over(&self, call: Call) {
        let sent = match self.writer() {
            Ok(writer) => writer.send(Message::Commit(call)).await,
            Err(e) => return call.reply.send(Err(e)),
        };
        if let Err(mpsc::error::SendError(Message::Commit(call))) = sent {
            call.reply.send(Err(QueueError::Closed));
        }
    }

    /// Commit `entries` durably in one synced batch (with whatever other
    /// calls the writer merges them with). `deadline` bounds only the wait
    /// for the writer to start: once started, the call waits for the
    /// commit's outcome. Dropping the future before the writer starts the
    /// batch withdraws the call (`caller_gone`); nothing of it is written.
    pub async fn enqueue(
        &self,
        entries: Vec<Entry>,
        deadline: Option<Instant>,
    ) -> Result<Vec<EntryOutcome>, QueueError> {
        let planned = self.prepare(entries, true, None)?;
        self.call(Kind::Enqueue, planned, Batch::new(), deadline).await
    }

    /// `enqueue` for callers that each wait for their own entry. The call
    /// is queued for the writer and this returns at once; each entry's
    /// reply is answered with its outcome by whichever thread learns it
    /// (once durable, refused or found a duplicate). Every reply is called
    /// once, or dropped unanswered if the queue closes first. Unlike a
    /// dropped `enqueue`, an entry whose waiter left is still committed.
    pub async fn enqueue_each(&self, entries: Vec<(Entry, EntryReply)>, deadline: Option<Instant>) {
        let (entries, replies): (Vec<_>, Vec<_>) = entries.into_iter().unzip();
        let reply = Reply::Each(replies);
        let Planned { entries, prefetch_epoch, now_ms } = match self.prepare(entries, true, None) {
            Ok(planned) => planned,
            Err(e) => return reply.send(Err(e)),
        };
        let call = Call { kind: Kind::Enqueue, entries, extra: Batch::new(), deadline, now_ms, prefetch_epoch, reply };
        self.hand_over(call).await;
    }

    /// Commit archived hooks again with fresh seqs and `replay_id` on their
    /// rows, with `extra` (the job's cursor) in the same synced batch. No
    /// dedupe, no quotas. Returns how many were committed (a tenant being
    /// erased gets none).
    pub async fn redrive(&self, entries: Vec<Entry>, replay_id: &str, extra: Batch) -> Result<usize, QueueError> {
        let planned = self.prepare(entries, false, Some(replay_id))?;
        let outcomes = self.call(Kind::Redrive, planned, extra, None).await?;
        Ok(outcomes.iter().filter(|o| matches!(o, EntryOutcome::Committed(_))).count())
    }

    /// Commit hooks out of the quarantine pen: `enqueue`'s semantics plus
    /// `replay_id`, with `extra` (the pen deletes, the job's cursor) in the
    /// same synced batch, even when every entry is a duplicate. A tenant or
    /// quota refusal refuses the whole call: nothing commits.
    pub async fn release(
        &self,
        entries: Vec<Entry>,
        replay_id: &str,
        extra: Batch,
    ) -> Result<Vec<EntryOutcome>, QueueError> {
        let planned = self.prepare(entries, true, Some(replay_id))?;
        self.call(Kind::Release, planned, extra, None).await
    }

    /// Delete up to `limit` dedupe keys that expired by `now_ms`; returns
    /// how many. Run in the background; each call is one batch.
    pub async fn sweep_dedupe(&self, now_ms: u64, limit: usize) -> Result<usize, QueueError> {
        let (reply, answer) = oneshot::channel();
        self.writer()?.send(Message::Sweep { now_ms, limit, reply }).await.map_err(|_| QueueError::Closed)?;
        answer.await.map_err(|_| QueueError::Closed)?
    }

    /// Sweep expired dedupe keys (and archived hooks past their retention)
    /// every `every` until the queue closes, in batches of 10 000 (each
    /// one write through the writer).
    pub fn sweep_in_background(queue: Arc<Queue>, every: std::time::Duration) -> tokio::task::JoinHandle<()> {
        const BATCH: usize = 10_000;
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                loop {
                    match queue.sweep_dedupe(queue.config.clock.now_ms(), BATCH).await {
                        Ok(removed) if removed == BATCH => continue,
                        Ok(_) => break,
                        Err(QueueError::Closed) => return,
                        Err(e) => {
                            tracing::warn!("dedupe sweep failed (tried again later): {e}");
                            break;
                        }
                    }
                }
                if let Some(retention) = queue.config.archive_retention_ms {
                    let sweeping = queue.clone();
                    let before = queue.config.clock.now_ms().saturating_sub(retention);
                    match tokio::task::spawn_blocking(move || sweeping.sweep_archive(before)).await {
                        Ok(Ok(0)) => {}
                        Ok(Ok(removed)) => tracing::info!(removed, "archived hooks past their retention dropped"),
                        Ok(Err(e)) => tracing::warn!("archive sweep failed (tried again later): {e}"),
                        Err(_) => return,
                    }
                }
            }
        })
    }

    /// Mark (or unmark) `tenant` as being erased. Once this returns, no
    /// commit admits a new hook of the tenant (`tenant_erasing`).
    pub async fn set_erasing(&self, tenant: &str, erasing: bool) -> Result<(), QueueError> {
        let (reply, answer) = oneshot::channel();
        let message = Message::SetErasing { tenant: tenant.into(), erasing, reply };
        self.writer()?.send(message).await.map_err(|_| QueueError::Closed)?;
        answer.await.map_err(|_| QueueError::Closed)?
    }

    /// Tenants being erased (a crash mid-erase resumes them on boot).
    pub fn erasing_tenants(&self) -> Vec<String> {
        self.tenants.erasing()
    }

    /// The node's undelivered rows (due, scheduled or inflight) and dead
    /// rows, from its counters.
    pub fn node_levels(&self) -> Result<(i64, i64), QueueError> {
        let count = |kind| self.store.counter(&counter_key(None, kind));
        Ok((count("pending")? + count("scheduled")? + count("inflight")?, count("dead")?))
    }

    /// Distinct tenants holding data on the node.
    pub fn tenants_holding(&self) -> usize {
        self.tenants.holding()
    }

    /// The ids of the tenants holding data on the node.
    pub fn tenants_holding_ids(&self) -> Vec<String> {
        self.tenants.holding_list()
    }

    /// The last step of an erase: drop a tenant that holds no rows (its
    /// dedupe keys, counters and place under `tenants.max`). Returns the
    /// dedupe keys removed.
    pub async fn forget_tenant(&self, tenant: &str) -> Result<u64, QueueError> {
        let (reply, answer) = oneshot::channel();
        self.writer()?.send(Message::Forget { tenant: tenant.into(), reply }).await.map_err(|_| QueueError::Closed)?;
        answer.await.map_err(|_| QueueError::Closed)?
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

    /// Every delivery row of hook `seq`, by sink index.
    pub fn rows_of_hook(&self, seq: u64) -> Result<Vec<DeliveryRow>, QueueError> {
        let rows = self.store.scan(&Scan::prefix(Cf::Deliveries, &deliveries::of_hook(seq), u16::MAX as usize + 1))?;
        rows.into_iter()
            .map(|(key, value)| {
                let (seq, sink) = deliveries::parse(&key).ok_or_else(|| QueueError::Corrupt("delivery key".into()))?;
                DeliveryRow::decode(seq, sink, &value)
                    .map_err(|e| QueueError::Corrupt(format!("row {seq}/{sink}: {e}")))
            })
            .collect()
    }

    /// One committed hook, if it is still stored.
    pub fn hook(&self, seq: u64) -> Result<Option<Envelope>, QueueError> {
        match self.store.get(Cf::Hooks, &hooks::hook(seq))? {
            None => Ok(None),
            Some(bytes) => {
                Envelope::decode(seq, &bytes).map(Some).map_err(|e| QueueError::Corrupt(format!("hook {seq}: {e}")))
            }
        }
    }

    /// The hooks of `seqs` in one read, for dispatch to deliver without a
    /// read each. Best effort: a hook that is gone, damaged or not read
    /// (the read failed) is `None`, and [`Queue::hook`] tells which.
    pub fn prefetch_hooks(&self, seqs: &[u64]) -> Vec<Option<Envelope>> {
        let keys: Vec<Vec<u8>> = seqs.iter().map(|seq| hooks::hook(*seq)).collect();
        match self.store.multi_get(Cf::Hooks, &keys) {
            Ok(values) => seqs
                .iter()
                .zip(values)
                .map(|(seq, value)| value.and_then(|bytes| Envelope::decode(*seq, &bytes).ok()))
                .collect(),
            Err(_) => vec![None; seqs.len()],
        }
    }

    /// Notified after every commit that added hooks: dispatch sleeps on it.
    pub fn commits(&self) -> Arc<tokio::sync::Notify> {
        self.stats.committed.clone()
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
