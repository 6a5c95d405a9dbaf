//! The writer: the one thread that assigns seqs and commits hooks.
//!
//! Callers prepare everything that needs no seq (encoded hooks, the rows
//! per sink, a prefetch of their dedupe keys) and queue a call. The writer
//! takes every call waiting, across partitions, refuses those whose
//! deadline passed or whose caller left (before anything is written: no
//! seq is consumed), re-validates the prefetches, checks tenants and
//! quotas, assigns seqs, and commits the group in one batch — in `dual`
//! mode synced, after appending the same batch to the intake log; in `disk`
//! mode unsynced, with the answers held by the [`Syncer`] until a WAL sync
//! covers them; in `fleet` mode after every hook is in the replicated hook
//! log, with rounds pipelined ([`fleet`]). A call it has started is never
//! abandoned: its caller gets the outcome of that commit, whatever it is.
//!
//! Everything else that changes dedupe keys or the tenant book (the expiry
//! sweep, forgetting a tenant, marking an erase) is a message to this same
//! thread, so the writer's checks are never raced.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::dedupe::{Freshness, Original, Recent};
use super::envelope::Envelope;
use super::reply::Reply;
use super::syncer::{Syncer, Unsynced};
use super::tenants::{TenantBook, TenantRefusal};
use super::{COUNTER_KINDS, DeliveryRow, EntryOutcome, QueueError, Refusal, RowState, counter_key};
use crate::intake::{HookRecord, Intake, IntakeLog};
use crate::store::keys::{archive, dedupe, deliveries, hooks, index, meta};
use crate::store::{Batch, Cf, Durability, Scan, Store};

mod fleet;

/// How long a dedupe key stays live.
pub const DEFAULT_DEDUPE_TTL_MS: u64 = 72 * 3600 * 1000;
/// Calls merged into one commit at most.
const MAX_GROUP_CALLS: usize = 1024;
/// Rows per batch when forgetting a tenant's keys.
const CHUNK: usize = 500;

/// What a call commits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// New hooks from the edge: tenants, dedupe, quotas, per entry.
    Enqueue,
    /// Archived hooks again: fresh seqs, no dedupe, no quotas.
    Redrive,
    /// Hooks out of the quarantine pen: enqueue's checks, but a tenant or
    /// quota refusal refuses the whole call (the pen keeps its entries).
    Release,
    /// Hooks taken over from another node's replicated log: fresh seqs, no
    /// dedupe, no quotas (they were acked once already).
    Import,
    /// Hooks this store put in its hook-framed intake log (`fleet`) and
    /// has not committed: under the seqs they were logged with, no dedupe,
    /// no quotas (see `settle`).
    Settle,
}

impl Kind {
    /// Hooks that were checked when first taken: no tenant cap, no dedupe.
    fn acked_before(self) -> bool {
        matches!(self, Kind::Redrive | Kind::Import | Kind::Settle)
    }

    /// Hooks seen for the first time on any node, which the archive keeps.
    fn archived(self) -> bool {
        !matches!(self, Kind::Redrive | Kind::Import)
    }
}

/// One hook, prepared by its caller.
#[derive(Clone)]
pub struct Prepared {
    pub envelope: Envelope,
    pub encoded: Vec<u8>,
    /// (sink index, encoded delivery row) for every sink bound to its
    /// source: the row's value, which needs no seq.
    pub rows: Vec<(u16, Vec<u8>)>,
    /// The stored dedupe key, if the hook carries one.
    pub dedupe: Option<String>,
    /// What the caller's read found under that key.
    pub prefetched: Option<Original>,
    /// Its identity in a hook-framed intake log's duplicate window, when
    /// not derived from its dedupe key (an imported hook's origin).
    pub msg_id: Option<String>,
    /// What a hook-framed intake log said of it in an earlier pass.
    pub logged: Logged,
}

/// What a hook-framed intake log (`fleet`) said of an entry, kept across
/// the passes of one group: a duplicate is planned again without it, and
/// a hook the log took keeps the seq it was logged under.
#[derive(Clone, Debug, Default)]
pub enum Logged {
    #[default]
    Not,
    /// In the log under this seq.
    Under(u64),
    Duplicate(Box<Envelope>),
    /// Perhaps in the log under this seq: to be appended again under the
    /// same message id, which tells (an unsettled hook, see `settle`).
    Resend(u64),
    /// The log did not take it; `sent`: it may hold it all the same.
    Failed {
        seq: u64,
        sent: bool,
    },
}

pub struct Call {
    pub kind: Kind,
    pub entries: Vec<Prepared>,
    /// Store ops committed in the same batch (a job cursor, pen deletes).
    pub extra: Batch,
    pub deadline: Option<Instant>,
    pub now_ms: u64,
    /// The commit epoch the caller's prefetch read at.
    pub prefetch_epoch: u64,
    pub reply: Reply,
}

impl Call {
    /// A call the writer made itself (unsettled hooks): nobody waits on it.
    fn is_internal(&self) -> bool {
        self.kind == Kind::Settle && matches!(&self.reply, Reply::Each(replies) if replies.is_empty())
    }
}

pub enum Message {
    Commit(Call),
    /// Delete up to `limit` dedupe keys expired by `now_ms`.
    Sweep {
        now_ms: u64,
        limit: usize,
        reply: oneshot::Sender<Result<usize, QueueError>>,
    },
    /// Mark or unmark a tenant as being erased.
    SetErasing {
        tenant: String,
        erasing: bool,
        reply: oneshot::Sender<Result<(), QueueError>>,
    },
    /// Drop a tenant that holds no rows: its dedupe keys, counters and
    /// place in the tenant book. Replies with the keys removed.
    Forget {
        tenant: String,
        reply: oneshot::Sender<Result<u64, QueueError>>,
    },
    /// After a failed write or sync: reopen the store if the disk takes
    /// writes again. Replies whether the store recovered.
    Recover {
        reply: oneshot::Sender<Result<bool, QueueError>>,
    },
    /// `fleet`: append unsettled hooks again and commit what the log has.
    Settle,
    /// `fleet`, at boot: commit the hooks this store logged past its
    /// settled mark (and past `floor`) that it lacks. Replies with the
    /// commit's outcomes.
    SettleFromLog {
        floor: u64,
        reply: oneshot::Sender<Result<Vec<EntryOutcome>, QueueError>>,
    },
}

/// The bounds the writer enforces.
#[derive(Clone, Debug)]
pub struct Limits {
    pub dedupe_ttl_ms: u64,
    pub dedupe_max_entries: Option<u64>,
    pub dedupe_max_entries_per_tenant: Option<u64>,
    pub tenants_max: Option<usize>,
    /// `dual`: refuse new hooks (`intake_pending`) while the intake log
    /// holds more than this, waiting for a checkpoint.
    pub intake_max_bytes: u64,
    /// Keep a copy of every accepted hook (not of redriven ones: they are
    /// archived already).
    pub archive: bool,
}

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

pub struct Spawned {
    pub messages: mpsc::Sender<Message>,
    pub stats: Arc<WriterStats>,
    /// Ends once every sender is dropped and the last group committed.
    pub thread: std::thread::JoinHandle<()>,
}

pub struct WriterParts {
    pub due_floor: Arc<super::transitions::DueFloor>,
    pub store: Arc<dyn Store>,
    pub next_seq: u64,
    pub limits: Limits,
    pub tenants: Arc<TenantBook>,
    pub intake: Option<Intake>,
}

impl WriterStats {
    /// A commit's write or WAL sync failed and the store has not recovered.
    pub(super) fn failed(&self) -> bool {
        self.sync_failed.load(Ordering::Acquire) || self.write_failed.load(Ordering::Acquire)
    }

    /// `hooks` are durable: count them and wake dispatch.
    pub(super) fn count_durable(&self, hooks: u64) {
        self.hooks.fetch_add(hooks, Ordering::Relaxed);
        if hooks > 0 {
            self.committed.notify_one();
        }
    }

    /// A commit that acks groups took `took` to reach the disk.
    pub(super) fn count_commit(&self, took: std::time::Duration, hooks: u64) {
        self.commits.fetch_add(1, Ordering::Relaxed);
        self.sync_micros.fetch_add(u64::try_from(took.as_micros()).unwrap_or(u64::MAX), Ordering::Relaxed);
        let metrics = crate::metrics::metrics();
        metrics.commit_seconds.observe(took.as_secs_f64());
        metrics.commit_group_hooks.observe(hooks as f64);
    }
}

pub fn spawn(parts: WriterParts) -> Result<Spawned, QueueError> {
    let (messages, rx) = mpsc::channel(4096);
    let stats = Arc::new(WriterStats::default());
    stats.next_seq.store(parts.next_seq, Ordering::Relaxed);
    let node_keys = parts.store.counter(&counter_key(None, "dedupe_keys"))?;
    let syncer = || {
        Syncer::spawn(parts.store.clone(), stats.clone())
            .map_err(|e| QueueError::Os(format!("cannot start the WAL sync thread: {e}")))
    };
    let path = match parts.intake {
        // `dual` keeps its synced write: the intake log and the store must
        // both hold a group before it is acked, and the log syncs on its own.
        Some(Intake::Groups(log, _)) => CommitPath::Dual(Dual::new(log)),
        // The hook log has taken every hook before the store write, which
        // is then `disk` mode's.
        Some(Intake::Hooks(log)) => {
            CommitPath::Fleet(Box::new(fleet::Fleet::new(log, syncer()?, parts.store.as_ref())?))
        }
        None => CommitPath::Disk(syncer()?),
    };
    let writer = Writer {
        due_floor: parts.due_floor,
        store: parts.store,
        next_seq: parts.next_seq,
        limits: parts.limits,
        tenants: parts.tenants,
        recent: Recent::new(0),
        last_epoch: 0,
        node_keys,
        tenant_keys: HashMap::new(),
        stats: stats.clone(),
        path,
    };
    let thread = std::thread::Builder::new()
        .name("ankusa-writer".into())
        .spawn(move || writer.run(rx))
        .map_err(|e| QueueError::Os(format!("cannot start the writer thread: {e}")))?;
    Ok(Spawned { messages, stats, thread })
}

struct Writer {
    due_floor: Arc<super::transitions::DueFloor>,
    store: Arc<dyn Store>,
    next_seq: u64,
    limits: Limits,
    tenants: Arc<TenantBook>,
    recent: Recent,
    /// The last epoch `recent` holds keys of. The epoch callers see
    /// (`stats.epoch`) trails it while fleet rounds are in flight: their
    /// keys are in no store a prefetch could have read.
    last_epoch: u64,
    /// Live dedupe keys of the node, and of each tenant seen (the writer
    /// is the only one that changes them).
    node_keys: i64,
    tenant_keys: HashMap<String, i64>,
    stats: Arc<WriterStats>,
    path: CommitPath,
}

/// How a group becomes durable before its callers hear of it.
enum CommitPath {
    /// `disk` (and `none`): the store's write, unsynced; the syncer
    /// answers once a WAL sync covers it.
    Disk(Syncer),
    /// `dual`: the group log's append, then the store's synced write.
    Dual(Dual),
    /// `fleet`: every hook in the replicated hook log first, then as
    /// `Disk`, with rounds pipelined.
    Fleet(Box<fleet::Fleet>),
}

impl CommitPath {
    /// Who answers a written group once the WAL is synced.
    fn syncer(&self) -> Option<&Syncer> {
        match self {
            CommitPath::Disk(syncer) => Some(syncer),
            CommitPath::Fleet(fleet) => Some(&fleet.syncer),
            CommitPath::Dual(_) => None,
        }
    }

    fn is_fleet(&self) -> bool {
        matches!(self, CommitPath::Fleet(_))
    }
}

/// `dual`'s group log, and the checkpoint that truncates it.
struct Dual {
    log: Arc<std::sync::Mutex<Box<dyn IntakeLog>>>,
    /// A checkpoint (store flush, then log truncation) is running on its
    /// own thread, off the commit path.
    checkpointing: Arc<std::sync::atomic::AtomicBool>,
    checkpoint_thread: Option<std::thread::JoinHandle<()>>,
}

impl Dual {
    fn new(log: Box<dyn IntakeLog>) -> Dual {
        Dual {
            log: Arc::new(std::sync::Mutex::new(log)),
            checkpointing: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            checkpoint_thread: None,
        }
    }
}

/// Each call's answer, in call order.
type Replies = Vec<Result<Vec<EntryOutcome>, QueueError>>;

/// What a group put in the store.
#[derive(Clone, Copy, Default)]
struct Written {
    any: bool,
    hooks: u64,
}

fn lock(log: &std::sync::Mutex<Box<dyn IntakeLog>>) -> std::sync::MutexGuard<'_, Box<dyn IntakeLog>> {
    log.lock().unwrap_or_else(|e| e.into_inner())
}

/// The batch a group is building, and what it will change in memory once
/// it commits.
#[derive(Default)]
struct Group {
    batch: Batch,
    next_seq: u64,
    first_seq: u64,
    hooks: u64,
    /// Dedupe keys this group writes, in order.
    new_keys: Vec<NewKey>,
    /// How many of them are new to the store (counted against quotas).
    added_keys: i64,
    /// Index into `new_keys` by key.
    live: HashMap<Vec<u8>, usize>,
    keys_by_tenant: HashMap<String, i64>,
    /// Tenants whose first hook is in this batch.
    joining: Vec<String>,
    /// Counter deltas per tenant, summed over the group and written once
    /// (with the node's totals) when the batch is sealed.
    counters: HashMap<String, Deltas>,
    /// Hooks a hook-framed intake log must take before the store write,
    /// and the (call, entry) each came from.
    to_log: Vec<HookRecord>,
    logged_from: Vec<(usize, usize)>,
    /// The last log position of a hook of this store this group commits.
    logged_through: u64,
}

/// A dedupe key a group writes.
struct NewKey {
    key: Vec<u8>,
    original: Original,
    tenant: String,
    /// It is new to the store. A key that expired but is not yet swept is
    /// taken over in place: the store holds as many keys as before.
    added: bool,
}

/// A tenant's counter changes within one group.
#[derive(Clone, Copy, Debug, Default)]
struct Deltas {
    pending: i64,
    dead: i64,
    bytes: i64,
    dedupe_keys: i64,
}

/// What planning an entry needs to know of its call.
struct CallContext {
    kind: Kind,
    now_ms: u64,
    prefetch_epoch: u64,
}

/// Where a group stood before a call, to roll a refused release back.
struct Mark {
    batch: usize,
    next_seq: u64,
    hooks: u64,
    new_keys: usize,
    added_keys: i64,
    joining: usize,
    to_log: usize,
    counters: Option<HashMap<String, Deltas>>,
}

impl Group {
    /// Note where the group stands; `counters` only for calls that may be
    /// rolled back whole (releases), since it copies the deltas.
    fn mark(&self, counters: bool) -> Mark {
        Mark {
            batch: self.batch.len(),
            next_seq: self.next_seq,
            hooks: self.hooks,
            new_keys: self.new_keys.len(),
            added_keys: self.added_keys,
            joining: self.joining.len(),
            to_log: self.to_log.len(),
            counters: counters.then(|| self.counters.clone()),
        }
    }

    /// Add the summed counter deltas to the batch.
    fn seal_counters(&mut self) {
        let mut node = Deltas::default();
        for (tenant, d) in self.counters.drain() {
            self.batch.add_counter(counter_key(Some(&tenant), "pending"), d.pending);
            self.batch.add_counter(counter_key(Some(&tenant), "bytes"), d.bytes);
            self.batch.add_counter(counter_key(Some(&tenant), "dedupe_keys"), d.dedupe_keys);
            if d.dead != 0 {
                self.batch.add_counter(counter_key(Some(&tenant), "dead"), d.dead);
            }
            node.pending += d.pending;
            node.dead += d.dead;
            node.bytes += d.bytes;
            node.dedupe_keys += d.dedupe_keys;
        }
        self.batch.add_counter(counter_key(None, "pending"), node.pending);
        if node.dead != 0 {
            self.batch.add_counter(counter_key(None, "dead"), node.dead);
        }
        self.batch.add_counter(counter_key(None, "bytes"), node.bytes);
        self.batch.add_counter(counter_key(None, "dedupe_keys"), node.dedupe_keys);
    }

    fn rollback(&mut self, mark: Mark) {
        self.batch.truncate(mark.batch);
        self.next_seq = mark.next_seq;
        self.hooks = mark.hooks;
        if let Some(counters) = mark.counters {
            self.counters = counters;
        }
        for new in self.new_keys.drain(mark.new_keys..) {
            self.live.remove(&new.key);
            if new.added {
                *self.keys_by_tenant.entry(new.tenant).or_default() -= 1;
            }
        }
        self.added_keys = mark.added_keys;
        self.joining.truncate(mark.joining);
        self.to_log.truncate(mark.to_log);
        self.logged_from.truncate(mark.to_log);
    }
}

impl Writer {
    fn run(mut self, mut rx: mpsc::Receiver<Message>) {
        let mut held: Option<Message> = None;
        loop {
            let message = match held.take() {
                Some(message) => message,
                None => match self.next(&mut rx) {
                    fleet::Next::Answered(answers) => {
                        self.complete_oldest(answers);
                        continue;
                    }
                    fleet::Next::Message(Some(message)) => message,
                    fleet::Next::Message(None) => break,
                },
            };
            let first = match message {
                Message::Commit(call) => call,
                other => {
                    // Maintenance sees every round before it committed.
                    self.finish_rounds();
                    self.maintain(other);
                    continue;
                }
            };
            let mut calls = vec![first];
            while calls.len() < MAX_GROUP_CALLS {
                match rx.try_recv() {
                    Ok(Message::Commit(call)) => calls.push(call),
                    Ok(other) => {
                        // Keep order: maintenance runs after this group.
                        held = Some(other);
                        break;
                    }
                    Err(_) => break,
                }
            }
            self.commit_group(calls);
        }
        self.finish_rounds();
        // The store must not outlive its last user on another thread.
        if let CommitPath::Dual(dual) = &mut self.path
            && let Some(thread) = dual.checkpoint_thread.take()
        {
            let _ = thread.join();
        }
    }

    fn maintain(&mut self, message: Message) {
        match message {
            Message::Commit(_) => {}
            Message::Sweep { now_ms, limit, reply } => {
                let _ = reply.send(self.sweep(now_ms, limit));
            }
            Message::SetErasing { tenant, erasing, reply } => {
                let _ = reply.send(self.set_erasing(&tenant, erasing));
            }
            Message::Forget { tenant, reply } => {
                let _ = reply.send(self.forget(&tenant));
            }
            Message::Recover { reply } => {
                let _ = reply.send(self.recover());
            }
            Message::Settle => self.commit_group(Vec::new()),
            Message::SettleFromLog { floor, reply } => match self.settle_from_log(floor) {
                Ok(call) => self.commit_group(vec![Call { reply: Reply::Call(reply), ..call }]),
                Err(e) => {
                    let _ = reply.send(Err(e));
                }
            },
        }
    }

    fn commit_group(&mut self, calls: Vec<Call>) {
        // Refuse what cannot start; nothing of it is written.
        let now = Instant::now();
        let mut started = Vec::with_capacity(calls.len() + 1);
        for call in calls {
            if call.reply.is_withdrawn() {
                tracing::debug!(entries = call.entries.len(), "a caller left before its batch started; withdrawn");
                call.reply.send(Err(QueueError::CallerGone));
                continue;
            }
            if call.deadline.is_some_and(|d| d <= now) {
                call.reply.send(Err(QueueError::DeadlineExceeded));
                continue;
            }
            started.push(call);
        }
        if self.path.is_fleet() {
            return self.send_round(started);
        }
        if started.is_empty() {
            return;
        }
        let (replies, written) = match self.reread(&started) {
            Ok(reread) => self.plan_and_write(&mut started, &reread),
            Err(e) => (started.iter().map(|_| Err(e.clone())).collect(), Written::default()),
        };
        self.stats.calls.fetch_add(started.len() as u64, Ordering::Relaxed);
        match self.path.syncer() {
            Some(syncer) => syncer.hand_over(Unsynced {
                answers: started.into_iter().zip(replies).map(|(call, reply)| (call.reply, call.kind, reply)).collect(),
                wrote: written.any,
                hooks: written.hooks,
            }),
            None => {
                for (call, reply) in started.into_iter().zip(replies) {
                    call.reply.send(reply);
                }
            }
        }
    }

    /// Read again the dedupe keys whose prefetch the window cannot vouch
    /// for, in one `multi_get`.
    fn reread(&self, calls: &[Call]) -> Result<HashMap<Vec<u8>, Option<Original>>, QueueError> {
        let mut keys = Vec::new();
        for call in calls.iter().filter(|c| !c.kind.acked_before()) {
            for entry in &call.entries {
                if let Some(stored) = &entry.dedupe {
                    let key = dedupe::entry(&entry.envelope.tenant_id, &entry.envelope.source_id, stored);
                    if self.recent.freshness(&key, call.prefetch_epoch) == Freshness::Unknown {
                        keys.push(key);
                    }
                }
            }
        }
        if keys.is_empty() {
            return Ok(HashMap::new());
        }
        let values = super::damage::absent_if_damaged(self.store.multi_get_each(Cf::Dedupe, &keys)?)?;
        Ok(keys.into_iter().zip(values).map(|(k, v)| (k, v.and_then(|v| Original::decode(&v).ok()))).collect())
    }

    /// Plan every call into one group and write it. Entries' bodies and
    /// envelopes move into the batch and the outcomes, not copied.
    fn plan_and_write(
        &mut self,
        calls: &mut [Call],
        reread: &HashMap<Vec<u8>, Option<Original>>,
    ) -> (Replies, Written) {
        let first_seq = self.next_seq;
        let (mut group, replies) = self.plan(calls, reread, first_seq, first_seq);
        self.next_seq = group.next_seq;
        self.stats.next_seq.store(self.next_seq, Ordering::Relaxed);
        if group.batch.is_empty() {
            return (replies, Written::default());
        }
        group.seal_counters();
        if group.hooks > 0 {
            group.batch.put(Cf::Meta, meta::NEXT_SEQ.to_vec(), group.next_seq.to_be_bytes().to_vec());
        }
        match self.write(&group) {
            Ok(()) => {
                let written = Written { any: true, hooks: group.hooks };
                self.committed(group);
                (replies, written)
            }
            Err(refusal) => {
                self.stats.last_failure_ms.store(super::now_ms(), Ordering::Relaxed);
                let refused = replies
                    .into_iter()
                    .zip(calls.iter())
                    .map(|(reply, call)| refuse(reply, call.kind, &refusal, false))
                    .collect();
                (refused, Written::default())
            }
        }
    }

    /// Plan every call into one group; unlogged seqs start at `next_seq`.
    fn plan(
        &mut self,
        calls: &mut [Call],
        reread: &HashMap<Vec<u8>, Option<Original>>,
        first_seq: u64,
        next_seq: u64,
    ) -> (Group, Vec<Result<Vec<EntryOutcome>, QueueError>>) {
        let mut group = Group { next_seq, first_seq, ..Group::default() };
        let mut replies = Vec::with_capacity(calls.len());
        for (c, call) in calls.iter_mut().enumerate() {
            let mark = group.mark(call.kind == Kind::Release);
            let context = CallContext { kind: call.kind, now_ms: call.now_ms, prefetch_epoch: call.prefetch_epoch };
            let planned: Result<Vec<EntryOutcome>, QueueError> = call
                .entries
                .iter_mut()
                .enumerate()
                .map(|(e, entry)| self.plan_entry(&context, (c, e), entry, reread, &mut group))
                .collect();
            let reply = match planned {
                Ok(outcomes) if call.kind == Kind::Release => match whole_call_refusal(&outcomes) {
                    Some(refusal) => {
                        group.rollback(mark);
                        Err(QueueError::Refused(refusal))
                    }
                    None => Ok(outcomes),
                },
                Ok(outcomes) => Ok(outcomes),
                Err(e) => {
                    group.rollback(mark);
                    Err(e)
                }
            };
            if reply.is_ok() {
                group.batch.extend(std::mem::take(&mut call.extra));
            }
            replies.push(reply);
        }
        (group, replies)
    }

    /// Decide one entry, adding its writes to the group.
    fn plan_entry(
        &mut self,
        call: &CallContext,
        at: (usize, usize),
        entry: &mut Prepared,
        reread: &HashMap<Vec<u8>, Option<Original>>,
        group: &mut Group,
    ) -> Result<EntryOutcome, QueueError> {
        match &entry.logged {
            Logged::Duplicate(original) => return Ok(EntryOutcome::Duplicate((**original).clone())),
            Logged::Failed { .. } => return Ok(EntryOutcome::Refused(Refusal::IntakeUnavailable)),
            Logged::Not | Logged::Under(_) | Logged::Resend(_) => {}
        }
        let env = &entry.envelope;
        let max = if call.kind.acked_before() { None } else { self.limits.tenants_max };
        let joins = match self.tenants.check(&env.tenant_id, max, &group.joining) {
            Ok(joins) => joins,
            Err(TenantRefusal::Erasing) => return Ok(EntryOutcome::Refused(Refusal::TenantErasing)),
            Err(TenantRefusal::Limit) => return Ok(EntryOutcome::Refused(Refusal::TenantLimit)),
        };
        let dedupe_key = match (&entry.dedupe, call.kind) {
            (Some(stored), Kind::Enqueue | Kind::Release) => {
                Some(dedupe::entry(&env.tenant_id, &env.source_id, stored))
            }
            _ => None,
        };
        let mut takes_over = false;
        if let Some(key) = &dedupe_key {
            let original = match group.live.get(key) {
                Some(&i) => group.new_keys.get(i).map(|new| new.original.clone()),
                None => match self.recent.freshness(key, call.prefetch_epoch) {
                    Freshness::Newer(original) => Some(original),
                    Freshness::Prefetch => entry.prefetched.clone(),
                    Freshness::Unknown => reread.get(key).cloned().flatten(),
                },
            };
            match original {
                Some(original) if original.expires_at > call.now_ms => {
                    return Ok(EntryOutcome::Duplicate(original_envelope(self.store.as_ref(), &original, env)?));
                }
                // Expired but not yet swept: the new hook takes the key over
                // in place, so the store holds no more keys than before.
                Some(_) => takes_over = true,
                None if self.over_dedupe_quota(&env.tenant_id, group)? => {
                    return Ok(EntryOutcome::Refused(Refusal::DedupeQuota));
                }
                None => {}
            }
        }

        let seq = match entry.logged {
            // Logged before: its seq, which later seqs must pass (a hook
            // settled from the log may be past what the store knew).
            Logged::Under(seq) | Logged::Resend(seq) => {
                group.next_seq = group.next_seq.max(seq + 1);
                seq
            }
            _ => {
                group.next_seq += 1;
                group.next_seq - 1
            }
        };
        group.hooks += 1;
        if self.path.is_fleet() && matches!(entry.logged, Logged::Not | Logged::Resend(_)) {
            let msg_id = entry
                .msg_id
                .clone()
                .or_else(|| dedupe_key.as_ref().map(|key| format!("d.{}", crate::digest::sha256_hex(key))));
            let payload = super::handoff::encode(&entry.encoded, &entry.rows);
            group.to_log.push(HookRecord { msg_id, seq, payload });
            group.logged_from.push(at);
        }
        let env = &entry.envelope;
        let batch = &mut group.batch;
        if self.limits.archive && call.kind.archived() {
            batch.put(Cf::Archive, archive::archived(&env.tenant_id, env.received_at, &env.id), entry.encoded.clone());
        }
        batch.put(Cf::Hooks, hooks::hook(seq), std::mem::take(&mut entry.encoded));
        // Each row is due now, with its owner entry (see `rows`), except
        // a row of a hook acked before that was already given up on.
        let rows = entry.rows.len() as i64;
        let mut dead = 0;
        for (sink, value) in std::mem::take(&mut entry.rows) {
            match given_up(call.kind, seq, sink, &value) {
                Some(row) => {
                    dead += 1;
                    for (key, value) in row.index_entries() {
                        batch.put(Cf::Index, key, value);
                    }
                }
                None => {
                    batch.put(Cf::Index, index::due(call.now_ms, seq, sink), Vec::new());
                }
            }
            batch.put(Cf::Deliveries, deliveries::row(seq, sink), value);
            batch.put(Cf::Index, index::owner(&env.tenant_id, seq, sink), Vec::new());
        }
        let deltas = match group.counters.get_mut(&env.tenant_id) {
            Some(deltas) => deltas,
            None => group.counters.entry(env.tenant_id.clone()).or_default(),
        };
        deltas.pending += rows - dead;
        deltas.dead += dead;
        deltas.bytes += rows * env.size() as i64;
        let batch = &mut group.batch;
        if let (Some(key), Some(stored)) = (dedupe_key, &entry.dedupe) {
            let expires_at = call.now_ms + self.limits.dedupe_ttl_ms;
            let original = Original { seq, expires_at, id: env.id.clone() };
            batch.put(Cf::Dedupe, key.clone(), original.encode());
            batch.put(Cf::Dedupe, dedupe::expiry(expires_at, &env.tenant_id, &env.source_id, stored), Vec::new());
            let added = !takes_over;
            if added {
                deltas.dedupe_keys += 1;
                group.added_keys += 1;
                *group.keys_by_tenant.entry(env.tenant_id.clone()).or_default() += 1;
            }
            group.live.insert(key.clone(), group.new_keys.len());
            group.new_keys.push(NewKey { key, original, tenant: env.tenant_id.clone(), added });
        }
        if joins {
            group.batch.put(Cf::Meta, meta::holding(&env.tenant_id), Vec::new());
            group.joining.push(env.tenant_id.clone());
        }
        Ok(EntryOutcome::Committed(Envelope { seq, ..std::mem::take(&mut entry.envelope) }))
    }

    fn over_dedupe_quota(&mut self, tenant: &str, group: &Group) -> Result<bool, QueueError> {
        let in_group = group.keys_by_tenant.get(tenant).copied().unwrap_or(0);
        if let Some(max) = self.limits.dedupe_max_entries
            && self.node_keys + group.added_keys >= max as i64
        {
            return Ok(true);
        }
        match self.limits.dedupe_max_entries_per_tenant {
            Some(max) => Ok(self.tenant_keys(tenant)? + in_group >= max as i64),
            None => Ok(false),
        }
    }

    fn tenant_keys(&mut self, tenant: &str) -> Result<i64, QueueError> {
        if let Some(n) = self.tenant_keys.get(tenant) {
            return Ok(*n);
        }
        let n = self.store.counter(&counter_key(Some(tenant), "dedupe_keys"))?;
        self.tenant_keys.insert(tenant.to_string(), n);
        Ok(n)
    }

    /// Write the group: in `disk` and `fleet` mode unsynced, for the
    /// syncer to cover; in `dual` mode to the intake log first, then to the
    /// store, both synced. The refusal says which copy is missing.
    fn write(&mut self, group: &Group) -> Result<(), Refusal> {
        if let Some(syncer) = self.path.syncer() {
            if syncer.failed() {
                return Err(Refusal::StoreUnavailable);
            }
            return self.store.write(&group.batch, Durability::Buffered).map_err(|e| {
                tracing::error!("store commit failed: {e}");
                self.stats.write_failed.store(true, Ordering::Release);
                Refusal::StoreUnavailable
            });
        }
        let started = std::time::Instant::now();
        let written = self.write_copies(group);
        self.stats.count_commit(started.elapsed(), group.hooks);
        written
    }

    fn write_copies(&mut self, group: &Group) -> Result<(), Refusal> {
        let log = match &self.path {
            CommitPath::Dual(dual) => Some(&dual.log),
            _ => None,
        };
        // Only batches with hooks go to the intake log: it is a copy of what
        // was acked. (A batch of extra ops alone — a cursor, pen deletes —
        // would be replayed again on every boot, with no seq to tell.)
        if let Some(log) = log.filter(|_| group.hooks > 0) {
            let mut log = lock(log);
            if log.bytes() > self.limits.intake_max_bytes {
                tracing::warn!(bytes = log.bytes(), "intake log is over its bound, waiting for a checkpoint");
                return Err(Refusal::IntakePending);
            }
            let last_seq = group.next_seq.saturating_sub(1).max(group.first_seq);
            if let Err(e) = log.append(group.first_seq, last_seq, &group.batch.encode()) {
                tracing::error!("intake log append failed: {e}");
                return Err(Refusal::IntakeUnavailable);
            }
        }
        if let Err(e) = self.store.write(&group.batch, Durability::Synced) {
            tracing::error!("store commit failed: {e}");
            self.stats.write_failed.store(true, Ordering::Release);
            return Err(match log {
                Some(_) => Refusal::Half { missing: super::Side::Store, reason: e.to_string() },
                None => Refusal::StoreUnavailable,
            });
        }
        Ok(())
    }

    /// The group is written: apply it to memory and make it visible.
    fn committed(&mut self, mut group: Group) {
        let epoch = self.assume(&mut group);
        self.made_visible(&group, epoch);
    }

    /// Count what a planned group changes (tenants, dedupe keys and their
    /// counts) as done, before or after its write; returns the epoch its
    /// keys are recorded under, for `made_visible` to publish.
    fn assume(&mut self, group: &mut Group) -> u64 {
        self.tenants.join(&group.joining);
        self.node_keys += group.added_keys;
        for (tenant, added) in group.keys_by_tenant.drain() {
            if let Some(n) = self.tenant_keys.get_mut(&tenant) {
                *n += added;
            }
        }
        self.last_epoch += 1;
        let keys = group.new_keys.drain(..).map(|new| (new.key, new.original)).collect();
        self.recent.record(self.last_epoch, keys);
        self.last_epoch
    }

    /// The group is in the store: callers may see it (its `epoch`), and
    /// dispatch may claim its rows. Its hooks count as committed (and wake
    /// dispatch) once they are durable.
    fn made_visible(&mut self, group: &Group, epoch: u64) {
        self.due_floor.note(&group.batch);
        self.stats.epoch.fetch_max(epoch, Ordering::Release);
        if self.path.syncer().is_none() {
            self.stats.count_durable(group.hooks);
        }
        self.checkpoint();
    }

    /// Once the intake log has closed a segment, flush the store's
    /// memtables and drop the segments the flush covers — on a thread of
    /// its own, so commits do not wait for the flush.
    fn checkpoint(&mut self) {
        let CommitPath::Dual(dual) = &mut self.path else { return };
        if dual.checkpointing.load(Ordering::Acquire) || !lock(&dual.log).wants_checkpoint() {
            return;
        }
        if let Some(done) = dual.checkpoint_thread.take() {
            let _ = done.join();
        }
        dual.checkpointing.store(true, Ordering::Release);
        // Every seq below this is in a write the flush will cover.
        let through = self.next_seq;
        let (store, log, running, stats) =
            (self.store.clone(), dual.log.clone(), dual.checkpointing.clone(), self.stats.clone());
        let spawned = std::thread::Builder::new().name("ankusa-checkpoint".into()).spawn(move || {
            let result = store
                .flush()
                .map_err(|e| e.to_string())
                .and_then(|()| lock(&log).truncate_below(through).map_err(|e| e.to_string()));
            match result {
                Ok(_) => {
                    stats.checkpoints.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => tracing::warn!("intake log checkpoint failed (it will be tried again): {e}"),
            }
            running.store(false, Ordering::Release);
        });
        match spawned {
            Ok(thread) => dual.checkpoint_thread = Some(thread),
            Err(e) => {
                tracing::warn!("cannot start a checkpoint: {e}");
                dual.checkpointing.store(false, Ordering::Release);
            }
        }
    }

    fn sweep(&mut self, now_ms: u64, limit: usize) -> Result<usize, QueueError> {
        let to = dedupe::expiry_from(now_ms.saturating_add(1));
        let from = dedupe::expiries();
        let expired = self.store.scan(&Scan { cf: Cf::Dedupe, from, to: Some(to), reverse: false, limit })?;
        let parsed: Vec<_> = expired.iter().filter_map(|(k, _)| dedupe::parse_expiry(k).map(|p| (k, p))).collect();
        let keys: Vec<Vec<u8>> = parsed.iter().map(|(_, expiry)| expiry.entry()).collect();
        let values = super::damage::absent_if_damaged(self.store.multi_get_each(Cf::Dedupe, &keys)?)?;
        let mut batch = Batch::new();
        let mut removed = 0;
        for (((key_of_expiry, expiry), key), value) in parsed.iter().zip(keys).zip(values) {
            batch.delete(Cf::Dedupe, key_of_expiry.to_vec());
            // The key may have been taken again since (a new hook after the
            // old one expired): that one is not ours to delete.
            if value.and_then(|v| Original::decode(&v).ok()).is_some_and(|o| o.expires_at == expiry.expires_at) {
                batch.delete(Cf::Dedupe, key);
                batch.add_counter(counter_key(None, "dedupe_keys"), -1);
                batch.add_counter(counter_key(Some(&expiry.tenant), "dedupe_keys"), -1);
                removed += 1;
            }
        }
        for (key, _) in &expired {
            if dedupe::parse_expiry(key).is_none() {
                tracing::warn!(key = hex::encode(key), "malformed dedupe expiry key; dropped");
                batch.delete(Cf::Dedupe, key.clone());
            }
        }
        if batch.is_empty() {
            return Ok(0);
        }
        self.store.write(&batch, Durability::Synced)?;
        self.node_keys -= removed as i64;
        if removed > 0 {
            self.forget_prefetches();
        }
        for (_, expiry) in &parsed {
            self.tenant_keys.remove(&expiry.tenant);
        }
        Ok(removed)
    }

    /// Reopen the store after a failed write or WAL sync, once the disk
    /// takes writes again, and rebuild what the writer keeps in memory from
    /// it. Every group written before is answered first (refused: no sync
    /// covers it); what the reopened store holds is flushed to disk before
    /// any commit is acked again. `Ok(false)`: nothing to recover.
    fn recover(&mut self) -> Result<bool, QueueError> {
        if !self.stats.failed() && !self.store.health().failing() {
            return Ok(false);
        }
        if let Some(syncer) = self.path.syncer() {
            syncer.drain();
        }
        self.store.recover()?;
        if let CommitPath::Dual(dual) = &self.path {
            // `dual`: batches the intake log has and the store lost.
            let records = lock(&dual.log).replay().map_err(|e| QueueError::Intake(e.to_string()))?;
            super::apply_intake(self.store.as_ref(), &records)?;
        }
        // `fleet`: hooks the log has and the store lost (written, never
        // synced) are committed again before any other group.
        let settling = if self.path.is_fleet() { Some(self.settle_from_log(0)?) } else { None };
        self.tenants.reload(self.store.as_ref())?;
        self.node_keys = self.store.counter(&counter_key(None, "dedupe_keys"))?;
        self.tenant_keys.clear();
        self.forget_prefetches();
        self.due_floor.reset();
        self.stats.write_failed.store(false, Ordering::Release);
        self.stats.sync_failed.store(false, Ordering::Release);
        tracing::warn!(store = %self.store.location(), "the store recovered: commits resume");
        let scanned = self.scanned_log();
        if let Some(call) = settling.filter(|call| !call.entries.is_empty() || scanned) {
            self.commit_group(vec![call]);
        }
        Ok(true)
    }

    /// Dedupe keys were deleted outside a commit (a sweep, a forgotten
    /// tenant): prefetches made before may name keys that are gone, so
    /// every one of them is read again. A new epoch marks them older.
    fn forget_prefetches(&mut self) {
        self.last_epoch += 1;
        self.stats.epoch.store(self.last_epoch, Ordering::Release);
        self.recent.reset(self.last_epoch);
    }

    fn set_erasing(&mut self, tenant: &str, erasing: bool) -> Result<(), QueueError> {
        let mut batch = Batch::new();
        if erasing {
            batch.put(Cf::Meta, meta::erasing(tenant), Vec::new());
        } else {
            batch.delete(Cf::Meta, meta::erasing(tenant));
        }
        self.store.write(&batch, Durability::Synced)?;
        self.tenants.set_erasing(tenant, erasing);
        Ok(())
    }

    fn forget(&mut self, tenant: &str) -> Result<u64, QueueError> {
        let owned = self.store.scan(&Scan::prefix(Cf::Index, &index::owner_prefix(tenant), 1))?;
        if !owned.is_empty() {
            return Err(QueueError::TenantHasRows(tenant.to_string()));
        }
        let prefix = dedupe::entries_of(tenant);
        let mut removed = 0u64;
        loop {
            let keys = self.store.scan(&Scan::prefix(Cf::Dedupe, &prefix, CHUNK))?;
            if keys.is_empty() {
                break;
            }
            let mut batch = Batch::new();
            for (key, _) in &keys {
                batch.delete(Cf::Dedupe, key.clone());
            }
            batch.add_counter(counter_key(None, "dedupe_keys"), -(keys.len() as i64));
            self.store.write(&batch, Durability::Synced)?;
            removed += keys.len() as u64;
            self.node_keys -= keys.len() as i64;
        }
        // Their expiry entries stay until the sweep finds no key behind them.
        let mut batch = Batch::new();
        for kind in COUNTER_KINDS {
            batch.delete(Cf::Counters, counter_key(Some(tenant), kind));
        }
        batch.delete(Cf::Meta, meta::holding(tenant));
        self.store.write(&batch, Durability::Synced)?;
        self.tenants.forget(tenant);
        self.tenant_keys.remove(tenant);
        self.forget_prefetches();
        Ok(removed)
    }
}

/// A release is refused whole when any entry is refused.
fn whole_call_refusal(outcomes: &[EntryOutcome]) -> Option<Refusal> {
    outcomes.iter().find_map(|o| match o {
        EntryOutcome::Refused(refusal) => Some(refusal.clone()),
        _ => None,
    })
}

/// A commit failed: what it was to commit is refused. A duplicate still
/// answers as one when its original is known durable; with `duplicates`
/// (a failed WAL sync, which may not have covered the original) it is
/// refused too.
pub(super) fn refuse(
    reply: Result<Vec<EntryOutcome>, QueueError>,
    kind: Kind,
    refusal: &Refusal,
    duplicates: bool,
) -> Result<Vec<EntryOutcome>, QueueError> {
    let outcomes = reply?;
    if kind != Kind::Enqueue {
        return Err(QueueError::Refused(refusal.clone()));
    }
    Ok(outcomes
        .into_iter()
        .map(|o| match o {
            EntryOutcome::Committed(_) => EntryOutcome::Refused(refusal.clone()),
            EntryOutcome::Duplicate(_) if duplicates => EntryOutcome::Refused(refusal.clone()),
            other => other,
        })
        .collect())
}

/// The envelope a duplicate answers with: the original hook if it is still
/// stored, else what the dedupe entry remembers of it (id and seq).
fn original_envelope(store: &dyn Store, original: &Original, incoming: &Envelope) -> Result<Envelope, QueueError> {
    if let Some(bytes) = store.get(Cf::Hooks, &hooks::hook(original.seq))? {
        if let Ok(envelope) = Envelope::decode(original.seq, &bytes) {
            return Ok(envelope);
        }
        tracing::warn!(
            seq = original.seq,
            "stored hook does not decode; answering the duplicate from its dedupe entry"
        );
    }
    let remembered =
        Envelope::new(original.id.clone(), incoming.source_id.clone(), incoming.tenant_id.clone(), 0, Vec::new());
    Ok(Envelope { seq: original.seq, ..remembered })
}

/// A row of a hook acked before (imported, settled, redriven) that was
/// already given up on, decoded under its seq for its dead index entries.
/// A hook taken the first time has only due rows, and is not decoded.
fn given_up(kind: Kind, seq: u64, sink: u16, value: &[u8]) -> Option<DeliveryRow> {
    if !kind.acked_before() {
        return None;
    }
    DeliveryRow::decode(seq, sink, value).ok().filter(|row| matches!(row.state, RowState::Dead { .. }))
}
