//! Claims: dispatch takes the rows it can deliver now, in one batch. First
//! the due index, oldest due first; then the ordered lines' heads moved up
//! and named in memory (`ready`), oldest first. Dispatch judges each row
//! (claim it, leave it, park it, or take a run of its line).

use std::collections::{HashMap, HashSet};

use super::gaps::Taken;
use super::ready::RowId;
use super::rows::{DeliveryRow, RowState};
use super::{Core, Deliveries, QueueError};
use crate::store::keys::deliveries;
use crate::store::keys::index::{self, LineId};
use crate::store::{Batch, Cf, Durability, Scan, StoreError};

/// What dispatch makes of a row it is offered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimDecision {
    Claim,
    /// Leave it where it is.
    Skip,
    /// Due again at this time, attempts unchanged.
    Park(u64),
    /// Claim it and, if it heads an ordered line, the rows after it in
    /// that line, up to `rows` in all and `bytes` of bodies (at least the
    /// head): a batching sink's batch of one key, in order. The run comes
    /// back in seq order, right after its head.
    Run {
        rows: usize,
        bytes: u64,
    },
}

/// One claim's batch being built.
struct Claim {
    now_ms: u64,
    limit: usize,
    batch: Batch,
    claimed: Vec<DeliveryRow>,
    gaps: Taken,
    /// Rows this batch moves to waiting (a run behind a later head may
    /// take them), and rows runs took (passed over if met again).
    made_waiting: HashMap<RowId, DeliveryRow>,
    in_runs: HashSet<RowId>,
}

impl Claim {
    fn full(&self) -> bool {
        self.claimed.len() >= self.limit
    }

    /// Let `decide` judge `row` (due, or a line's waiting head) and write
    /// what it makes of it. `false`: left where it is.
    fn judge(
        &mut self,
        core: &Core,
        row: &DeliveryRow,
        line: Option<&LineId>,
        decide: &mut impl FnMut(&DeliveryRow) -> ClaimDecision,
    ) -> Result<bool, QueueError> {
        let decision = decide(row);
        let state = match decision {
            ClaimDecision::Skip => return Ok(false),
            ClaimDecision::Park(due_at) => RowState::Due { due_at },
            ClaimDecision::Claim | ClaimDecision::Run { .. } => RowState::Inflight { claimed_at: self.now_ms },
        };
        let mut next = DeliveryRow { state, ..row.clone() };
        let inflight = matches!(next.state, RowState::Inflight { .. });
        // A line's head handed out names the dead hook skipped before it
        // when the line was empty.
        if let (true, Some(line)) = (inflight, line)
            && let Some(dead) = core.take_gap(line, &mut self.batch, &mut self.gaps)?
        {
            next.previous_dead.get_or_insert(dead);
        }
        Core::move_row(&mut self.batch, row, Some(&next));
        if inflight {
            self.claimed.push(next);
        }
        if let (ClaimDecision::Run { rows, bytes }, Some(line)) = (decision, line) {
            let room = rows.min(self.limit.saturating_sub(self.claimed.len() - 1)).saturating_sub(1);
            let budget = bytes.saturating_sub(row.bytes);
            for behind in core.line_run(line, row.seq, room, budget, &self.made_waiting)? {
                let next = DeliveryRow { state: RowState::Inflight { claimed_at: self.now_ms }, ..behind.clone() };
                Core::move_row(&mut self.batch, &behind, Some(&next));
                self.in_runs.insert((next.seq, next.sink));
                self.claimed.push(next);
            }
        }
        Ok(true)
    }
}

impl Deliveries {
    /// Claim up to `limit` rows due at or before `now_ms`, oldest due first.
    pub fn claim_due(&self, now_ms: u64, limit: usize) -> Result<Vec<DeliveryRow>, QueueError> {
        self.claim_due_with(now_ms, limit, limit, |_| ClaimDecision::Claim)
    }

    /// Claim rows that can be delivered now, oldest due first, letting
    /// `decide` judge each: claim it, skip it (it stays where it is: its
    /// sink has no room now), or park it until a later time (its sink's
    /// breaker is open). Examines at most `examine` due rows and as many
    /// ready heads; claims at most `limit`; one batch.
    pub fn claim_due_with(
        &self,
        now_ms: u64,
        limit: usize,
        examine: usize,
        mut decide: impl FnMut(&DeliveryRow) -> ClaimDecision,
    ) -> Result<Vec<DeliveryRow>, QueueError> {
        if !self.claims_open() {
            return Ok(Vec::new());
        }
        let _serial = self.transitions.lock().unwrap_or_else(|e| e.into_inner());
        self.repair_index_if_damaged()?;
        // The store lost writes: heads named ready may be gone, and heads
        // that wait may be named nowhere.
        if self.due_floor.take_walk()
            && let Err(e) = self.walk_lines(now_ms)
        {
            self.due_floor.walk_again();
            return Err(e);
        }
        // Rows committed waiting behind a head that left meanwhile are due.
        self.recheck_lines(now_ms)?;
        let mut claim = Claim {
            now_ms,
            limit,
            batch: Batch::new(),
            claimed: Vec::new(),
            gaps: Taken::default(),
            made_waiting: HashMap::new(),
            in_runs: HashSet::new(),
        };
        let seen_to = self.claim_from_due_index(&mut claim, examine, &mut decide)?;
        let (looked, done) = match claim.full() {
            true => (0, HashSet::new()),
            false => self.claim_ready_heads(&mut claim, examine, &mut decide)?,
        };
        if !claim.batch.is_empty() {
            self.write_rows(&claim.batch, Durability::Buffered)?;
        }
        self.gaps_taken(claim.gaps);
        self.ready.looked(looked, &done);
        self.due_floor.advance(seen_to);
        Ok(claim.claimed)
    }

    /// The due index's part of a claim. Returns how far the due floor may
    /// move once the claim is written: to the first entry it left, or as
    /// far as it saw.
    fn claim_from_due_index(
        &self,
        claim: &mut Claim,
        examine: usize,
        decide: &mut impl FnMut(&DeliveryRow) -> ClaimDecision,
    ) -> Result<u64, QueueError> {
        let (now_ms, want) = (claim.now_ms, examine.max(claim.limit));
        let scan_due = |start: u64| {
            self.store.scan(&Scan {
                cf: Cf::Index,
                from: index::due_from(start),
                to: Some(index::due_from(now_ms.saturating_add(1))),
                reverse: false,
                limit: want,
            })
        };
        let mut start = self.due_floor.start();
        let mut due = scan_due(start)?;
        // Damage met by this very scan: the entries it passed over are
        // back once the index is rebuilt.
        if self.repair_index_if_damaged()? {
            start = self.due_floor.start();
            due = scan_due(start)?;
        }
        let examined_all = due.len() < want;
        // (due_at, seq, sink) of each entry, read once.
        let entries: Vec<(u64, u64, u16)> = due
            .iter()
            .map(|(key, _)| index::parse_due(key).ok_or_else(|| QueueError::Corrupt("due index key".into())))
            .collect::<Result<_, _>>()?;
        let keys: Vec<Vec<u8>> = entries.iter().map(|(_, seq, sink)| deliveries::row(*seq, *sink)).collect();
        let rows = self.store.multi_get_each(Cf::Deliveries, &keys)?;
        let mut unreadable = 0;
        // The due time of the first entry this claim leaves in the index.
        let mut first_left: Option<u64> = None;
        let last_examined = entries.last().map(|(due_at, _, _)| *due_at);
        for (((due_at, seq, sink), value), (index_key, _)) in entries.into_iter().zip(rows).zip(due) {
            if claim.full() {
                first_left.get_or_insert(due_at);
                break;
            }
            if claim.in_runs.contains(&(seq, sink)) {
                continue;
            }
            let value = match value {
                Ok(value) => value,
                Err(StoreError::Corruption { reason, .. }) => {
                    self.bury_unreadable_row(&mut claim.batch, seq, sink, index_key, &reason);
                    unreadable += 1;
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let Some(bytes) = value else {
                tracing::warn!(seq, sink, "due index entry without a row; dropping it");
                claim.batch.delete(Cf::Index, index_key);
                continue;
            };
            let row = DeliveryRow::decode(seq, sink, &bytes)
                .map_err(|e| QueueError::Corrupt(format!("row {seq}/{sink}: {e}")))?;
            // An entry its row does not agree with would hand the row out
            // twice; the row's own state decides.
            if row.state != (RowState::Due { due_at }) {
                tracing::warn!(seq, sink, "due index entry its row does not agree with; dropping it");
                claim.batch.delete(Cf::Index, index_key);
                continue;
            }
            // A row behind its line's head waits for it, out of the due index.
            let line = row.line_id();
            if let Some(line) = &line
                && !self.is_line_head(line, seq, &mut claim.batch)?
            {
                let waiting = DeliveryRow { state: RowState::Waiting, ..row.clone() };
                Core::move_row(&mut claim.batch, &row, Some(&waiting));
                claim.made_waiting.insert((seq, sink), waiting);
                continue;
            }
            if !claim.judge(self, &row, line.as_ref(), decide)? {
                first_left.get_or_insert(due_at);
            }
        }
        if unreadable > 0 {
            tracing::warn!(rows = unreadable, "delivery rows damaged in the store were dead-lettered as faults");
        }
        // Entries past what this claim examined may be due too: the floor
        // moves only as far as the claim saw.
        let seen_to = if examined_all { now_ms.saturating_add(1) } else { last_examined.unwrap_or(start) };
        Ok(first_left.unwrap_or(seen_to).min(seen_to))
    }

    /// The ready heads' part of a claim: up to `examine` of the oldest
    /// named heads. Returns how many it looked at, and those no longer to
    /// be named once the claim is written (taken, parked, or no longer a
    /// waiting head).
    fn claim_ready_heads(
        &self,
        claim: &mut Claim,
        examine: usize,
        decide: &mut impl FnMut(&DeliveryRow) -> ClaimDecision,
    ) -> Result<(usize, HashSet<RowId>), QueueError> {
        let ids = self.ready.look(examine);
        if ids.is_empty() {
            return Ok((0, HashSet::new()));
        }
        let keys: Vec<Vec<u8>> = ids.iter().map(|(seq, sink)| deliveries::row(*seq, *sink)).collect();
        let rows = self.store.multi_get_each(Cf::Deliveries, &keys)?;
        let mut done = HashSet::new();
        for (&(seq, sink), value) in ids.iter().zip(rows) {
            if claim.full() {
                break;
            }
            let id = (seq, sink);
            let row = match value {
                Ok(Some(bytes)) => DeliveryRow::decode(seq, sink, &bytes).ok(),
                Ok(None) => None,
                // A damaged row is no head to hand out; the store has told
                // the operator of the damage.
                Err(StoreError::Corruption { .. }) => None,
                Err(e) => return Err(e.into()),
            };
            let head = match (row, claim.in_runs.contains(&id) || claim.made_waiting.contains_key(&id)) {
                (Some(row), false) if row.state == RowState::Waiting => row,
                _ => {
                    done.insert(id);
                    continue;
                }
            };
            // A waiting row is in its line; only its head is handed out.
            let Some(line) = head.line_id() else {
                done.insert(id);
                continue;
            };
            if !self.is_line_head(&line, seq, &mut claim.batch)? {
                done.insert(id);
                continue;
            }
            if claim.judge(self, &head, Some(&line), decide)? {
                done.insert(id);
            }
        }
        Ok((ids.len(), done))
    }
}
