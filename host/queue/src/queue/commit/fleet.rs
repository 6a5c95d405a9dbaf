//! The fleet commit path (`wal.mode: fleet`): every hook of a group goes
//! to the replicated hook log before the store write, and a round goes out
//! while the rounds before it still await their quorum.
//!
//! A round is planned on top of the rounds in flight as if they had
//! committed: their seqs, dedupe keys, tenants and quotas count. Their keys
//! are recorded under epochs no caller has seen yet, so no prefetch read
//! before a round's store write vouches against it.
//!
//! Rounds complete in the order they were sent. A round whose every hook
//! the log took is written to the store and handed to the syncer, as a
//! `disk` group is. A round the log did not take whole (a duplicate another
//! node logged first, a publish that failed) stops the pipeline: the
//! answers of every later round are awaited, what was assumed of the rounds
//! in flight is dropped (the writer's view is read again from the store),
//! and they are planned again as one group from what the log said of each
//! hook (hooks it took keep their seqs, failures are refused, duplicates
//! answer as duplicates) until the log takes a group whole. A store write
//! that fails does the same to every round after it. So no round commits
//! on top of one that did not, and answers leave in the order rounds were
//! sent.
//!
//! Hooks the log may hold and the store does not (their round failed after
//! they left, or their write was refused) are *unsettled* (see `settle`):
//! appended again first in a later round, and never passed by the settled
//! mark while any round still carries them.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::Ordering;

use tokio::sync::mpsc;

use super::call::{Call, Kind, Logged, Message, Prepared, Replies, refuse};
use super::plan::Group;
use super::syncer::{Syncer, Unsynced};
use super::{CommitPath, Writer};
use crate::intake::{Appended, HookLog, Sent};
use crate::queue::QueueError;
use crate::queue::settle::{self, Settled};
use crate::store::keys::meta;
use crate::store::{Batch, Cf, Store};

/// Rounds in flight at most: enough to keep the quorum busy while the
/// next round is planned, few enough that a failed round sends little
/// back to be planned again.
const MAX_ROUNDS: usize = 4;

pub(super) struct Fleet {
    log: Box<dyn HookLog>,
    pub(super) syncer: Syncer,
    /// Sent, oldest first, awaiting the log's answers.
    rounds: VecDeque<Round>,
    /// Hooks perhaps in the log and not in the store, each
    /// `Logged::Resend(seq)`, that no round in flight carries.
    unsettled: Vec<Prepared>,
    /// The settled mark as the store holds it.
    settled: Settled,
    /// The log's identity, for the settled mark.
    log_identity: String,
    /// The log position a read of this store's hooks reached, for the
    /// next mark.
    scanned_through: u64,
    /// Waits on the writer's thread for a round's answers or the next
    /// message, whichever comes first.
    waiter: tokio::runtime::Runtime,
}

impl Fleet {
    pub(super) fn new(log: Box<dyn HookLog>, syncer: Syncer, store: &dyn Store) -> Result<Fleet, QueueError> {
        let waiter = tokio::runtime::Builder::new_current_thread()
            .build()
            .map_err(|e| QueueError::Os(format!("cannot start the writer's waiter: {e}")))?;
        Ok(Fleet {
            log_identity: log.identity(),
            settled: Settled::load(store)?,
            log,
            syncer,
            rounds: VecDeque::new(),
            unsettled: Vec::new(),
            scanned_through: 0,
            waiter,
        })
    }

    /// Seqs of unsettled hooks that rounds in flight carry again.
    fn resent_in_flight(&self) -> Vec<u64> {
        let copies = self.rounds.iter().flat_map(|round| &round.copies);
        copies.flat_map(|(entries, _)| entries).filter_map(resend_seq).collect()
    }
}

/// One round: planned, its hooks sent to the log, their answers to come.
struct Round {
    calls: Vec<Call>,
    /// Each call's entries and extra ops as before planning, with what the
    /// log has said of each entry so far: a round planned again starts
    /// from these.
    copies: Vec<(Vec<Prepared>, Batch)>,
    group: Group,
    replies: Replies,
    sent: Sent,
    /// The epoch its dedupe keys are recorded under.
    epoch: u64,
}

impl Round {
    fn new(calls: Vec<Call>) -> Round {
        let copies = calls.iter().map(|call| (call.entries.clone(), call.extra.clone())).collect();
        Round {
            calls,
            copies,
            group: Group::default(),
            replies: Vec::new(),
            sent: Sent::answered(Vec::new()),
            epoch: 0,
        }
    }

    /// Start each call again from its copy.
    fn restore(&mut self) {
        for (call, (entries, extra)) in self.calls.iter_mut().zip(&self.copies) {
            call.entries = entries.clone();
            call.extra = extra.clone();
        }
    }

    /// Rounds that stopped the pipeline, as one to be planned again.
    fn merge(rounds: Vec<Round>) -> Round {
        let mut merged = Round::new(Vec::new());
        for round in rounds {
            merged.group.logged_through = merged.group.logged_through.max(round.group.logged_through);
            merged.calls.extend(round.calls);
            merged.copies.extend(round.copies);
        }
        merged
    }

    /// Take the log's answers into the copies. Hooks the log already had (a
    /// retry that reached another node first) become duplicates, hooks it
    /// did not take become failures, hooks it took keep their seqs; a new
    /// hook whose original cannot be read back is taken anew (see
    /// [`retried_id`]). Returns whether the round must be planned again:
    /// then each pass has turned at least one hook into a duplicate or a
    /// refusal, or given it a message id longer than before, so planning
    /// again ends.
    fn absorb(&mut self, answers: Vec<Appended>) -> bool {
        let group = &mut self.group;
        // Unsettled hooks of this store the log did not vouch for this
        // time: a duplicate of one of them is not acked yet.
        let vouched = |answer: &Appended, seq: u64| match answer {
            Appended::Stored { .. } => true,
            Appended::Duplicate { logged_seq, .. } | Appended::Unreadable { logged_seq, .. } => {
                *logged_seq == Some(seq)
            }
            Appended::Failed { .. } => false,
        };
        let unvouched: HashSet<u64> = group
            .to_log
            .iter()
            .zip(&group.logged_from)
            .zip(&answers)
            .filter(|((record, (c, _)), answer)| self.calls[*c].kind == Kind::Settle && !vouched(answer, record.seq))
            .map(|((record, _), _)| record.seq)
            .collect();
        let mut again = false;
        for ((record, &(c, e)), answer) in group.to_log.iter().zip(&group.logged_from).zip(answers) {
            let kind = self.calls[c].kind;
            let copy = &mut self.copies[c].0[e];
            // Appended again, it must be under the same id.
            copy.msg_id = record.msg_id.clone();
            copy.logged = match answer {
                Appended::Stored { position } => {
                    group.logged_through = group.logged_through.max(position);
                    Logged::Under(record.seq)
                }
                // This very hook, logged before by a round that failed.
                Appended::Duplicate { position, logged_seq: Some(seq), .. }
                | Appended::Unreadable { position, logged_seq: Some(seq), .. }
                    if seq == record.seq =>
                {
                    group.logged_through = group.logged_through.max(position);
                    Logged::Under(record.seq)
                }
                Appended::Duplicate { logged_seq: Some(seq), .. }
                | Appended::Unreadable { logged_seq: Some(seq), .. }
                    if unvouched.contains(&seq) =>
                {
                    again = true;
                    Logged::Failed { seq: record.seq, sent: false }
                }
                Appended::Duplicate { original, position, .. } => {
                    again = true;
                    match crate::queue::handoff::decode(&original) {
                        Ok(handoff) => Logged::Duplicate(Box::new(handoff.envelope)),
                        Err(err) => unreadable_original(kind, copy, position, &err.to_string()),
                    }
                }
                Appended::Unreadable { position, reason, .. } => {
                    again = true;
                    unreadable_original(kind, copy, position, &reason)
                }
                Appended::Failed { sent, .. } => {
                    again = true;
                    Logged::Failed { seq: record.seq, sent }
                }
            };
        }
        again
    }

    /// The entries as the log last left them, one list per call.
    fn logged(&self) -> Vec<&[Prepared]> {
        self.copies.iter().map(|(entries, _)| entries.as_slice()).collect()
    }
}

/// What becomes of `copy` when the log's copy of its original (at
/// `position`) cannot be read back, so no answer can name the hook it
/// holds. A new hook (`Enqueue`, `Release`) is taken anew under
/// [`retried_id`]: answering it as a duplicate would ack an id no node
/// holds, and its bytes may be the only intact copy left. A settle or an
/// import meeting a copy logged before keeps the old answer: the node that
/// logged it holds the hook in its store.
fn unreadable_original(kind: Kind, copy: &mut Prepared, position: u64, reason: &str) -> Logged {
    match (kind, copy.msg_id.as_deref()) {
        (Kind::Enqueue | Kind::Release, Some(id)) => {
            let retried = retried_id(id);
            tracing::warn!(
                position,
                "the original of hook {} in the intake log cannot be read back ({reason}); it is taken as a \
                 new hook under message id {retried}",
                copy.envelope.id
            );
            copy.msg_id = Some(retried);
            Logged::Not
        }
        _ => {
            tracing::warn!(position, "a duplicate's original in the intake log cannot be read back ({reason})");
            Logged::Duplicate(Box::new(copy.envelope.clone()))
        }
    }
}

/// The message id a hook is logged under when the log's copy under `id`
/// cannot be read back: the same for every retry of that key, so the
/// first retry taken anew is the original of the ones after it, on any
/// node.
pub fn retried_id(id: &str) -> String {
    format!("{id}.again")
}

/// What the writer goes on with.
pub(super) enum Next {
    Message(Option<Message>),
    /// The oldest round in flight was answered.
    Answered(Vec<Appended>),
}

impl Writer {
    fn fleet(&mut self) -> Option<&mut Fleet> {
        match &mut self.path {
            CommitPath::Fleet(fleet) => Some(fleet),
            _ => None,
        }
    }

    /// The next message, or the answers of the oldest round in flight if
    /// they come first (no new round is taken while the pipeline is full).
    pub(super) fn next(&mut self, rx: &mut mpsc::Receiver<Message>) -> Next {
        let Some(fleet) = self.fleet().filter(|fleet| !fleet.rounds.is_empty()) else {
            return Next::Message(rx.blocking_recv());
        };
        let room = fleet.rounds.len() < MAX_ROUNDS;
        let Fleet { rounds, waiter, .. } = fleet;
        let Some(head) = rounds.front_mut() else { return Next::Message(rx.blocking_recv()) };
        waiter.block_on(async {
            tokio::select! {
                biased;
                answers = head.sent.answers() => Next::Answered(answers),
                message = rx.recv(), if room => Next::Message(message),
            }
        })
    }

    /// Complete every round in flight, oldest first.
    pub(super) fn finish_rounds(&mut self) {
        loop {
            let Some(fleet) = self.fleet() else { return };
            let Fleet { rounds, waiter, .. } = fleet;
            let Some(head) = rounds.front_mut() else { return };
            let answers = waiter.block_on(head.sent.answers());
            self.complete_oldest(answers);
        }
    }

    /// Plan `calls` on top of the rounds in flight and send their hooks.
    /// Unsettled hooks go first: a retry of one may be among them.
    pub(super) fn send_round(&mut self, mut calls: Vec<Call>) {
        let Some(fleet) = self.fleet() else { return };
        if !fleet.unsettled.is_empty() {
            let now_ms = calls.first().map_or_else(crate::queue::now_ms, |call| call.now_ms);
            calls.insert(0, self.settle_call(now_ms));
        }
        if calls.is_empty() {
            return;
        }
        let mut round = Round::new(calls);
        let reread = match self.planner().reread(&round.calls) {
            Ok(reread) => reread,
            Err(e) => {
                // Answered after every round before it.
                self.finish_rounds();
                let replies = round.calls.iter().map(|_| Err(e.clone())).collect();
                return self.refuse_round(round, replies);
            }
        };
        let next_seq = self.next_seq;
        let (group, replies) = self.planner().plan(&mut round.calls, &reread, next_seq, next_seq);
        let Some(fleet) = self.fleet() else { return };
        round.sent = fleet.log.send(&group.to_log);
        (round.group, round.replies) = (group, replies);
        self.hand_out_seqs(round.group.next_seq);
        round.epoch = self.assume(&mut round.group);
        if let Some(fleet) = self.fleet() {
            fleet.rounds.push_back(round);
        }
    }

    /// The oldest round in flight was answered.
    pub(super) fn complete_oldest(&mut self, answers: Vec<Appended>) {
        let Some(mut round) = self.fleet().and_then(|fleet| fleet.rounds.pop_front()) else { return };
        if round.absorb(answers) {
            self.plan_again(Some(round));
        } else {
            self.finish(round);
        }
    }

    /// A round was not taken whole (`first`) or not written: it (if any)
    /// and every round in flight after it are planned again as one, on
    /// what the store holds, until the log takes that group whole. What
    /// was assumed of them is forgotten first.
    fn plan_again(&mut self, first: Option<Round>) {
        let mut rounds: Vec<Round> = first.into_iter().collect();
        while let Some(fleet) = self.fleet() {
            let Some(mut later) = fleet.rounds.pop_front() else { break };
            let answers = fleet.waiter.block_on(later.sent.answers());
            later.absorb(answers);
            rounds.push(later);
        }
        self.forget_assumptions();
        if rounds.is_empty() {
            return;
        }
        let mut round = Round::merge(rounds);
        if self.fleet().is_some_and(|fleet| !fleet.unsettled.is_empty()) {
            let now_ms = crate::queue::now_ms();
            let settling = self.settle_call(now_ms);
            round.copies.insert(0, (settling.entries.clone(), Batch::new()));
            round.calls.insert(0, settling);
        }
        round.restore();
        let reread = match self.planner().reread(&round.calls) {
            Ok(reread) => reread,
            Err(e) => {
                let replies = round.calls.iter().map(|_| Err(e.clone())).collect();
                return self.refuse_round(round, replies);
            }
        };
        loop {
            let next_seq = self.next_seq;
            let (mut group, replies) = self.planner().plan(&mut round.calls, &reread, next_seq, next_seq);
            group.logged_through = round.group.logged_through;
            self.hand_out_seqs(group.next_seq);
            let Some(fleet) = self.fleet() else { return };
            let mut sent = fleet.log.send(&group.to_log);
            let answers = fleet.waiter.block_on(sent.answers());
            (round.group, round.replies) = (group, replies);
            if !round.absorb(answers) {
                break;
            }
            round.restore();
        }
        round.epoch = self.assume(&mut round.group);
        self.finish(round);
    }

    /// Write a round the log took whole and hand its answers to the syncer.
    fn finish(&mut self, round: Round) {
        let Some(fleet) = self.fleet() else { return };
        let held = std::mem::take(&mut fleet.unsettled);
        let in_flight = fleet.resent_in_flight();
        let Round { calls, copies, mut group, replies, epoch, .. } = round;
        let logged: Vec<&[Prepared]> = copies.iter().map(|(entries, _)| entries.as_slice()).collect();
        if logged.iter().copied().flatten().any(|entry| matches!(entry.logged, Logged::Failed { .. })) {
            self.stats.last_failure_ms.store(crate::queue::now_ms(), Ordering::Relaxed);
        }
        let leftovers = unsettled_after(&calls, &logged, &replies, false);
        let unsettled_seqs = held.iter().chain(&leftovers).filter_map(resend_seq);
        let mark = self.next_mark(&group, unsettled_seqs.chain(in_flight).collect());
        if self.fleet().is_some_and(|fleet| mark != fleet.settled) {
            group.batch.put(Cf::Meta, meta::FLEET_SETTLED.to_vec(), mark.encode());
        }
        let with = |mut held: Vec<Prepared>, more: Vec<Prepared>| {
            held.extend(more);
            held
        };
        if group.batch.is_empty() {
            self.keep_unsettled(with(held, leftovers), None);
            return self.hand_over(calls, replies, 0);
        }
        group.seal_counters();
        if group.hooks > 0 {
            group.batch.put(Cf::Meta, meta::NEXT_SEQ.to_vec(), group.next_seq.to_be_bytes().to_vec());
        }
        match self.write(&group) {
            Ok(()) => {
                self.keep_unsettled(with(held, leftovers), Some(mark));
                self.made_visible(&group, epoch);
                self.hand_over(calls, replies, group.hooks);
            }
            Err(refusal) => {
                // What the log took and the store did not is unsettled,
                // and every round after this one assumed it.
                self.keep_unsettled(with(held, unsettled_after(&calls, &logged, &replies, true)), None);
                self.stats.last_failure_ms.store(crate::queue::now_ms(), Ordering::Relaxed);
                let refused = replies
                    .into_iter()
                    .zip(&calls)
                    .map(|(reply, call)| refuse(reply, call.kind, &refusal, false))
                    .collect();
                self.hand_over(calls, refused, 0);
                self.plan_again(None);
            }
        }
    }

    /// Answer a round that was not planned: every hook the log may hold of
    /// it is unsettled.
    fn refuse_round(&mut self, round: Round, replies: Replies) {
        let leftovers = unsettled_after(&round.calls, &round.logged(), &replies, true);
        let mut unsettled = self.fleet().map(|fleet| std::mem::take(&mut fleet.unsettled)).unwrap_or_default();
        unsettled.extend(leftovers);
        self.keep_unsettled(unsettled, None);
        self.hand_over(round.calls, replies, 0);
    }

    fn keep_unsettled(&mut self, unsettled: Vec<Prepared>, mark: Option<Settled>) {
        let count = unsettled.len() as u64;
        if let Some(fleet) = self.fleet() {
            fleet.unsettled = unsettled;
            if let Some(mark) = mark {
                fleet.settled = mark;
            }
        }
        self.stats.unsettled.store(count, Ordering::Relaxed);
    }

    /// Hand a round's answers to the syncer, in the order rounds were sent.
    fn hand_over(&mut self, calls: Vec<Call>, replies: Replies, hooks: u64) {
        let answered = calls.iter().filter(|call| !call.is_internal()).count();
        self.stats.calls.fetch_add(answered as u64, Ordering::Relaxed);
        let Some(fleet) = self.fleet() else { return };
        fleet.syncer.hand_over(Unsynced {
            answers: calls.into_iter().zip(replies).map(|(call, reply)| (call.reply, call.kind, reply)).collect(),
            wrote: hooks > 0,
            hooks,
        });
    }

    /// Drop what was assumed of rounds that did not commit: what the
    /// writer keeps of the store is read again from it.
    fn forget_assumptions(&mut self) {
        if let Err(e) = self.reload_view() {
            // The window is forgotten all the same; the counts catch up
            // with the next reload.
            tracing::warn!("cannot read the tenant book and key counts again after a failed round: {e}");
            self.forget_prefetches();
        }
    }

    /// The settled mark once this group is written, with `seqs` still
    /// unsettled (held, or carried again by later rounds): past every hook
    /// of this store the log holds, unless one may still be there
    /// uncommitted.
    fn next_mark(&mut self, group: &Group, mut seqs: Vec<u64>) -> Settled {
        let Some(fleet) = self.fleet() else { return Settled::default() };
        let base = if fleet.settled.log == fleet.log_identity { fleet.settled.position } else { 0 };
        let scanned = std::mem::take(&mut fleet.scanned_through);
        let position = if seqs.is_empty() { base.max(group.logged_through).max(scanned) } else { base };
        seqs.sort_unstable();
        Settled { log: fleet.log_identity.clone(), position, seqs }
    }

    /// The unsettled hooks as a call of their own, due at `now_ms`. Their
    /// rows are due anew, and so are their places in their ordered lines:
    /// a place kept waiting from the first try would write the line entry
    /// of a waiting row (no due entry) beside a row that says due, which no
    /// claim and no look for the line's head would ever move (the line
    /// stopped for good). A due row behind its line's head is made waiting
    /// by the claim that meets it.
    fn settle_call(&mut self, now_ms: u64) -> Call {
        let mut entries = self.fleet().map(|fleet| std::mem::take(&mut fleet.unsettled)).unwrap_or_default();
        for entry in &mut entries {
            match crate::queue::rows::rows_anew(&entry.rows, now_ms) {
                Ok(rows) => {
                    entry.lines = super::LinePlace::of_rows(&rows);
                    entry.rows = rows;
                }
                Err(e) => tracing::error!("an unsettled hook's rows do not decode: {e}"),
            }
        }
        self.internal_call(entries, now_ms)
    }

    fn internal_call(&self, entries: Vec<Prepared>, now_ms: u64) -> Call {
        Call {
            kind: Kind::Settle,
            entries,
            extra: Batch::new(),
            deadline: None,
            now_ms,
            prefetch_epoch: self.stats.epoch.load(Ordering::Acquire),
            reply: crate::queue::reply::Reply::Each(Vec::new()),
        }
    }

    /// A call committing the hooks this store logged past its settled mark
    /// (and past `floor`) that it lacks: after a restart, or a store that
    /// lost writes no sync covered. Their seqs are passed, and the mark
    /// moves past what was read (see `settle`). Runs with no round in
    /// flight.
    pub(super) fn settle_from_log(&mut self, floor: u64) -> Result<Call, QueueError> {
        let now_ms = crate::queue::now_ms();
        let mut call = self.internal_call(Vec::new(), now_ms);
        let store = self.store.clone();
        let Some(fleet) = self.fleet() else { return Ok(call) };
        let mark = Settled::load(store.as_ref())?;
        // Read from the mark, not from the floor: a hook this store logged
        // and a peer then took still holds a seq this store must never hand
        // out again (a taker would read that seq's outcome as its own).
        let from = mark.read_from(&fleet.log_identity, 0);
        let (logged, last) = fleet.log.logged_since(from).map_err(|e| QueueError::Intake(e.to_string()))?;
        let in_memory = fleet.unsettled.iter().filter_map(resend_seq).collect();
        fleet.scanned_through = last;
        let durable_next = super::recover_next_seq(store.as_ref())?;
        if let Some(past) = logged.iter().map(|hook| hook.seq + 1).max() {
            self.hand_out_seqs(past);
        }
        // What a peer took is its to deliver.
        let logged = logged.into_iter().filter(|hook| hook.position > floor).collect();
        let from = from.max(floor);
        for hook in settle::candidates(store.as_ref(), logged, &mark, durable_next, &in_memory)? {
            let handoff = match crate::queue::handoff::decode(&hook.payload) {
                Ok(handoff) => handoff,
                Err(e) => {
                    tracing::error!(
                        position = hook.position,
                        seq = hook.seq,
                        "a hook this store logged does not decode: {e}"
                    );
                    continue;
                }
            };
            let rows = crate::queue::rows::rows_anew(&handoff.rows, now_ms)?;
            call.entries.push(Prepared {
                envelope: handoff.envelope,
                encoded: handoff.encoded,
                lines: super::LinePlace::of_rows(&rows),
                rows,
                dedupe: None,
                prefetched: None,
                msg_id: None,
                logged: Logged::Under(hook.seq),
            });
        }
        if !call.entries.is_empty() {
            tracing::warn!(
                hooks = call.entries.len(),
                from,
                through = last,
                "committing hooks this store logged and lacks"
            );
        }
        Ok(call)
    }

    /// Whether a read of the log left a mark to write.
    pub(super) fn scanned_log(&mut self) -> bool {
        self.fleet().is_some_and(|fleet| fleet.scanned_through > 0)
    }
}

/// The hooks of a round that the log may hold and the store will not
/// (`store_failed`: its write was refused), to append again: those whose
/// round failed after they left, unsettled ones the log did not vouch for,
/// and logged ones whose call or write was refused. Only hooks with a
/// message id: a retry can meet only those as a duplicate. (One without,
/// left in the log, is delivered by a takeover of this node, if one comes;
/// its provider's retry is a hook of its own.)
fn unsettled_after(calls: &[Call], logged: &[&[Prepared]], replies: &Replies, store_failed: bool) -> Vec<Prepared> {
    let mut unsettled = Vec::new();
    for ((call, entries), reply) in calls.iter().zip(logged).zip(replies) {
        let refused = store_failed || reply.is_err();
        for entry in entries.iter().filter(|entry| entry.msg_id.is_some()) {
            let seq = match entry.logged {
                Logged::Failed { seq, sent } if sent || call.kind == Kind::Settle => seq,
                Logged::Under(seq) if refused => seq,
                Logged::Resend(seq) => seq,
                _ => continue,
            };
            unsettled.push(Prepared { logged: Logged::Resend(seq), ..entry.clone() });
        }
    }
    unsettled
}

fn resend_seq(entry: &Prepared) -> Option<u64> {
    match entry.logged {
        Logged::Resend(seq) => Some(seq),
        _ => None,
    }
}
