//! Rows waiting for a later due time that no longer need to wait: when a
//! sink's component is swapped, rows put off by its faults or by its
//! breaker are due now, so a fixed component delivers them at once.

use super::rows::{DeliveryRow, RowState};
use super::{Core, Deliveries, QueueError};
use crate::store::keys::{self, deliveries, index, prefix_end};
use crate::store::{Batch, Cf, Durability, Scan};

/// Due index entries read per step of the walk.
const CHUNK: usize = 1024;

impl Deliveries {
    /// Make every row due after `now_ms` that `pick` chooses due at
    /// `now_ms`, its attempts and last failure unchanged. Walks the rows
    /// due later (O(those rows)), a chunk per write. Returns how many moved.
    pub fn hasten(&self, now_ms: u64, pick: impl Fn(&DeliveryRow) -> bool) -> Result<usize, QueueError> {
        let mut from = index::due_from(now_ms.saturating_add(1));
        let to = prefix_end(&[index::DUE]);
        let mut hastened = 0;
        loop {
            let _serial = self.transitions.lock().unwrap_or_else(|e| e.into_inner());
            let due = self.store.scan(&Scan { cf: Cf::Index, from, to: to.clone(), reverse: false, limit: CHUNK })?;
            let positions: Vec<(u64, u16)> = due
                .iter()
                .map(|(key, _)| {
                    index::parse_due(key)
                        .map(|(_, seq, sink)| (seq, sink))
                        .ok_or_else(|| QueueError::Corrupt("due index key".into()))
                })
                .collect::<Result<_, _>>()?;
            let row_keys: Vec<Vec<u8>> = positions.iter().map(|(seq, sink)| deliveries::row(*seq, *sink)).collect();
            let mut batch = Batch::new();
            for ((seq, sink), value) in positions.iter().zip(self.store.multi_get(Cf::Deliveries, &row_keys)?) {
                let Some(bytes) = value else { continue };
                let row = DeliveryRow::decode(*seq, *sink, &bytes)
                    .map_err(|e| QueueError::Corrupt(format!("row {seq}/{sink}: {e}")))?;
                if !matches!(row.state, RowState::Due { due_at } if due_at > now_ms) || !pick(&row) {
                    continue;
                }
                let next = DeliveryRow { state: RowState::Due { due_at: now_ms }, ..row.clone() };
                Core::move_row(&mut batch, &row, Some(&next));
                hastened += 1;
            }
            if !batch.is_empty() {
                self.write_rows(&batch, Durability::Buffered)?;
                // Rows are due now, written outside the writer: wake dispatch.
                self.stats.committed.notify_one();
            }
            match due.last() {
                Some((last, _)) if due.len() == CHUNK => from = keys::after(last),
                _ => return Ok(hastened),
            }
        }
    }
}
