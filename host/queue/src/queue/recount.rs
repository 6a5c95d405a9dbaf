//! Recount: verify the counters against the rows they count, and repair
//! any drift.
//!
//! Counters change in the same batches as their rows, so they drift only
//! through a bug or damage; this walk is the check. It reads every delivery
//! row and dedupe key, so it belongs to `ankusa store recount` (the node
//! stopped: the store is opened exclusively) or a quiet moment. A repair
//! adds the difference through the same merge operator, so it stays
//! correct even if a transition lands between the walk and the fix.

use std::collections::BTreeMap;

use super::rows::DeliveryRow;
use super::{COUNTER_KINDS, Queue, QueueError, counter_key};
use crate::store::keys::{self, counters, dedupe, deliveries, prefix_end};
use crate::store::{Batch, Cf, Durability, Scan, Store};

const CHUNK: usize = 4096;

/// One counter whose stored value differs from the rows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CounterDrift {
    /// `None` for the node's counter.
    pub tenant: Option<String>,
    pub kind: &'static str,
    pub stored: i64,
    pub actual: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recount {
    pub rows: u64,
    pub dedupe_keys: u64,
    pub drifts: Vec<CounterDrift>,
    pub repaired: bool,
}

type Tally = BTreeMap<(Option<String>, &'static str), i64>;

fn bump(tally: &mut Tally, tenant: &str, kind: &'static str, by: i64) {
    *tally.entry((None, kind)).or_default() += by;
    *tally.entry((Some(tenant.to_string()), kind)).or_default() += by;
}

impl Queue {
    /// Walk every row and dedupe key, compare with the counters, and with
    /// `repair` set each drifting counter right.
    pub fn recount(&self, repair: bool) -> Result<Recount, QueueError> {
        let (mut tally, mut report) = tally(self.store.as_ref())?;
        // Tenants with stored counters but no rows must read zero too.
        walk(self.store.as_ref(), Cf::Counters, &counters::tenant_counters(), |key, _| {
            if let Some(tenant) = counters::counter_tenant(key) {
                for kind in COUNTER_KINDS {
                    tally.entry((Some(tenant.to_string()), kind)).or_default();
                }
            }
            Ok(())
        })?;
        let mut batch = Batch::new();
        for ((tenant, kind), actual) in tally {
            let stored = self.counter(tenant.as_deref(), kind)?;
            if stored != actual {
                batch.add_counter(counter_key(tenant.as_deref(), kind), actual - stored);
                report.drifts.push(CounterDrift { tenant, kind, stored, actual });
            }
        }
        if repair && !batch.is_empty() {
            self.store.write(&batch, Durability::Synced)?;
            report.repaired = true;
        }
        Ok(report)
    }
}

/// What the rows and dedupe keys say every counter should read.
fn tally(store: &dyn Store) -> Result<(Tally, Recount), QueueError> {
    let mut tally = Tally::new();
    let mut report = Recount::default();
    walk(store, Cf::Deliveries, &[], |key, value| {
        let (seq, sink) = deliveries::parse(key).ok_or_else(|| QueueError::Corrupt("row key".into()))?;
        let row =
            DeliveryRow::decode(seq, sink, value).map_err(|e| QueueError::Corrupt(format!("row {seq}/{sink}: {e}")))?;
        for kind in row.counted_as() {
            bump(&mut tally, &row.tenant, kind, 1);
        }
        bump(&mut tally, &row.tenant, "bytes", row.bytes as i64);
        report.rows += 1;
        Ok(())
    })?;
    walk(store, Cf::Dedupe, &dedupe::entries(), |key, _| {
        let tenant = dedupe::entry_tenant(key).ok_or_else(|| QueueError::Corrupt("dedupe key".into()))?;
        bump(&mut tally, tenant, "dedupe_keys", 1);
        report.dedupe_keys += 1;
        Ok(())
    })?;
    for kind in COUNTER_KINDS {
        tally.entry((None, kind)).or_default();
    }
    Ok((tally, report))
}

/// Before the writer starts: a counters family found damaged is made
/// again from the rows (it is derived from them), so no count is read
/// from a damaged block. The family is small, so it is read whole.
pub(super) fn repair_counters_if_damaged(store: &dyn Store) -> Result<(), QueueError> {
    walk(store, Cf::Counters, &[], |_, _| Ok(()))?;
    if store.health().damaged_families().contains(&Cf::Counters.name()) {
        rebuild_counters(store)?;
    }
    Ok(())
}

/// Make the counters family again from the rows and dedupe keys.
pub fn rebuild_counters(store: &dyn Store) -> Result<Recount, QueueError> {
    let (tally, report) = tally(store)?;
    store.reset(Cf::Counters)?;
    let mut batch = Batch::new();
    for ((tenant, kind), actual) in tally {
        batch.add_counter(counter_key(tenant.as_deref(), kind), actual);
    }
    store.write(&batch, Durability::Synced)?;
    tracing::warn!(rows = report.rows, dedupe_keys = report.dedupe_keys, "the counters family was counted again");
    Ok(report)
}

/// Visit every key under `prefix` of a family, in chunks (a damaged block
/// is read around, see `store::Store::scan`).
pub(super) fn walk(
    store: &dyn Store,
    cf: Cf,
    prefix: &[u8],
    mut visit: impl FnMut(&[u8], &[u8]) -> Result<(), QueueError>,
) -> Result<(), QueueError> {
    let to = if prefix.is_empty() { None } else { prefix_end(prefix) };
    let mut from = prefix.to_vec();
    loop {
        let rows = store.scan(&Scan { cf, from: from.clone(), to: to.clone(), reverse: false, limit: CHUNK })?;
        for (key, value) in &rows {
            visit(key, value)?;
        }
        match rows.last() {
            Some((last, _)) if rows.len() == CHUNK => from = keys::after(last),
            _ => return Ok(()),
        }
    }
}
