//! What the writer does besides commits, on the same thread so its checks
//! are never raced: the dedupe expiry sweep, marking a tenant as being
//! erased, forgetting a tenant, and recovering a store that failed.

use std::sync::atomic::Ordering;

use super::dual::lock;
use super::{CommitPath, Writer};
use crate::queue::dedupe::Original;
use crate::queue::{COUNTER_KINDS, QueueError, counter_key};
use crate::store::keys::{dedupe, index, meta};
use crate::store::{Batch, Cf, Durability, Scan};

/// Rows per batch when forgetting a tenant's keys.
const CHUNK: usize = 500;

impl Writer {
    pub(super) fn sweep(&mut self, now_ms: u64, limit: usize) -> Result<usize, QueueError> {
        let to = dedupe::expiry_from(now_ms.saturating_add(1));
        let from = dedupe::expiries();
        let expired = self.store.scan(&Scan { cf: Cf::Dedupe, from, to: Some(to), reverse: false, limit })?;
        let parsed: Vec<_> = expired.iter().filter_map(|(k, _)| dedupe::parse_expiry(k).map(|p| (k, p))).collect();
        let keys: Vec<Vec<u8>> = parsed.iter().map(|(_, expiry)| expiry.entry()).collect();
        let values = crate::queue::damage::absent_if_damaged(self.store.multi_get_each(Cf::Dedupe, &keys)?)?;
        let mut batch = Batch::new();
        let mut removed = 0;
        for (((key_of_expiry, expiry), key), value) in parsed.iter().zip(keys).zip(values) {
            batch.delete(Cf::Dedupe, key_of_expiry.to_vec());
            // The key may have been taken again since (a new hook after the
            // old one expired): that one is not ours to delete.
            if value.and_then(|v| Original::decode(&v).ok()).is_some_and(|o| o.expires_at == expiry.expires_at) {
                batch.delete(Cf::Dedupe, key);
                batch.add_counter(counter_key(None, "dedupe_keys"), -1);
                batch.add_counter(counter_key(Some(&expiry.tenant), "dedupe_keys"), -1);
                removed += 1;
            }
        }
        for (key, _) in &expired {
            if dedupe::parse_expiry(key).is_none() {
                tracing::warn!(key = hex::encode(key), "malformed dedupe expiry key; dropped");
                batch.delete(Cf::Dedupe, key.clone());
            }
        }
        if batch.is_empty() {
            return Ok(0);
        }
        self.store.write(&batch, Durability::Synced)?;
        self.ledger.node_keys -= removed as i64;
        if removed > 0 {
            self.forget_prefetches();
        }
        for (_, expiry) in &parsed {
            self.ledger.tenant_keys.remove(&expiry.tenant);
        }
        Ok(removed)
    }

    /// Reopen the store after a failed write or WAL sync, once the disk
    /// takes writes again, and rebuild what the writer keeps in memory from
    /// it. Every group written before is answered first (refused: no sync
    /// covers it); what the reopened store holds is flushed to disk before
    /// any commit is acked again. `Ok(false)`: nothing to recover.
    pub(super) fn recover(&mut self) -> Result<bool, QueueError> {
        if !self.stats.failed() && !self.store.health().failing() {
            return Ok(false);
        }
        if let Some(syncer) = self.path.syncer() {
            syncer.drain();
        }
        self.store.recover()?;
        if let CommitPath::Dual(dual) = &self.path {
            // `dual`: batches the intake log has and the store lost.
            let records = lock(&dual.log).replay().map_err(|e| QueueError::Intake(e.to_string()))?;
            crate::queue::open::apply_intake(self.store.as_ref(), &records)?;
        }
        // `fleet`: hooks the log has and the store lost (written, never
        // synced) are committed again before any other group.
        let settling = if self.path.is_fleet() { Some(self.settle_from_log(0)?) } else { None };
        self.reload_view()?;
        self.due_floor.reset();
        self.stats.write_failed.store(false, Ordering::Release);
        self.stats.sync_failed.store(false, Ordering::Release);
        tracing::warn!(store = %self.store.location(), "the store recovered: commits resume");
        let scanned = self.scanned_log();
        if let Some(call) = settling.filter(|call| !call.entries.is_empty() || scanned) {
            self.commit_group(vec![call]);
        }
        Ok(true)
    }

    /// Read again from the store what the writer keeps in memory of it:
    /// the tenant book, the dedupe key counts, and (forgotten) the window
    /// of recent keys.
    pub(super) fn reload_view(&mut self) -> Result<(), QueueError> {
        self.tenants.reload(self.store.as_ref())?;
        self.ledger.node_keys = self.store.counter(&counter_key(None, "dedupe_keys"))?;
        self.ledger.tenant_keys.clear();
        self.forget_prefetches();
        Ok(())
    }

    /// Dedupe keys were deleted outside a commit: every prefetch made
    /// before is read again (see `Ledger::forget_prefetches`).
    pub(super) fn forget_prefetches(&mut self) {
        let epoch = self.ledger.forget_prefetches();
        self.stats.epoch.store(epoch, Ordering::Release);
    }

    pub(super) fn set_erasing(&mut self, tenant: &str, erasing: bool) -> Result<(), QueueError> {
        let mut batch = Batch::new();
        if erasing {
            batch.put(Cf::Meta, meta::erasing(tenant), Vec::new());
        } else {
            batch.delete(Cf::Meta, meta::erasing(tenant));
        }
        self.store.write(&batch, Durability::Synced)?;
        self.tenants.set_erasing(tenant, erasing);
        Ok(())
    }

    /// Delete every key under `prefix` in `cf`, a chunk per synced write,
    /// `also` adding to each chunk's batch (given how many keys it holds).
    /// Returns how many keys went.
    fn delete_all(&self, cf: Cf, prefix: &[u8], also: impl Fn(&mut Batch, usize)) -> Result<u64, QueueError> {
        let mut removed = 0u64;
        loop {
            let keys = self.store.scan(&Scan::prefix(cf, prefix, CHUNK))?;
            if keys.is_empty() {
                return Ok(removed);
            }
            let mut batch = Batch::new();
            also(&mut batch, keys.len());
            removed += keys.len() as u64;
            for (key, _) in keys {
                batch.delete(cf, key);
            }
            self.store.write(&batch, Durability::Synced)?;
        }
    }

    pub(super) fn forget(&mut self, tenant: &str) -> Result<u64, QueueError> {
        let owned = self.store.scan(&Scan::prefix(Cf::Index, &index::owner_prefix(tenant), 1))?;
        if !owned.is_empty() {
            return Err(QueueError::TenantHasRows(tenant.to_string()));
        }
        let removed = self.delete_all(Cf::Dedupe, &dedupe::entries_of(tenant), |batch, keys| {
            batch.add_counter(counter_key(None, "dedupe_keys"), -(keys as i64));
        })?;
        self.ledger.node_keys -= removed as i64;
        // Their expiry entries stay until the sweep finds no key behind them.
        // The gaps its ordered lines kept go (the node's memory of them may
        // stay: a line it names only makes a claim look).
        self.delete_all(Cf::Meta, &meta::gap_prefix(Some(tenant)), |_, _| {})?;
        let mut batch = Batch::new();
        for kind in COUNTER_KINDS {
            batch.delete(Cf::Counters, counter_key(Some(tenant), kind));
        }
        batch.delete(Cf::Meta, meta::holding(tenant));
        self.store.write(&batch, Durability::Synced)?;
        self.tenants.forget(tenant);
        self.ledger.tenant_keys.remove(tenant);
        self.forget_prefetches();
        Ok(removed)
    }
}
