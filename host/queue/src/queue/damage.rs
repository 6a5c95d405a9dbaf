//! Damage in the store's rows, contained: what can be read keeps flowing.
//!
//! The store reads around a damaged block and tells the operator once
//! (see `store::Health`); here the queue repairs what it can rebuild and
//! buries what it cannot read. The index family is derived from the
//! delivery rows, so damage there is repaired at once by rebuilding it
//! from the rows that can be read: no due row is left unclaimed. A
//! delivery row that cannot be read is dead-lettered as a `fault` (its
//! hook, when readable, stays for a replay).

use super::rows::{DeliveryRow, RowState};
use super::{Core, Envelope, QueueError, counter_key};
use crate::error_class::ErrorClass;
use crate::store::keys::{dedupe, deliveries, hooks, index};
use crate::store::{Batch, Cf, Durability, KeyRead, NamedKey, Store, StoreError};

/// Index entries written per batch of a rebuild.
const REBUILD_BATCH: usize = 4096;

/// The name of the sink a source's binding at an index delivers to: a
/// delivery row made again from its hook (its own copy damaged) is filed
/// under it, so a replay of it finds its sink. Dispatch, which knows the
/// sources, gives the queue one (`Deliveries::set_sink_names`).
pub trait SinkNames: Send + Sync + 'static {
    fn sink_name(&self, tenant: &str, source: &str, index: u16) -> Option<String>;
}

impl super::Deliveries {
    /// Give the queue the names of the sources' sinks (see [`SinkNames`]);
    /// the first given stands.
    pub fn set_sink_names(&self, names: std::sync::Arc<dyn SinkNames>) {
        let _ = self.sink_names.set(names);
    }
}

impl Core {
    /// Rebuild the index family if it is known damaged. Called by claims
    /// with the transitions lock held, so no row changes state meanwhile;
    /// a commit that lands during the rebuild writes its own entries into
    /// the new family, and its rows are read by the rebuild as well.
    /// `true` when it rebuilt the family.
    pub(super) fn repair_index_if_damaged(&self) -> Result<bool, QueueError> {
        if !self.index_damaged() {
            return Ok(false);
        }
        rebuild_index(self.store.as_ref())?;
        self.due_floor.reset();
        self.stats.committed.notify_one();
        Ok(true)
    }

    /// Whether damage was found in the index family and not yet repaired.
    pub(super) fn index_damaged(&self) -> bool {
        let health = self.store.health();
        health.any_damage() && health.damaged_families().contains(&Cf::Index.name())
    }

    /// A delivery row whose block is damaged: it is written again as a
    /// dead `fault`, from what its hook says (tenant, source, size), in
    /// place of the damaged copy, and its due entry `due_key` goes. Its
    /// hook stays, so the operator can replay it.
    pub(super) fn bury_unreadable_row(&self, batch: &mut Batch, seq: u64, sink: u16, due_key: Vec<u8>, error: &str) {
        let hook = self.store.get(Cf::Hooks, &hooks::hook(seq)).ok().flatten();
        let envelope = hook.and_then(|bytes| Envelope::decode(seq, &bytes).ok());
        let (tenant, source, bytes) = match &envelope {
            Some(hook) => (hook.tenant_id.clone(), hook.source_id.clone(), hook.size()),
            None => (crate::queue::DEFAULT_TENANT.to_string(), String::new(), 0),
        };
        // Unknown when the source has gone or no names were given: a
        // replay then takes the binding at the row's index.
        let sink_name =
            self.sink_names.get().and_then(|names| names.sink_name(&tenant, &source, sink)).unwrap_or_default();
        let now = self.config.clock.now_ms();
        let row = DeliveryRow {
            seq,
            sink,
            tenant,
            source,
            sink_name,
            bytes,
            attempts: 0,
            replay_id: None,
            state: RowState::Dead {
                dead_at: now,
                reason: format!("its delivery row is damaged in the store ({error}); its hook is kept for a replay"),
                class: Some(ErrorClass::Fault),
            },
            // Not known: a delivery of a replay then looks for the hook's
            // other rows before it deletes the hook.
            rows_of_hook: u16::MAX,
            last_failure: None,
            line: None,
            previous_dead: None,
        };
        batch.delete(Cf::Index, due_key);
        batch.put(Cf::Deliveries, row.key(), row.encode());
        batch.put(Cf::Index, row.owner_key(), Vec::new());
        for (key, value) in row.index_entries() {
            batch.put(Cf::Index, key, value);
        }
        for (kind, by) in [("pending", -1), ("dead", 1)] {
            batch.add_counter(counter_key(None, kind), by);
            batch.add_counter(counter_key(Some(&row.tenant), kind), by);
        }
    }
}

/// Make the index family again from the delivery rows that can be read
/// (a row's owner entry and its state's entries). Returns the rows read.
pub fn rebuild_index(store: &dyn Store) -> Result<u64, QueueError> {
    let started = std::time::Instant::now();
    store.reset(Cf::Index)?;
    let mut rows = 0u64;
    let mut undecodable = 0u64;
    let mut batch = Batch::new();
    super::recount::walk(store, Cf::Deliveries, &[], |key, value| {
        let Some((seq, sink)) = deliveries::parse(key) else { return Ok(()) };
        let Ok(row) = DeliveryRow::decode(seq, sink, value) else {
            undecodable += 1;
            return Ok(());
        };
        batch.put(Cf::Index, row.owner_key(), Vec::new());
        for (key, value) in row.index_entries() {
            batch.put(Cf::Index, key, value);
        }
        rows += 1;
        if batch.len() >= REBUILD_BATCH {
            store.write(&std::mem::take(&mut batch), Durability::Buffered)?;
        }
        Ok(())
    })?;
    store.write(&batch, Durability::Synced)?;
    tracing::warn!(
        rows,
        undecodable_rows = undecodable,
        took_ms = started.elapsed().as_millis() as u64,
        "the index family was rebuilt from the delivery rows"
    );
    Ok(rows)
}

/// The keys of `cf` that something else names, for a repair to read on
/// their own where a scan passed over damage (a key written again after
/// the block was damaged reads from its newer copy), each with its value
/// where what names it says it whole (written back if it cannot be read):
/// delivery rows named by the index's owner entries, hooks named by the
/// delivery rows, and in the dedupe family each live key by its expiry
/// entry and each expiry entry (empty, so made again if lost) by its live
/// key; the two lie far apart in the family's order.
pub fn named_keys(store: &dyn Store, cf: Cf) -> Result<Vec<NamedKey>, QueueError> {
    let mut keys: Vec<NamedKey> = Vec::new();
    match cf {
        Cf::Dedupe => super::recount::walk(store, Cf::Dedupe, &[], |key, value| {
            if let Some(expiry) = dedupe::parse_expiry(key) {
                keys.push((expiry.entry(), None));
            } else if let (Some((tenant, source, stored)), Ok(original)) =
                (dedupe::parse_entry(key), super::dedupe::Original::decode(value))
            {
                keys.push((dedupe::expiry(original.expires_at, &tenant, &source, &stored), Some(Vec::new())));
            }
            Ok(())
        })?,
        Cf::Deliveries => super::recount::walk(store, Cf::Index, &[index::OWNER], |key, _| {
            if let Some((seq, sink)) = index::parse_owner(key) {
                keys.push((deliveries::row(seq, sink), None));
            }
            Ok(())
        })?,
        Cf::Hooks => super::recount::walk(store, Cf::Deliveries, &[], |key, _| {
            if let Some((seq, _)) = deliveries::parse(key) {
                keys.push((hooks::hook(seq), None));
            }
            Ok(())
        })?,
        _ => {}
    }
    keys.sort();
    keys.dedup_by(|a, b| a.0 == b.0);
    Ok(keys)
}

/// Reads of dedupe keys, a damaged one counting as absent: a hook whose
/// key cannot be read is taken as new (delivered again at worst), never
/// refused for good. Its new key is written over the damaged copy.
pub(super) fn absent_if_damaged(reads: Vec<KeyRead>) -> Result<Vec<Option<Vec<u8>>>, QueueError> {
    reads
        .into_iter()
        .map(|read| match read {
            Err(StoreError::Corruption { .. }) => Ok(None),
            other => other.map_err(QueueError::from),
        })
        .collect()
}
