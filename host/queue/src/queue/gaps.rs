//! Gaps at the end of ordered lines. A dead hook skipped (`on_dead: skip`,
//! or a held line released) names itself on the next delivery of its key.
//! When a row waits behind it, that row carries the id (`promote_lines`);
//! when none does, the line is empty and the next hook of the key may come
//! much later: the id is kept as the line's gap (`meta::gap`) and the claim
//! that hands out the line's next head takes it.
//!
//! Claims must not read the store for every ordered row to learn that no
//! gap is there, so the lines that may have one are kept in memory, loaded
//! on boot.

use std::collections::HashSet;
use std::sync::Mutex;

use super::{Core, QueueError};
use crate::store::keys::index::LineId;
use crate::store::keys::{self, meta};
use crate::store::{Batch, Cf, Scan, Store};

/// Lines known to have a gap at most; past it every ordered claim looks.
const MAX_KNOWN: usize = 65_536;
/// Gap keys read per step on boot.
const LOAD_STEP: usize = 4096;

/// The lines that may have a gap: a superset of those that do.
#[derive(Debug, Default)]
pub(crate) struct Gaps {
    known: Mutex<Known>,
}

#[derive(Debug, Default)]
struct Known {
    lines: HashSet<LineId>,
    /// More gaps than are kept: any line may have one.
    overflowed: bool,
}

impl Known {
    fn add(&mut self, line: LineId) {
        if self.overflowed {
            return;
        }
        if self.lines.len() >= MAX_KNOWN {
            self.lines = HashSet::new();
            self.overflowed = true;
            return;
        }
        self.lines.insert(line);
    }
}

impl Gaps {
    /// The gaps the store holds.
    pub(crate) fn load(store: &dyn Store) -> Result<Gaps, QueueError> {
        let prefix = meta::gap_prefix(None);
        let mut from = prefix.clone();
        let mut known = Known::default();
        loop {
            let found = store.scan(&Scan {
                cf: Cf::Meta,
                from,
                to: keys::prefix_end(&prefix),
                reverse: false,
                limit: LOAD_STEP,
            })?;
            for (key, _) in &found {
                let line = meta::parse_gap(key).ok_or_else(|| QueueError::Corrupt("gap key".into()))?;
                known.add(line);
            }
            match found.last() {
                Some((key, _)) if found.len() == LOAD_STEP && !known.overflowed => from = keys::after(key),
                _ => break,
            }
        }
        Ok(Gaps { known: Mutex::new(known) })
    }

    /// Lines whose gaps were just written.
    pub(super) fn note(&self, lines: Vec<LineId>) {
        if lines.is_empty() {
            return;
        }
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        for line in lines {
            known.add(line);
        }
    }

    fn may_have(&self, line: &LineId) -> bool {
        let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        known.overflowed || known.lines.contains(line)
    }

    /// Lines whose gaps were just taken.
    fn forget(&self, lines: &[LineId]) {
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        for line in lines {
            known.lines.remove(line);
        }
    }
}

/// Gaps a claim takes: deleted in its batch, forgotten once it is written.
#[derive(Default)]
pub(super) struct Taken(Vec<LineId>);

impl Core {
    /// Keep `id`, a dead hook skipped as the last row of `line`, for the
    /// line's next head (in `batch`; noted once it is written).
    pub(super) fn leave_gap(batch: &mut Batch, line: &LineId, id: &str) {
        batch.put(Cf::Meta, meta::gap(line), id.as_bytes().to_vec());
    }

    /// The dead hook skipped before `line`'s head, if the line has a gap:
    /// taken in `batch`.
    pub(super) fn take_gap(
        &self,
        line: &LineId,
        batch: &mut Batch,
        taken: &mut Taken,
    ) -> Result<Option<String>, QueueError> {
        if !self.gaps.may_have(line) {
            return Ok(None);
        }
        let key = meta::gap(line);
        let Some(value) = self.store.get(Cf::Meta, &key)? else {
            taken.0.push(line.clone());
            return Ok(None);
        };
        batch.delete(Cf::Meta, key);
        taken.0.push(line.clone());
        // A hook id is text the queue wrote; anything else is no id to name.
        Ok(String::from_utf8(value).ok())
    }

    /// After the claim that took `taken` is written.
    pub(super) fn gaps_taken(&self, taken: Taken) {
        if !taken.0.is_empty() {
            self.gaps.forget(&taken.0);
        }
    }
}
