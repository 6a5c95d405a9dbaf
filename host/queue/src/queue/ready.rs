//! Ordered lines' heads ready to be claimed, named in memory.
//!
//! When a head leaves its line, the row right behind it, waiting, is the
//! line's new head. Rewriting it due would write its row and a due entry
//! that the claim deletes a moment later, for every delivery of an
//! ordered key. Instead it stays `waiting` in the store, is named here, and
//! the next claim hands it out after the due index's rows.
//!
//! What is here is a hint: the claim reads each row and passes over one
//! that is no longer a waiting head. A head named only here is not lost
//! when the node stops: the boot's walk of the lines makes every waiting
//! head due (`recover_lines`). When the store lost writes in a recovery
//! (`DueFloor::reset`), the next claim forgets the names and walks the
//! lines the same way.

use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;

/// A row by its (seq, sink index).
pub(super) type RowId = (u64, u16);

/// Heads named at most; past it a head moved up is written due.
const MAX_READY: usize = 65_536;

#[derive(Debug, Default)]
pub(crate) struct ReadyHeads {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// In the order they became heads: the claim looks at the oldest first.
    order: VecDeque<RowId>,
    named: HashSet<RowId>,
}

impl ReadyHeads {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many more heads may be named.
    pub(super) fn room(&self) -> usize {
        MAX_READY.saturating_sub(self.lock().order.len())
    }

    /// Name heads moved up by a written batch.
    pub(super) fn add(&self, ids: Vec<RowId>) {
        if ids.is_empty() {
            return;
        }
        let mut inner = self.lock();
        for id in ids {
            if inner.named.insert(id) {
                inner.order.push_back(id);
            }
        }
    }

    pub(super) fn names(&self, id: RowId) -> bool {
        self.lock().named.contains(&id)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.lock().order.is_empty()
    }

    /// The `n` oldest heads, for a claim to look at. Only claims, under
    /// the transitions lock, take names away, so they are still the front
    /// when the claim is written.
    pub(super) fn look(&self, n: usize) -> Vec<RowId> {
        self.lock().order.iter().take(n).copied().collect()
    }

    /// Once the claim that looked at the `looked` oldest heads is written:
    /// those it took (or found to be heads no more) are no longer named;
    /// the rest keep their place at the front.
    pub(super) fn looked(&self, looked: usize, done: &HashSet<RowId>) {
        if done.is_empty() {
            return;
        }
        let mut inner = self.lock();
        let looked = looked.min(inner.order.len());
        let front: Vec<RowId> = inner.order.drain(..looked).collect();
        for id in front.into_iter().rev() {
            if done.contains(&id) {
                inner.named.remove(&id);
            } else {
                inner.order.push_front(id);
            }
        }
    }

    /// Forget every name (the lines are walked instead).
    pub(super) fn forget(&self) {
        let mut inner = self.lock();
        inner.order.clear();
        inner.named.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_settles_only_what_it_took_and_the_rest_keep_their_place() {
        let ready = ReadyHeads::default();
        ready.add(vec![(1, 0), (2, 0), (3, 0), (1, 0)]);
        assert_eq!(ready.look(2), vec![(1, 0), (2, 0)], "oldest first, named once");
        ready.add(vec![(4, 0)]);
        ready.looked(2, &HashSet::from([(2, 0)]));
        assert_eq!(ready.look(10), vec![(1, 0), (3, 0), (4, 0)]);
        ready.add(vec![(2, 0)]);
        assert_eq!(ready.look(10), vec![(1, 0), (3, 0), (4, 0), (2, 0)], "named again, at the back");
        ready.forget();
        assert!(ready.is_empty());
    }
}
