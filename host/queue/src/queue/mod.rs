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
pub mod handoff;
mod import;
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

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use thiserror::Error;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

pub use archive::{Archived, archive_key_tenant};

/// The tenant of a source that names none.
pub const DEFAULT_TENANT: &str = "default";

pub use damage::{named_keys, rebuild_index};
pub use dlq::{DeadEntry, DeadPage, DeadQuery, MAX_EXAMINED, SinkSelector};
pub use durability::{DurabilityError, SinkDurability, SourceDurability, WalMode, check_durable, validate_config};
pub use envelope::{Envelope, Verification, VerifyStatus};
pub use import::Imported;
pub use purge::{PURGE_CHUNK, PurgeCounts, PurgeKinds, PurgeStep};
pub use quarantine::{DEFAULT_PEN_BYTES, PenEntry, is_pen_key};
pub use readiness::NotReady;
pub use records::record_write;
pub use recount::{CounterDrift, Recount, rebuild_counters};
pub use reply::EntryReply;
pub use rows::{DeliveryRow, RowState};
pub use settings::{ArchiveSettings, DEFAULT_DEDUPE_TTL_MS, DedupeSettings, TenantsSettings, WalSettings};
pub use transitions::{ClaimDecision, FinalOutcome, OutcomeLog, Settlement, SourcePending, TenantPending};

use crate::intake::{Intake, IntakeLog, IntakeOptions, Replay};
use crate::store::keys::{self, counters, deliveries, hooks};
use crate::store::{Batch, Cf, Durability, Scan, Store, StoreError, StoreOptions};
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

/// Which of the two durable copies (`dual` mode) a half result lacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Intake,
    Store,
}

/// Why an entry (or a whole release / redrive) was not acked.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum Refusal {
    /// Its tenant would be one past `tenants.max`.
    #[error("tenant_limit")]
    TenantLimit,
    /// An erase of its tenant is running.
    #[error("tenant_erasing")]
    TenantErasing,
    /// Its dedupe key would be a new live key past a quota.
    #[error("dedupe_quota")]
    DedupeQuota,
    /// `dual` or `fleet`: the intake log could not take the batch (in
    /// `fleet` it may hold hooks of it; nothing is acked or stored).
    #[error("intake_unavailable")]
    IntakeUnavailable,
    /// `dual`: the intake log is full until the store checkpoints.
    #[error("intake_pending")]
    IntakePending,
    /// The store could not commit the batch; nothing written.
    #[error("store_unavailable")]
    StoreUnavailable,
    /// `dual`: one copy has the batch, the other (`missing`) does not.
    /// Not acked; replay on the next boot completes it.
    #[error("half: {missing:?} unavailable: {reason}")]
    Half { missing: Side, reason: String },
}

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum QueueError {
    /// The writer could not start the batch before the caller's deadline;
    /// nothing was written and no seq was consumed.
    #[error("deadline_exceeded")]
    DeadlineExceeded,
    /// The caller went away while its batch waited for the writer; nothing
    /// was written and no seq was consumed. (It is the answer to a caller
    /// no longer there: what shows it is the batch's absence.)
    #[error("caller_gone")]
    CallerGone,
    /// A read or a job's write failed.
    #[error("store_unavailable: {0}")]
    Store(#[from] StoreError),
    /// The operating system refused what the queue needs to run (a
    /// thread, randomness).
    #[error("{0}")]
    Os(String),
    /// A whole call refused (a release or redrive, where one entry's
    /// refusal refuses all, or a commit that failed).
    #[error("{0}")]
    Refused(Refusal),
    /// A DLQ cursor this node did not issue.
    #[error("invalid_cursor")]
    InvalidCursor,
    /// A DLQ query naming more tenants than one call may examine keys.
    #[error("a DLQ query names at most {max} tenants")]
    TooManyTenants { max: usize },
    /// A stored row does not decode.
    #[error("corrupt store: {0}")]
    Corrupt(String),
    /// Only a tenant without rows can be forgotten.
    #[error("tenant {0} still holds delivery rows")]
    TenantHasRows(String),
    /// `dual` mode found the store and its intake log out of step.
    #[error("{0}")]
    Intake(String),
    /// The quarantine pen is at its byte cap; it never evicts.
    #[error("quarantine_full")]
    QuarantineFull,
    /// The writer has stopped (the node is shutting down).
    #[error("the queue is closed")]
    Closed,
}

impl QueueError {
    /// The store holds damaged data here (a checksum mismatch, or a row
    /// that does not decode): reading it again will not help.
    pub fn is_damage(&self) -> bool {
        matches!(self, QueueError::Corrupt(_) | QueueError::Store(StoreError::Corruption { .. }))
    }
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
            Clock::System => now_ms(),
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

/// The kinds of counters kept per tenant and per node.
pub const COUNTER_KINDS: [&str; 6] = ["pending", "scheduled", "inflight", "dead", "bytes", "dedupe_keys"];

/// The counter key of `kind` for a tenant, or for the node.
pub use counters::counter as counter_key;

/// The storage a queue runs on: a store, and in `dual` mode an intake log
/// with what it replayed when it opened (in `fleet` mode the hook log).
pub struct Engines {
    pub store: Arc<dyn Store>,
    pub intake: Option<Intake>,
}

impl Engines {
    /// The embedded engines: RocksDB at `path`, and in `dual` mode the
    /// segment log in `config.intake_dir`.
    pub fn embedded(path: &Path, config: &QueueConfig) -> Result<Engines, QueueError> {
        let options = StoreOptions {
            faults: config.store_faults.clone(),
            wal_max_bytes: config.store_wal_max_bytes,
            ..StoreOptions::new(path)
        };
        let store = crate::store::open_embedded(&options)?;
        let intake = match config.wal {
            WalMode::Dual => {
                let dir = config
                    .intake_dir
                    .clone()
                    .ok_or_else(|| QueueError::Intake("wal.mode dual needs an intake log directory".into()))?;
                let options = IntakeOptions { dir, segment_bytes: config.intake_segment_bytes };
                let (log, replay) = crate::intake::open(options).map_err(|e| QueueError::Intake(e.to_string()))?;
                Some(Intake::Groups(log, replay))
            }
            // `fleet`'s log is JetStream, plugged in by the node.
            WalMode::Disk | WalMode::None | WalMode::Fleet => None,
        };
        Ok(Engines { store, intake })
    }
}

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

/// Whether `store` holds any delivery row (a check before a mode change).
pub fn has_rows(store: &dyn Store) -> Result<bool, QueueError> {
    Ok(!store.scan(&Scan::prefix(Cf::Deliveries, &[], 1))?.is_empty())
}

/// Wall-clock unix milliseconds (due times, dead times, dedupe expiry).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl Queue {
    /// Open (or create) the queue on the embedded engines at `path` and
    /// start its writer (see [`Queue::start`]).
    pub fn open(path: &Path, config: QueueConfig) -> Result<Queue, QueueError> {
        Queue::start(Engines::embedded(path, &config)?, config)
    }

    /// Start the queue on `engines`. In `dual` mode the intake log's replay
    /// comes first: batches it has that the store lacks (a half commit
    /// before a crash) are written to the store.
    pub fn start(engines: Engines, config: QueueConfig) -> Result<Queue, QueueError> {
        let Engines { store, intake } = engines;
        let intake = match intake {
            Some(Intake::Groups(log, replay)) => {
                Some(Intake::Groups(complete_from_intake(store.as_ref(), log, &replay)?, Replay::default()))
            }
            other => other,
        };
        recount::repair_counters_if_damaged(store.as_ref())?;
        let next_seq = recover_next_seq(store.as_ref())?;
        let tenants = Arc::new(tenants::TenantBook::load(store.as_ref())?);
        let limits = commit::Limits {
            dedupe_ttl_ms: config.dedupe_ttl_ms,
            dedupe_max_entries: config.dedupe_max_entries,
            dedupe_max_entries_per_tenant: config.dedupe_max_entries_per_tenant,
            tenants_max: config.tenants_max,
            intake_max_bytes: config.intake_max_bytes,
            archive: config.archive_retention_ms.is_some(),
        };
        let due_floor = Arc::new(transitions::DueFloor::default());
        let spawned = commit::spawn(commit::WriterParts {
            due_floor: due_floor.clone(),
            store: store.clone(),
            next_seq,
            limits,
            tenants: tenants.clone(),
            intake,
        })?;
        let recovery = recovery::Recovery::spawn(spawned.messages.downgrade(), spawned.stats.clone(), store.clone())
            .map_err(|e| QueueError::Os(format!("cannot start the recovery thread: {e}")))?;
        Ok(Queue {
            store,
            recovery: Some(recovery),
            outcome_log: std::sync::OnceLock::new(),
            claims_paused: std::sync::atomic::AtomicBool::new(false),
            claims_until: std::sync::Mutex::new(None),
            writer: Some(spawned.messages),
            writer_thread: Some(spawned.thread),
            stats: spawned.stats,
            tenants,
            config,
            transitions: std::sync::Mutex::new(()),
            pen: std::sync::Mutex::new(()),
            due_floor,
        })
    }

    /// Stop the writer after the calls already queued, and release the
    /// store (so it can be opened again, by this process or another),
    /// without blocking the async runtime.
    pub async fn close(mut self) {
        let recovery = self.recovery.take();
        let _ = tokio::task::spawn_blocking(move || drop(recovery)).await;
        let writer = self.writer.take();
        let thread = self.writer_thread.take();
        let store = self.store.clone();
        drop(writer);
        let _ = tokio::task::spawn_blocking(move || {
            if let Some(thread) = thread {
                let _ = thread.join();
            }
            // A clean stop leaves nothing in the store's WAL to replay, so
            // the next start is quick.
            if let Err(e) = store.flush() {
                tracing::warn!("flushing the store on close failed: {e}");
            }
        })
        .await;
    }

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
                    .map(|(sink, component)| {
                        let row = DeliveryRow {
                            seq: 0,
                            sink,
                            tenant: envelope.tenant_id.clone(),
                            source: envelope.source_id.clone(),
                            component,
                            bytes: envelope.size(),
                            attempts: 0,
                            replay_id: replay_id.map(str::to_string),
                            state: RowState::Due { due_at: now_ms },
                            rows_of_hook,
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

impl Drop for Queue {
    /// A queue dropped without `close` still stops its writer before the
    /// store goes: the database is never closed under a running thread
    /// (nor left open while the process exits).
    fn drop(&mut self) {
        drop(self.recovery.take());
        drop(self.writer.take());
        if let Some(thread) = self.writer_thread.take() {
            let _ = thread.join();
        }
    }
}

/// Write to the store every batch the intake log replayed that the store
/// lacks. A new store beside a non-empty intake log is refused: that is a
/// lost store, and `ankusa store rebuild` is how it comes back.
fn complete_from_intake(
    store: &dyn Store,
    log: Box<dyn IntakeLog>,
    replay: &Replay,
) -> Result<Box<dyn IntakeLog>, QueueError> {
    if store.created() && !replay.records.is_empty() {
        return Err(QueueError::Intake(format!(
            "the store at {} is new but the intake log holds {} batches: the store was lost; \
             rebuild it with `ankusa store rebuild` instead of starting empty",
            store.location(),
            replay.records.len()
        )));
    }
    let applied = apply_intake(store, &replay.records)?;
    if applied > 0 {
        tracing::warn!(batches = applied, "completed half-committed batches from the intake log");
    }
    Ok(log)
}

/// Write to the store the intake records it lacks (those at or past its seq
/// marker); how many.
fn apply_intake(store: &dyn Store, records: &[crate::intake::Record]) -> Result<usize, QueueError> {
    let marker = store.seq_marker()?.unwrap_or(1);
    let mut applied = 0;
    for record in records.iter().filter(|r| r.first_seq >= marker) {
        let batch = Batch::decode(&record.payload)
            .map_err(|e| QueueError::Intake(format!("intake batch at seq {}: {e}", record.first_seq)))?;
        store.write(&batch, Durability::Synced)?;
        applied += 1;
    }
    Ok(applied)
}

/// Build a new store at `store_dir` from the intake log at `intake_dir`:
/// every batch it holds, in order. Refuses a store directory that is not
/// empty. Returns (batches, hooks) restored.
pub fn rebuild(intake_dir: &Path, store_dir: &Path) -> Result<(usize, u64), QueueError> {
    let replay = crate::intake::read_all(intake_dir).map_err(|e| QueueError::Intake(e.to_string()))?;
    let store = crate::store::open_embedded(&StoreOptions::new(store_dir))?;
    if !store.created() {
        return Err(QueueError::Intake(format!(
            "{} already holds a store; rebuild into a new, empty directory",
            store_dir.display()
        )));
    }
    let mut hooks = 0;
    for record in &replay.records {
        let batch = Batch::decode(&record.payload)
            .map_err(|e| QueueError::Intake(format!("intake batch at seq {}: {e}", record.first_seq)))?;
        hooks += batch.ops().iter().filter(|op| matches!(op, crate::store::WriteOp::Put { cf: Cf::Hooks, .. })).count()
            as u64;
        store.write(&batch, Durability::Buffered)?;
    }
    store.flush()?;
    Ok((replay.records.len(), hooks))
}

/// `next_seq = max(stored marker, last hook key + 1)`: the marker covers
/// seqs whose hooks were since deleted, the scan covers a marker that is
/// behind (it never is after a clean commit, but costs nothing to check).
fn recover_next_seq(store: &dyn Store) -> Result<u64, QueueError> {
    let marker = store.seq_marker()?.unwrap_or(1);
    let after_last = match store.last_key(Cf::Hooks)? {
        Some(key) => hooks::parse(&key).ok_or_else(|| QueueError::Corrupt("hook key".into()))? + 1,
        None => 1,
    };
    Ok(marker.max(after_last))
}
