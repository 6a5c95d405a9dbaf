//! How much is undelivered: per tenant from its counters, per source by
//! walking its rows.

use super::rows::{DeliveryRow, RowState};
use super::{Queue, QueueError};
use crate::store::keys::{self, deliveries, index, prefix_end};
use crate::store::{Cf, Scan};

/// Reads (seq, sink) from an index key.
type PositionOf = fn(&[u8]) -> Option<(u64, u16)>;

/// Index entries read per step of a walk.
const WALK_CHUNK: usize = 1024;

/// A source's undelivered rows, counted by walking them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SourcePending {
    pub pending: u64,
    pub inflight: u64,
}

/// A tenant's undelivered rows and bytes, from its counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TenantPending {
    pub pending: i64,
    pub scheduled: i64,
    pub inflight: i64,
    pub bytes: i64,
}

impl Queue {
    /// `{pending, scheduled, inflight, bytes}` of a tenant: O(1).
    pub fn pending_for_tenant(&self, tenant: &str) -> Result<TenantPending, QueueError> {
        Ok(TenantPending {
            pending: self.counter(Some(tenant), "pending")?,
            scheduled: self.counter(Some(tenant), "scheduled")?,
            inflight: self.counter(Some(tenant), "inflight")?,
            bytes: self.counter(Some(tenant), "bytes")?,
        })
    }

    /// The undelivered rows of one source: due (now or after a backoff),
    /// waiting in an ordered line, and inflight. With `tenant`, walks only
    /// that tenant's rows (the owner index); without, the state indexes
    /// and the lines: O(backlog) either way.
    pub fn pending_for_source(&self, source: &str, tenant: Option<&str>) -> Result<SourcePending, QueueError> {
        let mut counts = SourcePending::default();
        // A waiting row is found by its line alone; the line walk counts
        // only those, as the rows in the other states have their own entry.
        let mut tally = |row: &DeliveryRow, only_waiting: bool| {
            if row.source == source && (!only_waiting || row.state == RowState::Waiting) {
                match row.state {
                    RowState::Due { .. } | RowState::Waiting => counts.pending += 1,
                    RowState::Inflight { .. } => counts.inflight += 1,
                    RowState::Dead { .. } | RowState::Filtered { .. } => {}
                }
            }
        };
        let walks: Vec<(Vec<u8>, PositionOf, bool)> = match tenant {
            Some(t) => vec![(index::owner_prefix(t), index::parse_owner, false)],
            None => vec![
                (vec![index::DUE], |key| index::parse_due(key).map(|(_, seq, sink)| (seq, sink)), false),
                (vec![index::INFLIGHT], index::parse_inflight, false),
                (vec![index::LINE], index::parse_line_position, true),
            ],
        };
        for (prefix, position, only_waiting) in walks {
            let mut from = prefix.clone();
            loop {
                let found = self.store.scan(&Scan {
                    cf: Cf::Index,
                    from: from.clone(),
                    to: prefix_end(&prefix),
                    reverse: false,
                    limit: WALK_CHUNK,
                })?;
                let positions: Vec<(u64, u16)> = found
                    .iter()
                    .map(|(k, _)| position(k))
                    .collect::<Option<_>>()
                    .ok_or_else(|| QueueError::Corrupt("index key".into()))?;
                let row_keys: Vec<Vec<u8>> = positions.iter().map(|(seq, sink)| deliveries::row(*seq, *sink)).collect();
                for ((seq, sink), value) in positions.iter().zip(self.store.multi_get(Cf::Deliveries, &row_keys)?) {
                    if let Some(bytes) = value {
                        let row = DeliveryRow::decode(*seq, *sink, &bytes)
                            .map_err(|e| QueueError::Corrupt(format!("row {seq}/{sink}: {e}")))?;
                        tally(&row, only_waiting);
                    }
                }
                match found.last() {
                    Some((last, _)) if found.len() == WALK_CHUNK => from = keys::after(last),
                    _ => break,
                }
            }
        }
        Ok(counts)
    }

    /// The dead rows of a tenant: O(1).
    pub fn dead_for_tenant(&self, tenant: &str) -> Result<i64, QueueError> {
        self.counter(Some(tenant), "dead")
    }
}
