//! Delivery row transitions, as dispatch drives them:
//!
//! ```text
//! due ──claim──▶ inflight ──complete──▶ (gone; the hook too, with its last row)
//!                   │  ├──filter─▶ filtered (gone with the hook's last other row)
//!                   │  ├──retry──▶ due (at a later time)
//!                   │  └──bury───▶ dead
//!                   └──(boot) recover──▶ due (now)
//! due ──claim, behind its line's head──▶ waiting ──head leaves──▶ (named ready) ──claim──▶ inflight
//! ```
//!
//! (Waiting rows are those of ordered bindings: see `lines`; claims are in
//! `claim`.)
//!
//! Each transition is one batch: the row, its old index entry out, its new
//! index entry in, and the counters that count them. Transitions are
//! serialised with each other (not with the writer, whose rows are new), so
//! a check-then-write such as "is this the hook's last row?" is exact.
//! They are written without fsync: losing one to power loss only makes a
//! row be delivered again, which at-least-once delivery allows.

use std::collections::{HashMap, HashSet};

use super::lines::{Leaving, Promoted};
use super::rows::{DeliveryRow, LastFailure, RowState};
use super::{Core, DeadLetters, Deliveries, Queue, QueueError, counter_key};
use crate::error_class::ErrorClass;
use crate::store::keys::{self, counters, deliveries, hooks, index, prefix_end};
use crate::store::{Batch, Cf, Durability, Scan};

/// What an attempt's outcome does to its claimed row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Settlement {
    /// Delivered: the row goes, and the hook with its last row.
    Complete,
    /// Failed, to be tried again at `due_at`; the row keeps why.
    Retry { due_at: u64, failure: LastFailure },
    /// Not started (its sink's breaker opened): due again at `due_at`,
    /// attempts unchanged.
    Park { due_at: u64 },
    /// Given up on.
    Bury { dead_at: u64, reason: String, class: ErrorClass },
    /// A transform dropped the hook for this sink at `at`: nothing more
    /// is tried (a fleet hears of it as delivered: there is nothing for a
    /// taker to do).
    Filter { at: u64, reason: String },
}

/// A row's outcome once nothing more will be tried on its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FinalOutcome {
    /// Nothing is left to do: delivered, or dropped by a transform, or
    /// removed with its tenant's erase (a taker passes it over).
    Delivered,
    Dead {
        dead_at: u64,
        reason: String,
        class: ErrorClass,
        attempts: u32,
    },
}

/// Told of final outcomes once they are written (`fleet`: published, so
/// that a node taking this one over neither delivers a delivered row
/// again nor loses a dead letter). Called on the settler's thread: it must
/// only hand them on.
pub trait OutcomeLog: Send + Sync + 'static {
    fn record(&self, outcomes: Vec<(u64, u16, FinalOutcome)>);

    /// Outcomes recorded a while ago are still not published: delivering
    /// more would only add to what a takeover delivers again, so claims
    /// close until it catches up.
    fn behind(&self) -> bool {
        false
    }
}

/// While outcomes are behind, dispatch looks again after this long.
const OUTCOMES_BEHIND_RECHECK_MS: u64 = 20;

impl Core {
    /// Write a transition's batch, noting the due entries it adds.
    pub(super) fn write_rows(&self, batch: &Batch, durability: Durability) -> Result<(), QueueError> {
        self.store.write(batch, durability)?;
        self.due_floor.note(batch);
        Ok(())
    }

    /// Move `row` from its current state to `next` in `batch`, with the
    /// counters of both states.
    /// A hook goes with its last row: if every row hook `seq` still has is
    /// one `batch` deletes (`gone`) or a filtered one (stored so, or
    /// filed so by `batch`: `filtered_now`), the filtered rows and the
    /// hook are deleted too.
    pub(super) fn last_row_takes_its_hook(
        &self,
        batch: &mut Batch,
        seq: u64,
        gone: &HashSet<(u64, u16)>,
        filtered_now: &HashMap<(u64, u16), DeliveryRow>,
    ) -> Result<(), QueueError> {
        let rows = self.store.scan(&Scan::prefix(Cf::Deliveries, &deliveries::of_hook(seq), usize::MAX))?;
        let mut filtered = Vec::new();
        for (key, value) in &rows {
            let Some(id) = deliveries::parse(key) else { continue };
            if gone.contains(&id) {
                continue;
            }
            if let Some(row) = filtered_now.get(&id) {
                filtered.push(row.clone());
                continue;
            }
            match DeliveryRow::decode(id.0, id.1, value) {
                Ok(row) if matches!(row.state, RowState::Filtered { .. }) => filtered.push(row),
                // A live row (or one unreadable: kept, for the repair).
                _ => return Ok(()),
            }
        }
        for row in &filtered {
            Core::move_row(batch, row, None);
        }
        batch.delete(Cf::Hooks, hooks::hook(seq));
        Ok(())
    }

    /// Move `row` (as the store holds it) to `next`, or delete it, in
    /// `batch`. Only what changes is written: index entries and counters
    /// the two states share (an ordered row's line entry, `pending` for a
    /// waiting row made due) are left as they are.
    pub(super) fn move_row(batch: &mut Batch, row: &DeliveryRow, next: Option<&DeliveryRow>) {
        let before = row.index_entries();
        let Some(next) = next else {
            for (key, _) in before {
                batch.delete(Cf::Index, key);
            }
            count(batch, &row.tenant, row.counted_as(), -1);
            batch.delete(Cf::Deliveries, row.key());
            batch.delete(Cf::Index, row.owner_key());
            batch.add_counter(counter_key(None, "bytes"), -(row.bytes as i64));
            batch.add_counter(counter_key(Some(&row.tenant), "bytes"), -(row.bytes as i64));
            return;
        };
        let after = next.index_entries();
        for (key, _) in &before {
            if !after.iter().any(|(kept, _)| kept == key) {
                batch.delete(Cf::Index, key.clone());
            }
        }
        for entry in after {
            if !before.contains(&entry) {
                batch.put(Cf::Index, entry.0, entry.1);
            }
        }
        batch.put(Cf::Deliveries, next.key(), next.encode());
        let (was, is) = (row.counted_as(), next.counted_as());
        let gone: Vec<&str> = was.iter().copied().filter(|kind| !is.contains(kind)).collect();
        let new: Vec<&str> = is.iter().copied().filter(|kind| !was.contains(kind)).collect();
        count(batch, &row.tenant, &gone, -1);
        count(batch, &next.tenant, &new, 1);
    }
}

impl Deliveries {
    /// The row was delivered: it goes, and the hook with its last row.
    pub fn complete(&self, seq: u64, sink: u16) -> Result<(), QueueError> {
        self.settle(&[(seq, sink, Settlement::Complete)])
    }

    /// The attempt failed for `failure` and will be retried at `due_at`.
    pub fn retry(&self, seq: u64, sink: u16, due_at: u64, failure: LastFailure) -> Result<(), QueueError> {
        self.settle(&[(seq, sink, Settlement::Retry { due_at, failure })])
    }

    /// Put a claimed row back, due at `due_at`, its attempts unchanged:
    /// for a row dispatch could not start (its sink's breaker is open, or
    /// its sink has no free slot).
    pub fn park(&self, seq: u64, sink: u16, due_at: u64) -> Result<(), QueueError> {
        self.settle(&[(seq, sink, Settlement::Park { due_at })])
    }

    /// When the earliest due row is due, if any row is.
    pub fn next_due_at(&self) -> Result<Option<u64>, QueueError> {
        // Outcomes behind: look again shortly, as nothing wakes dispatch
        // when they catch up.
        if self.outcomes_behind() {
            return Ok(Some(super::now_ms() + OUTCOMES_BEHIND_RECHECK_MS));
        }
        // Paused: nothing is due, so dispatch sleeps until it is woken.
        if !self.claims_open() {
            return Ok(None);
        }
        // Lines' heads named ready can be claimed now.
        if !self.ready.is_empty() {
            return Ok(Some(0));
        }
        let from = index::due_from(self.due_floor.peek());
        let to = prefix_end(&[index::DUE]);
        let first = self.store.scan(&Scan { cf: Cf::Index, from, to, reverse: false, limit: 1 })?;
        if self.index_damaged() {
            // Rows the scan could not read may be due: the next claim
            // rebuilds the index.
            return Ok(Some(0));
        }
        Ok(first.first().and_then(|(key, _)| index::due_time(key)))
    }

    /// The row is given up on. A row a replay revived counts against that
    /// replay (a job that keeps reviving rows that die pauses itself).
    pub fn bury(&self, seq: u64, sink: u16, dead_at: u64, reason: &str, class: ErrorClass) -> Result<(), QueueError> {
        self.settle(&[(seq, sink, Settlement::Bury { dead_at, reason: reason.to_string(), class })])
    }

    /// Record what became of claimed rows, in one batch: one read of the
    /// rows, one write, so a drain writes once per batch of outcomes, not
    /// once per delivery. A row that is gone (its tenant erased meanwhile)
    /// is passed over, as is a second outcome for the same row.
    pub fn settle(&self, outcomes: &[(u64, u16, Settlement)]) -> Result<(), QueueError> {
        let _serial = self.transitions.lock().unwrap_or_else(|e| e.into_inner());
        let keys: Vec<Vec<u8>> = outcomes.iter().map(|(seq, sink, _)| deliveries::row(*seq, *sink)).collect();
        let values = self.store.multi_get(Cf::Deliveries, &keys)?;
        let mut batch = Batch::new();
        let mut seen = HashSet::with_capacity(outcomes.len());
        // Rows this batch deletes, rows it files as filtered, and the
        // hooks they belong to.
        let mut gone = HashSet::new();
        let mut filtered = HashMap::new();
        let mut emptied = Vec::new();
        let mut finals = Vec::new();
        // Rows leaving their ordered lines: the rows behind them move up.
        let mut leaving = Vec::new();
        for ((seq, sink, settlement), value) in outcomes.iter().zip(values) {
            let (seq, sink) = (*seq, *sink);
            let Some(bytes) = value.filter(|_| seen.insert((seq, sink))) else { continue };
            let row = DeliveryRow::decode(seq, sink, &bytes)
                .map_err(|e| QueueError::Corrupt(format!("row {seq}/{sink}: {e}")))?;
            let state = match settlement {
                Settlement::Complete => {
                    finals.push((seq, sink, FinalOutcome::Delivered));
                    if let Some(line) = row.line_id() {
                        leaving.push(Leaving { line, seq, skipped: None });
                    }
                    Core::move_row(&mut batch, &row, None);
                    if row.rows_of_hook == 1 {
                        // Its hook's only row: the hook goes with it.
                        batch.delete(Cf::Hooks, hooks::hook(seq));
                    } else {
                        gone.insert((seq, sink));
                        emptied.push(seq);
                    }
                    continue;
                }
                Settlement::Filter { at, reason } => {
                    finals.push((seq, sink, FinalOutcome::Delivered));
                    // A dropped hook never told its sink of the dead one
                    // before it: the next delivery of its key does.
                    if let Some(line) = row.line_id() {
                        leaving.push(Leaving { line, seq, skipped: row.previous_dead.clone() });
                    }
                    if row.rows_of_hook == 1 {
                        Core::move_row(&mut batch, &row, None);
                        batch.delete(Cf::Hooks, hooks::hook(seq));
                    } else {
                        let state = RowState::Filtered { at: *at, reason: reason.clone() };
                        let next = DeliveryRow { attempts: row.attempts + 1, state, ..row.clone() };
                        Core::move_row(&mut batch, &row, Some(&next));
                        filtered.insert((seq, sink), next);
                        emptied.push(seq);
                    }
                    continue;
                }
                Settlement::Retry { due_at, .. } | Settlement::Park { due_at } => RowState::Due { due_at: *due_at },
                Settlement::Bury { dead_at, reason, class } => {
                    if let Some(replay) = &row.replay_id {
                        batch.add_counter(counters::replay_died(replay), 1);
                    }
                    let dead = FinalOutcome::Dead {
                        dead_at: *dead_at,
                        reason: reason.clone(),
                        class: *class,
                        attempts: row.attempts + 1,
                    };
                    finals.push((seq, sink, dead));
                    if let (Some(line), Some(order)) = (row.line_id(), &row.line) {
                        if order.hold {
                            tracing::info!(
                                tenant = %line.tenant, source = %line.source, sink, key = %line.key, seq,
                                "ordering key held: its hook is dead; the hooks behind it wait for its replay or a release"
                            );
                        } else {
                            leaving.push(Leaving { line, seq, skipped: self.hook_id(seq)? });
                        }
                    }
                    RowState::Dead { dead_at: *dead_at, reason: reason.clone(), class: Some(*class) }
                }
            };
            let attempts = match settlement {
                Settlement::Park { .. } => row.attempts,
                _ => row.attempts + 1,
            };
            let last_failure = match settlement {
                Settlement::Retry { failure, .. } => Some(failure.clone()),
                _ => row.last_failure.clone(),
            };
            Core::move_row(&mut batch, &row, Some(&DeliveryRow { attempts, state, last_failure, ..row.clone() }));
        }
        let promoted = match leaving.is_empty() {
            true => Promoted::default(),
            false => self.promote_lines(&mut batch, leaving, self.config.clock.now_ms())?,
        };
        emptied.sort_unstable();
        emptied.dedup();
        for seq in emptied {
            self.last_row_takes_its_hook(&mut batch, seq, &gone, &filtered)?;
        }
        if batch.is_empty() {
            return Ok(());
        }
        self.write_rows(&batch, Durability::Buffered)?;
        let made_due = promoted.due;
        self.lines_promoted(promoted);
        if let Some(log) = self.outcome_log.get().filter(|_| !finals.is_empty()) {
            log.record(finals);
        }
        if made_due > 0
            || outcomes.iter().any(|(_, _, s)| matches!(s, Settlement::Retry { .. } | Settlement::Park { .. }))
        {
            // Rows are due again, written after dispatch last looked for
            // the next due time: wake it.
            self.stats.committed.notify_one();
        }
        Ok(())
    }
}

impl DeadLetters {
    /// Revive dead rows for a replay: each still dead becomes due now with
    /// fresh attempts and `replay_id`, in one synced batch with `extra`
    /// (the job's cursor). Rows no longer dead are skipped, so a replay
    /// run twice moves nothing twice. Returns how many were revived.
    pub fn revive(&self, rows: &[(u64, u16)], replay_id: &str, now_ms: u64, extra: Batch) -> Result<usize, QueueError> {
        let _serial = self.transitions.lock().unwrap_or_else(|e| e.into_inner());
        let keys: Vec<Vec<u8>> = rows.iter().map(|(seq, sink)| deliveries::row(*seq, *sink)).collect();
        let mut batch = Batch::new();
        let mut revived = 0;
        for ((seq, sink), value) in rows.iter().zip(self.store.multi_get(Cf::Deliveries, &keys)?) {
            let Some(bytes) = value else { continue };
            let row = DeliveryRow::decode(*seq, *sink, &bytes)
                .map_err(|e| QueueError::Corrupt(format!("row {seq}/{sink}: {e}")))?;
            if !matches!(row.state, RowState::Dead { .. }) {
                continue;
            }
            // A dead head that holds its line is delivered first, then the
            // rows behind it; one its line skipped is out of line for good.
            let line = row.line.clone().filter(|line| line.hold);
            let next = DeliveryRow {
                attempts: 0,
                replay_id: Some(replay_id.to_string()),
                state: RowState::Due { due_at: now_ms },
                last_failure: None,
                line,
                ..row.clone()
            };
            Core::move_row(&mut batch, &row, Some(&next));
            revived += 1;
        }
        batch.extend(extra);
        self.write_rows(&batch, Durability::Synced)?;
        if revived > 0 {
            // Due rows appeared outside the writer: wake dispatch.
            self.stats.committed.notify_one();
        }
        Ok(revived)
    }

    /// Rows a replay revived that died again.
    pub fn replay_died(&self, replay_id: &str) -> Result<i64, QueueError> {
        Ok(self.store.counter(&counters::replay_died(replay_id))?)
    }
}

impl Queue {
    /// On boot, before anything is claimed: every row that was inflight
    /// when the node stopped is due again now, and every ordered line's
    /// head can be claimed (`recover_lines`). Returns how many rows were
    /// inflight.
    pub fn recover_inflight(&self, now_ms: u64) -> Result<usize, QueueError> {
        const CHUNK: usize = 4096;
        let serial = self.transitions.lock().unwrap_or_else(|e| e.into_inner());
        let prefix = [index::INFLIGHT];
        let mut from = prefix.to_vec();
        let mut recovered = 0;
        loop {
            // Resume past the last key: rescanning from the prefix would
            // walk every tombstone the earlier chunks left.
            let to = prefix_end(&prefix);
            let inflight = self.store.scan(&Scan { cf: Cf::Index, from, to, reverse: false, limit: CHUNK })?;
            let positions: Vec<(u64, u16)> = inflight
                .iter()
                .map(|(key, _)| {
                    index::parse_inflight(key).ok_or_else(|| QueueError::Corrupt("inflight index key".into()))
                })
                .collect::<Result<_, _>>()?;
            let row_keys: Vec<Vec<u8>> = positions.iter().map(|(seq, sink)| deliveries::row(*seq, *sink)).collect();
            let rows = self.store.multi_get(Cf::Deliveries, &row_keys)?;
            let mut batch = Batch::new();
            for (((seq, sink), value), (index_key, _)) in positions.iter().zip(rows).zip(&inflight) {
                match value {
                    Some(bytes) => {
                        let row = DeliveryRow::decode(*seq, *sink, &bytes)
                            .map_err(|e| QueueError::Corrupt(format!("row {seq}/{sink}: {e}")))?;
                        let next = DeliveryRow { state: RowState::Due { due_at: now_ms }, ..row.clone() };
                        Core::move_row(&mut batch, &row, Some(&next));
                        recovered += 1;
                    }
                    None => {
                        batch.delete(Cf::Index, index_key.clone());
                    }
                }
            }
            let last = inflight.len() < CHUNK;
            // One fsync at the end covers the chunks before it (one WAL).
            let durability = if last { Durability::Synced } else { Durability::Buffered };
            self.write_rows(&batch, durability)?;
            match inflight.last() {
                Some((key, _)) if !last => from = keys::after(key),
                _ => break,
            }
        }
        drop(serial);
        self.recover_lines(now_ms)?;
        Ok(recovered)
    }
}

/// Count a row of `tenant` in (`sign` 1) or out of (-1) `kinds`.
fn count(batch: &mut Batch, tenant: &str, kinds: &[&str], sign: i64) {
    for kind in kinds {
        batch.add_counter(counter_key(None, kind), sign);
        batch.add_counter(counter_key(Some(tenant), kind), sign);
    }
}
