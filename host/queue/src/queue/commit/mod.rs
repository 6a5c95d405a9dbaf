//! The commit path: the writer, the one thread that assigns seqs and
//! commits hooks.
//!
//! Callers prepare everything that needs no seq (encoded hooks, the rows
//! per sink, a prefetch of their dedupe keys) and queue a call. The writer
//! takes every call waiting, across partitions, refuses those whose
//! deadline passed or whose caller left (before anything is written: no
//! seq is consumed), has the planner decide the group (re-validating the
//! prefetches, checking tenants and quotas, assigning seqs) and commits it
//! in one batch down its [`CommitPath`]: in `disk` mode unsynced, with the
//! answers held by the syncer until a WAL sync covers them; in `dual` mode
//! synced, after appending the same batch to the group log; in `fleet`
//! mode after every hook is in the replicated hook log, with rounds
//! pipelined. A call it has started is never abandoned: its caller gets
//! the outcome of that commit, whatever it is.
//!
//! Everything else that changes dedupe keys or the tenant book (the expiry
//! sweep, forgetting a tenant, marking an erase, recovering the store) is a
//! message to this same thread, so the writer's checks are never raced.
//!
//! - `call`: what the writer is asked (calls, messages) and refusals;
//! - `plan`: the planner, and the ledger of live dedupe keys it reads;
//! - `syncer`: answers once a WAL sync covers a group (`disk`, `fleet`);
//! - `dual`: the group log and its checkpoint;
//! - `fleet`: the hook log and the pipelined rounds;
//! - `maintain`: the sweep, tenants, recovery;
//! - `stats`: the writer's counters.

mod call;
mod dual;
mod fleet;
mod maintain;
mod plan;
mod stats;
mod syncer;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::mpsc;
use tokio::time::Instant;

pub use call::{Call, Kind, LinePlace, Logged, Message, Prepared};
use call::{Replies, refuse};
use dual::Dual;
pub use plan::Limits;
use plan::{Group, Ledger, Planner};
pub use stats::WriterStats;
use syncer::{Syncer, Unsynced};

use super::dedupe::Original;
use super::reply::Reply;
use super::tenants::TenantBook;
use super::{QueueError, Refusal, counter_key};
use crate::intake::Intake;
use crate::store::keys::{hooks, meta};
use crate::store::{Cf, Durability, Store};

/// Calls merged into one commit at most.
const MAX_GROUP_CALLS: usize = 1024;

pub struct Spawned {
    pub messages: mpsc::Sender<Message>,
    pub stats: Arc<WriterStats>,
    /// Ends once every sender is dropped and the last group committed.
    pub thread: std::thread::JoinHandle<()>,
}

pub struct WriterParts {
    pub due_floor: Arc<super::due_floor::DueFloor>,
    pub store: Arc<dyn Store>,
    pub next_seq: u64,
    pub limits: Limits,
    pub tenants: Arc<TenantBook>,
    pub intake: Option<Intake>,
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
        ledger: Ledger::new(node_keys),
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
    due_floor: Arc<super::due_floor::DueFloor>,
    store: Arc<dyn Store>,
    next_seq: u64,
    limits: Limits,
    tenants: Arc<TenantBook>,
    ledger: Ledger,
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

/// What a group put in the store.
#[derive(Clone, Copy, Default)]
struct Written {
    any: bool,
    hooks: u64,
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
        let (replies, written) = match self.planner().reread(&started) {
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

    /// Plan every call into one group and write it. Entries' bodies and
    /// envelopes move into the batch and the outcomes, not copied.
    fn plan_and_write(
        &mut self,
        calls: &mut [Call],
        reread: &HashMap<Vec<u8>, Option<Original>>,
    ) -> (Replies, Written) {
        let first_seq = self.next_seq;
        let (mut group, replies) = self.planner().plan(calls, reread, first_seq, first_seq);
        self.hand_out_seqs(group.next_seq);
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

    /// The group is written: apply it to memory and make it visible.
    fn committed(&mut self, mut group: Group) {
        let epoch = self.assume(&mut group);
        self.made_visible(&group, epoch);
    }

    /// Seqs up to `next_seq` are handed out, whatever becomes of their
    /// group: an intake log may hold them even if the store never does.
    fn hand_out_seqs(&mut self, next_seq: u64) {
        self.next_seq = self.next_seq.max(next_seq);
        self.stats.next_seq.store(self.next_seq, Ordering::Relaxed);
    }

    /// Count a planned group's changes as done (see `Ledger::assume`).
    fn assume(&mut self, group: &mut Group) -> u64 {
        self.ledger.assume(group, &self.tenants)
    }

    fn planner(&mut self) -> Planner<'_> {
        Planner {
            store: self.store.as_ref(),
            limits: &self.limits,
            tenants: &self.tenants,
            ledger: &mut self.ledger,
            logs_hooks: self.path.is_fleet(),
        }
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
}

/// `next_seq = max(stored marker, last hook key + 1)`: the marker covers
/// seqs whose hooks were since deleted, the scan covers a marker that is
/// behind (it never is after a clean commit, but costs nothing to check).
pub(crate) fn recover_next_seq(store: &dyn Store) -> Result<u64, QueueError> {
    let marker = store.seq_marker()?.unwrap_or(1);
    let after_last = match store.last_key(Cf::Hooks)? {
        Some(key) => hooks::parse(&key).ok_or_else(|| QueueError::Corrupt("hook key".into()))? + 1,
        None => 1,
    };
    Ok(marker.max(after_last))
}
