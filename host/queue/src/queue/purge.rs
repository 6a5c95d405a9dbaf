//! `purge_tenant`: remove a tenant's pending, inflight and/or dead rows in
//! synced chunks of [`PURGE_CHUNK`], walking the tenant's owner index.
//!
//! Each chunk is one batch (rows, their index entries, counters, and every
//! hook whose last row went), so a purge that stops part-way leaves a
//! consistent store, and calling it again finishes the job: rows already
//! removed are simply not found.

use std::collections::{HashMap, HashSet};

use super::lines::{Leaving, Promoted};
use super::rows::{DeliveryRow, RowState};
use super::transitions::FinalOutcome;
use super::{Core, Handover, QueueError, Tenants};
use crate::store::keys::{self, deliveries, index, prefix_end};
use crate::store::{Batch, Cf, Durability, Scan};

/// Rows examined (and at most removed) per synced batch.
pub const PURGE_CHUNK: usize = 500;

/// Which rows a purge removes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PurgeKinds {
    /// Due rows (first attempts and scheduled retries).
    pub pending: bool,
    /// Claimed rows: only for a tenant dispatch has stopped claiming.
    pub inflight: bool,
    pub dead: bool,
}

impl PurgeKinds {
    pub fn all() -> PurgeKinds {
        PurgeKinds { pending: true, inflight: true, dead: true }
    }

    fn wants(&self, state: &RowState) -> bool {
        match state {
            RowState::Due { .. } | RowState::Waiting => self.pending,
            RowState::Inflight { .. } => self.inflight,
            RowState::Dead { .. } => self.dead,
            // Filtered rows go with their hook's last live row; only an
            // erase of everything takes them on their own.
            RowState::Filtered { .. } => self.pending && self.inflight && self.dead,
        }
    }
}

/// Rows removed, per kind; `inflight` only when it was asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PurgeCounts {
    pub pending: u64,
    pub inflight: Option<u64>,
    pub dead: u64,
}

impl PurgeCounts {
    fn add(&mut self, other: PurgeCounts) {
        self.pending += other.pending;
        self.dead += other.dead;
        if let Some(n) = other.inflight {
            self.inflight = Some(self.inflight.unwrap_or(0) + n);
        }
    }
}

/// One chunk's result: what it removed, and where the walk goes on from
/// (`None`: the tenant's rows are all examined).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PurgeStep {
    pub removed: PurgeCounts,
    pub next: Option<(u64, u16)>,
}

impl Tenants {
    /// Remove `tenant`'s rows of `kinds`, in synced chunks; idempotent.
    pub fn purge_tenant(&self, tenant: &str, kinds: PurgeKinds) -> Result<PurgeCounts, QueueError> {
        let mut total = PurgeCounts { inflight: kinds.inflight.then_some(0), ..PurgeCounts::default() };
        let mut after = None;
        loop {
            let step = self.purge_tenant_chunk(tenant, kinds, after)?;
            total.add(step.removed);
            match step.next {
                Some(next) => after = Some(next),
                None => return Ok(total),
            }
        }
    }

    /// One synced chunk of a purge: up to [`PURGE_CHUNK`] of the tenant's
    /// rows after `after` examined, the ones of `kinds` removed. They are
    /// told to the outcome log as done (`fleet`: a later takeover of this
    /// node passes them over rather than bring an erased tenant back).
    pub fn purge_tenant_chunk(
        &self,
        tenant: &str,
        kinds: PurgeKinds,
        after: Option<(u64, u16)>,
    ) -> Result<PurgeStep, QueueError> {
        let (step, removed) = self.purge_chunk(tenant, kinds, after, None)?;
        if let Some(log) = self.outcome_log.get().filter(|_| !removed.is_empty()) {
            log.record(removed.into_iter().map(|(seq, sink)| (seq, sink, FinalOutcome::Delivered)).collect());
        }
        Ok(step)
    }
}

/// Which hooks a purge takes, by seq: those at or below `through` that
/// `takes` names.
pub(super) struct Seqs<'a> {
    pub through: u64,
    pub takes: &'a dyn Fn(u64) -> bool,
}

impl Handover {
    /// Remove every row (of every tenant) of a hook with seq at or below
    /// `through`, but those of `keep`, in synced chunks: what a peer took
    /// over while this node was away (`fleet`), as a record from before
    /// takeovers named the seqs they read says it. Returns the rows removed.
    pub fn purge_through(&self, through: u64, keep: &HashSet<u64>) -> Result<u64, QueueError> {
        self.purge_seqs(&Seqs { through, takes: &|seq| !keep.contains(&seq) })
    }

    /// Remove every row (of every tenant) of a hook whose seq lies in one
    /// of `ranges` (inclusive, in order), in synced chunks: exactly the
    /// hooks a peer read when it took this node over (`fleet`), no more.
    /// Returns the rows removed.
    pub fn purge_ranges(&self, ranges: &[(u64, u64)]) -> Result<u64, QueueError> {
        let Some(&(_, through)) = ranges.last() else { return Ok(0) };
        let takes = |seq: u64| {
            let at = ranges.partition_point(|(_, end)| *end < seq);
            ranges.get(at).is_some_and(|(start, _)| *start <= seq)
        };
        self.purge_seqs(&Seqs { through, takes: &takes })
    }

    fn purge_seqs(&self, seqs: &Seqs<'_>) -> Result<u64, QueueError> {
        let mut removed = 0;
        for tenant in self.tenants.holding_list() {
            let mut after = None;
            loop {
                let (step, _) = self.purge_chunk(&tenant, PurgeKinds::all(), after, Some(seqs))?;
                removed += step.removed.pending + step.removed.inflight.unwrap_or(0) + step.removed.dead;
                match step.next {
                    Some(next) => after = Some(next),
                    None => break,
                }
            }
        }
        Ok(removed)
    }
}

impl Core {
    /// One chunk of a purge walk over the tenant's owner index, up to the
    /// rows of seq `seqs.through` if given, passing over the seqs it does
    /// not take; with the rows it removed.
    pub(super) fn purge_chunk(
        &self,
        tenant: &str,
        kinds: PurgeKinds,
        after: Option<(u64, u16)>,
        seqs: Option<&Seqs<'_>>,
    ) -> Result<(PurgeStep, Vec<(u64, u16)>), QueueError> {
        let _serial = self.transitions.lock().unwrap_or_else(|e| e.into_inner());
        let prefix = index::owner_prefix(tenant);
        let from = match after {
            Some((seq, sink)) => keys::after(&index::owner(tenant, seq, sink)),
            None => prefix.clone(),
        };
        let owned = self.store.scan(&Scan {
            cf: Cf::Index,
            from,
            to: match seqs {
                Some(seqs) => Some(index::owner(tenant, seqs.through.saturating_add(1), 0)),
                None => prefix_end(&prefix),
            },
            reverse: false,
            limit: PURGE_CHUNK,
        })?;
        let positions: Vec<(u64, u16)> = owned
            .iter()
            .map(|(key, _)| index::parse_owner(key).ok_or_else(|| QueueError::Corrupt("owner index key".into())))
            .collect::<Result<_, _>>()?;
        let row_keys: Vec<Vec<u8>> = positions.iter().map(|(seq, sink)| deliveries::row(*seq, *sink)).collect();
        let values = self.store.multi_get(Cf::Deliveries, &row_keys)?;

        let mut batch = Batch::new();
        let mut removed = PurgeCounts { inflight: kinds.inflight.then_some(0), ..PurgeCounts::default() };
        let mut gone: HashSet<(u64, u16)> = HashSet::new();
        let mut leaving = Vec::new();
        for ((seq, sink), value) in positions.iter().copied().zip(values) {
            let Some(bytes) = value else {
                // An owner entry whose row is gone: drop the stale entry.
                batch.delete(Cf::Index, index::owner(tenant, seq, sink));
                continue;
            };
            let row = DeliveryRow::decode(seq, sink, &bytes)
                .map_err(|e| QueueError::Corrupt(format!("row {seq}/{sink}: {e}")))?;
            let kept = seqs.is_some_and(|seqs| !(seqs.takes)(seq));
            if kept || !kinds.wants(&row.state) {
                continue;
            }
            match row.state {
                RowState::Due { .. } | RowState::Waiting => removed.pending += 1,
                RowState::Inflight { .. } => removed.inflight = removed.inflight.map(|n| n + 1),
                RowState::Dead { .. } => removed.dead += 1,
                RowState::Filtered { .. } => {}
            }
            if let Some(line) = row.line_id() {
                leaving.push(Leaving { line, seq, skipped: None });
            }
            Self::move_row(&mut batch, &row, None);
            gone.insert((seq, sink));
        }
        // A hook goes with its last row (and its filtered rows with it).
        let seqs: HashSet<u64> = gone.iter().map(|(seq, _)| *seq).collect();
        for seq in seqs {
            self.last_row_takes_its_hook(&mut batch, seq, &gone, &HashMap::new())?;
        }
        // Rows of an ordered line beyond the purge (`through`) move up.
        let promoted = match leaving.is_empty() {
            true => Promoted::default(),
            false => self.promote_lines(&mut batch, leaving, self.config.clock.now_ms())?,
        };
        if !batch.is_empty() {
            self.write_rows(&batch, Durability::Synced)?;
        }
        let made_due = promoted.due;
        self.lines_promoted(promoted);
        if made_due > 0 {
            self.stats.committed.notify_one();
        }
        let next = (owned.len() == PURGE_CHUNK).then(|| positions.last().copied()).flatten();
        Ok((PurgeStep { removed, next }, gone.into_iter().collect()))
    }
}
