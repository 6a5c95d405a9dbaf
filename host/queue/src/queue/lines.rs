//! Ordered lines: the rows of one ordering key of one binding, in seq
//! order (`index::line`). Only a line's head is ever delivered, alone
//! or (for a batching sink) with a run of the rows right behind it in one
//! call:
//!
//! - a claim that meets a due row behind its line's head makes it
//!   `waiting` (out of the due index, found again by its line);
//! - a head that retries stays the head, so the rows behind it wait
//!   without spending their attempts;
//! - when a head leaves its line (delivered, dead under `skip`, purged,
//!   released), the next row can be claimed at once: it stays `waiting`
//!   and is named in memory (`ready`), or, when it must carry the id of
//!   the hook skipped before it, is written due with that id;
//! - a head dead under `hold` stays, and its line is held (`index::held`)
//!   until a replay delivers it or an operator releases it;
//! - rows of a run behind a row that did not get through are put back by
//!   dispatch, to go again after it.
//!
//! Every step runs under the transitions lock, so a claim never judges a
//! line while a settle moves its head.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::ready::RowId;
use super::rows::{DeliveryRow, Line, RowState};
use super::{Core, DeadLetters, Queue, QueueError};
use crate::store::keys::index::{self, LineId};
use crate::store::keys::{self, deliveries, hooks, prefix_end};
use crate::store::{Batch, Cf, Durability, Scan};

/// Line entries read per step of a walk for a line's head, after the
/// first step.
const LINE_STEP: usize = 16;
/// Entries a walk's first step reads past the rows leaving: the next
/// heads of the line, kept in memory (`DueFloor::saw_ahead`).
const READ_AHEAD: usize = 16;

/// A row leaving its line in a batch being built.
pub(super) struct Leaving {
    pub line: LineId,
    pub seq: u64,
    /// The id of a dead hook skipped that the next delivery of the key
    /// names: the row's own (it is dead and skipped), or the one it carried
    /// and never delivered (it was filtered).
    pub skipped: Option<String>,
}

/// What left one line in a batch: the seqs leaving, and the last skipped
/// dead hook among them (its seq and id).
struct LineLeft {
    line: LineId,
    leaving: HashSet<u64>,
    skipped: Option<(u64, String)>,
}

/// What [`Core::promote_lines`] did: rows that can be claimed now (made
/// due, or named ready), and the floors the lines have, the gaps they keep
/// and the heads named ready once its batch is written.
#[derive(Default)]
pub(super) struct Promoted {
    pub due: usize,
    pub floors: Vec<(LineId, u64)>,
    pub gaps: Vec<LineId>,
    pub ready: Vec<RowId>,
}

/// A line stopped by its dead head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldLine {
    pub line: LineId,
    /// The dead head's seq.
    pub seq: u64,
}

impl Core {
    /// The seq of `line`'s head: its first entry not `leaving` (rows the
    /// batch being built takes out) whose row exists, with that row unless
    /// it is `known` (a row the caller holds), which is not read again.
    /// An entry whose row is gone is dropped in `batch`.
    pub(super) fn line_head(
        &self,
        line: &LineId,
        leaving: &HashSet<u64>,
        known: Option<u64>,
        batch: &mut Batch,
    ) -> Result<Option<(u64, Option<DeliveryRow>)>, QueueError> {
        let prefix = index::line_prefix(line);
        match known {
            Some(known) => self.due_floor.lower_line(line, known),
            // The entries a walk read ahead: the first not leaving whose
            // row is in the line heads it, found without a seek.
            // (One gone or out of line sends the walk, which drops it.)
            None => {
                if let Some(seq) = self.due_floor.next_ahead(line, leaving)
                    && let Some(row) = self.row_in_line(line, seq)?
                {
                    return Ok(Some((seq, Some(row))));
                }
            }
        }
        let floor = self.due_floor.line_floor(line);
        let mut from = line_start(line, &prefix, floor);
        // Past the floor, the head is nearly always the first entry, or
        // the one after the rows leaving; a few more are read ahead for
        // the next heads.
        let mut step = leaving.len() + READ_AHEAD;
        let mut first_step = true;
        loop {
            let entries =
                self.store.scan(&Scan { cf: Cf::Index, from, to: prefix_end(&prefix), reverse: false, limit: step })?;
            if let (Some(floor), true) = (floor, std::mem::take(&mut first_step)) {
                let seqs: Vec<u64> = entries.iter().filter_map(|(key, _)| index::parse_line_seq(key)).collect();
                self.due_floor.saw_ahead(line, floor, &seqs);
            }
            for (key, _) in &entries {
                let seq = index::parse_line_seq(key).ok_or_else(|| QueueError::Corrupt("line index key".into()))?;
                if leaving.contains(&seq) {
                    continue;
                }
                let row = match known == Some(seq) {
                    true => None,
                    false => match self.row_in_line(line, seq)? {
                        Some(row) => Some(row),
                        None => {
                            tracing::warn!(
                                seq,
                                sink = line.sink,
                                "line entry whose row is gone or out of line; dropping it"
                            );
                            batch.delete(Cf::Index, key.clone());
                            continue;
                        }
                    },
                };
                // Nothing live is below the first live entry (rows leaving
                // with the batch being built are above it).
                if leaving.iter().all(|leaver| *leaver > seq) {
                    self.due_floor.saw_head(line, floor, seq);
                }
                return Ok(Some((seq, row)));
            }
            match entries.last() {
                Some((key, _)) if entries.len() == step => from = keys::after(key),
                _ => return Ok(None),
            }
            step = LINE_STEP;
        }
    }

    /// Whether `seq`, a row of `line` the caller holds, is the line's head.
    /// Most often the line's floor says so (the row that left before it
    /// raised the floor to it) and the store is not read.
    pub(super) fn is_line_head(&self, line: &LineId, seq: u64, batch: &mut Batch) -> Result<bool, QueueError> {
        if self.due_floor.heads_line(line, seq) {
            return Ok(true);
        }
        Ok(self.line_head(line, &HashSet::new(), Some(seq), batch)?.map(|(head, _)| head) == Some(seq))
    }

    /// The rows right behind `head` in `line`, waiting or due, up to
    /// `rows` of them and `bytes` of bodies: the rest of a run a claim
    /// hands out with its head. Stops at the first row that is neither
    /// (or is gone), so a run is always consecutive. `made_waiting`: rows
    /// the claim's batch has moved to waiting, as they are now.
    pub(super) fn line_run(
        &self,
        line: &LineId,
        head: u64,
        rows: usize,
        bytes: u64,
        made_waiting: &HashMap<(u64, u16), DeliveryRow>,
    ) -> Result<Vec<DeliveryRow>, QueueError> {
        if rows == 0 {
            return Ok(Vec::new());
        }
        let prefix = index::line_prefix(line);
        let from = index::line(line, head.saturating_add(1));
        let entries =
            self.store.scan(&Scan { cf: Cf::Index, from, to: prefix_end(&prefix), reverse: false, limit: rows })?;
        let seqs: Vec<u64> = entries
            .iter()
            .map(|(key, _)| index::parse_line_seq(key).ok_or_else(|| QueueError::Corrupt("line index key".into())))
            .collect::<Result<_, _>>()?;
        let keys: Vec<Vec<u8>> = seqs.iter().map(|seq| deliveries::row(*seq, line.sink)).collect();
        let stored = self.store.multi_get(Cf::Deliveries, &keys)?;
        let mut run = Vec::new();
        let mut left = bytes;
        for (seq, value) in seqs.into_iter().zip(stored) {
            let row = match made_waiting.get(&(seq, line.sink)) {
                Some(row) => row.clone(),
                None => match value.map(|bytes| DeliveryRow::decode(seq, line.sink, &bytes)) {
                    Some(Ok(row)) => row,
                    // Gone or unreadable: the line's walk deals with it.
                    _ => break,
                },
            };
            let ready = matches!(row.state, RowState::Waiting | RowState::Due { .. });
            if !ready || row.line_id().as_ref() != Some(line) || row.bytes > left {
                break;
            }
            left -= row.bytes;
            run.push(row);
        }
        Ok(run)
    }

    /// Whether `line` holds any entry now (a hook committed into it waits
    /// behind them). Read by the committing caller, so it may be stale
    /// either way: see `recheck_lines`.
    pub(super) fn line_occupied(&self, line: &LineId) -> Result<bool, QueueError> {
        let prefix = index::line_prefix(line);
        let from = line_start(line, &prefix, self.due_floor.line_floor(line));
        let found =
            self.store.scan(&Scan { cf: Cf::Index, from, to: prefix_end(&prefix), reverse: false, limit: 1 })?;
        Ok(!found.is_empty())
    }

    /// Lines that commits wrote waiting rows to since the last look: a head
    /// that waits (the row it was behind left before it was written) is
    /// due at `now_ms`. Runs with the transitions lock held. Returns how
    /// many rows became due.
    pub(super) fn recheck_lines(&self, now_ms: u64) -> Result<usize, QueueError> {
        let lines = self.due_floor.take_recheck();
        if lines.is_empty() {
            return Ok(0);
        }
        let mut batch = Batch::new();
        let mut due = 0;
        for line in &lines {
            let Some((_, Some(row))) = self.line_head(line, &HashSet::new(), None, &mut batch)? else { continue };
            // A head named ready is claimed as it is.
            if self.ready.names((row.seq, row.sink)) {
                continue;
            }
            due += usize::from(move_up_if_waiting(&mut batch, &row, now_ms));
        }
        if !batch.is_empty()
            && let Err(e) = self.write_rows(&batch, Durability::Buffered)
        {
            // Looked at again by the next claim.
            self.due_floor.recheck_again(lines);
            return Err(e);
        }
        Ok(due)
    }

    /// The row `seq` of `line`, if it exists and is in it (a row damaged
    /// in the store and dead-lettered for it is not).
    fn row_in_line(&self, line: &LineId, seq: u64) -> Result<Option<DeliveryRow>, QueueError> {
        let Some(bytes) = self.store.get(Cf::Deliveries, &deliveries::row(seq, line.sink))? else { return Ok(None) };
        Ok(DeliveryRow::decode(seq, line.sink, &bytes)
            .ok()
            .filter(|row| row.in_line() && row.line_id().as_ref() == Some(line)))
    }

    /// The id of the hook stored under `seq`, for a gap marker.
    pub(super) fn hook_id(&self, seq: u64) -> Result<Option<String>, QueueError> {
        let Some(bytes) = self.store.get(Cf::Hooks, &hooks::hook(seq))? else { return Ok(None) };
        let envelope =
            super::Envelope::decode(seq, &bytes).map_err(|e| QueueError::Corrupt(format!("hook {seq}: {e}")))?;
        Ok(Some(envelope.id))
    }

    /// After rows leave their lines in `batch`: each line's new head, if
    /// it waits, is due at `now_ms`, and a head behind a skipped dead hook
    /// carries that hook's id. Returns how many rows became due, and the
    /// lines' floors to raise once the batch is written.
    pub(super) fn promote_lines(
        &self,
        batch: &mut Batch,
        left: Vec<Leaving>,
        now_ms: u64,
    ) -> Result<Promoted, QueueError> {
        let mut lines: BTreeMap<Vec<u8>, LineLeft> = BTreeMap::new();
        for Leaving { line, seq, skipped } in left {
            let entry = lines.entry(index::line_prefix(&line)).or_insert_with(|| LineLeft {
                line,
                leaving: HashSet::new(),
                skipped: None,
            });
            entry.leaving.insert(seq);
            if let Some(id) = skipped
                && entry.skipped.as_ref().is_none_or(|(last, _)| *last < seq)
            {
                entry.skipped = Some((seq, id));
            }
        }
        let mut promoted = Promoted::default();
        let mut room = self.ready.room();
        for LineLeft { line, leaving, skipped } in lines.into_values() {
            let Some((seq, Some(row))) = self.line_head(&line, &leaving, None, batch)? else {
                // Empty once written: new rows come with higher seqs, and
                // the first to be handed out names the skipped hook.
                if let Some((_, id)) = &skipped {
                    Core::leave_gap(batch, &line, id);
                    promoted.gaps.push(line.clone());
                }
                if let Some(last) = leaving.iter().max() {
                    promoted.floors.push((line, last + 1));
                }
                continue;
            };
            promoted.floors.push((line.clone(), seq));
            let previous_dead = skipped.as_ref().map(|(_, id)| id.clone()).or_else(|| row.previous_dead.clone());
            let next = match row.state {
                // Nothing in the row changes: it stays as it is, named.
                RowState::Waiting if previous_dead == row.previous_dead && room > 0 => {
                    room -= 1;
                    promoted.due += 1;
                    promoted.ready.push((row.seq, row.sink));
                    continue;
                }
                RowState::Waiting => {
                    promoted.due += 1;
                    DeliveryRow { state: RowState::Due { due_at: now_ms }, previous_dead, ..row.clone() }
                }
                // Due already (no claim has met it yet): it only learns of
                // the gap.
                RowState::Due { .. } if previous_dead != row.previous_dead => {
                    DeliveryRow { previous_dead, ..row.clone() }
                }
                // In flight behind it, in the same run: it was sent without
                // the gap's news, and is put back (see dispatch), so the
                // line keeps the gap for the claim that hands it out again.
                RowState::Inflight { .. } => {
                    if let Some((_, id)) = &skipped {
                        Core::leave_gap(batch, &line, id);
                        promoted.gaps.push(line.clone());
                    }
                    continue;
                }
                _ => continue,
            };
            Core::move_row(batch, &row, Some(&next));
        }
        Ok(promoted)
    }

    /// Once the batch [`Core::promote_lines`] built is written.
    pub(super) fn lines_promoted(&self, promoted: Promoted) {
        self.due_floor.raise_lines(promoted.floors);
        self.gaps.note(promoted.gaps);
        self.ready.add(promoted.ready);
    }

    /// Make every line's head that waits due at `now_ms`: on boot, and
    /// after the store lost writes, when no head is known to be named
    /// ready. Runs with the transitions lock held. Returns how many heads
    /// were made due.
    pub(super) fn walk_lines(&self, now_ms: u64) -> Result<usize, QueueError> {
        self.ready.forget();
        let prefix = [index::LINE];
        let mut from = prefix.to_vec();
        let mut last_line: Option<LineId> = None;
        let mut batch = Batch::new();
        let mut moved = 0;
        loop {
            let entries =
                self.store.scan(&Scan { cf: Cf::Index, from, to: prefix_end(&prefix), reverse: false, limit: 4096 })?;
            for (key, _) in &entries {
                let (line, seq) = index::parse_line(key).ok_or_else(|| QueueError::Corrupt("line index key".into()))?;
                if last_line.as_ref() == Some(&line) {
                    continue;
                }
                // The line's first entry whose row is in it: its head.
                let Some(row) = self.row_in_line(&line, seq)? else { continue };
                last_line = Some(line);
                moved += usize::from(move_up_if_waiting(&mut batch, &row, now_ms));
            }
            match entries.last() {
                Some((key, _)) if entries.len() == 4096 => from = keys::after(key),
                _ => break,
            }
        }
        if moved > 0 {
            self.write_rows(&batch, Durability::Synced)?;
            self.stats.committed.notify_one();
        }
        Ok(moved)
    }
}

impl Queue {
    /// On boot, with the inflight rows: every line whose head waits (moved
    /// up and named in memory only, or made to wait behind a head that is
    /// gone) has it made due. Returns how many heads were made due.
    pub fn recover_lines(&self, now_ms: u64) -> Result<usize, QueueError> {
        let _serial = self.transitions.lock().unwrap_or_else(|e| e.into_inner());
        let moved = self.walk_lines(now_ms)?;
        if moved > 0 {
            tracing::info!(lines = moved, "ordered lines' heads that waited are due");
        }
        Ok(moved)
    }
}

impl DeadLetters {
    /// Lines stopped by a dead head, of one tenant or all, up to `limit`.
    pub fn held_lines(&self, tenant: Option<&str>, limit: usize) -> Result<Vec<HeldLine>, QueueError> {
        let found = self.store.scan(&Scan::prefix(Cf::Index, &index::held_prefix(tenant), limit))?;
        found
            .into_iter()
            .map(|(key, value)| {
                let line = index::parse_held(&key).ok_or_else(|| QueueError::Corrupt("held line key".into()))?;
                Ok(HeldLine { line, seq: held_seq(&value)? })
            })
            .collect()
    }

    /// Release a held line: its dead head stays in the DLQ but leaves the
    /// line, and the row behind it is due now, carrying the dead hook's id.
    /// The dead head's seq, or `None` if the line is not held.
    pub fn release_line(&self, line: &LineId, now_ms: u64) -> Result<Option<u64>, QueueError> {
        let _serial = self.transitions.lock().unwrap_or_else(|e| e.into_inner());
        let Some(value) = self.store.get(Cf::Index, &index::held(line))? else { return Ok(None) };
        let seq = held_seq(&value)?;
        let mut batch = Batch::new();
        let row = self.store.get(Cf::Deliveries, &deliveries::row(seq, line.sink))?;
        match row.map(|bytes| DeliveryRow::decode(seq, line.sink, &bytes)).transpose() {
            Ok(Some(row)) if matches!(row.state, RowState::Dead { .. }) => {
                let released = DeliveryRow { line: row.line.clone().map(|l| Line { hold: false, ..l }), ..row.clone() };
                Core::move_row(&mut batch, &row, Some(&released));
            }
            Ok(_) => {
                // Not dead (or gone) any more: the held entry is stale, and
                // its row (if any) is no head to move past.
                batch.delete(Cf::Index, index::held(line));
                self.write_rows(&batch, Durability::Synced)?;
                return Ok(None);
            }
            Err(e) => return Err(QueueError::Corrupt(format!("row {seq}/{}: {e}", line.sink))),
        }
        let skipped = self.hook_id(seq)?;
        let promoted = self.promote_lines(&mut batch, vec![Leaving { line: line.clone(), seq, skipped }], now_ms)?;
        self.write_rows(&batch, Durability::Synced)?;
        self.lines_promoted(promoted);
        self.stats.committed.notify_one();
        tracing::info!(
            tenant = %line.tenant, source = %line.source, sink = line.sink, key = %line.key, seq,
            "ordering key released: its dead hook stays in the DLQ, the hooks behind it are delivered"
        );
        Ok(Some(seq))
    }
}

/// A line's head found waiting (the row it waited for left unseen) is due
/// at `now_ms`, in `batch`. Whether it was.
fn move_up_if_waiting(batch: &mut Batch, head: &DeliveryRow, now_ms: u64) -> bool {
    let waiting = head.state == RowState::Waiting;
    if waiting {
        Core::move_row(batch, head, Some(&DeliveryRow { state: RowState::Due { due_at: now_ms }, ..head.clone() }));
    }
    waiting
}

/// The dead head's seq a held entry keeps.
fn held_seq(value: &[u8]) -> Result<u64, QueueError> {
    value.try_into().map(u64::from_be_bytes).map_err(|_| QueueError::Corrupt("held line value".into()))
}

/// Where a walk of `line` starts: past the tombstones its delivered rows
/// left, when its `floor` is known.
fn line_start(line: &LineId, prefix: &[u8], floor: Option<u64>) -> Vec<u8> {
    floor.map_or_else(|| prefix.to_vec(), |floor| index::line(line, floor))
}
