//! The archive: with `archive` on, every accepted hook is also kept, in
//! the same synced batch as its commit, for its retention. An `archive`
//! replay job redrives a received_at window of it (`redrive`). Keys are
//! tenant first (`store::keys::archive`): a window across tenants walks
//! tenant by tenant.

use super::commit::Kind;
use super::envelope::Envelope;
use super::{Archive, Entry, EntryOutcome, QueueError};
use crate::store::keys::{archive, prefix_end};
use crate::store::{Batch, Cf, Durability, Scan};

/// Entries removed per synced batch by a sweep or a purge.
const ARCHIVE_CHUNK: usize = 500;

/// An archived hook, with its key (a replay's cursor).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Archived {
    pub envelope: Envelope,
    pub key: Vec<u8>,
}

impl Archive {
    /// Tenants with archived hooks, in key order.
    pub fn archive_tenants(&self) -> Result<Vec<String>, QueueError> {
        let mut tenants = Vec::new();
        let mut from = archive::all();
        loop {
            let to = prefix_end(&archive::all());
            let next = self.store.scan(&Scan { cf: Cf::Archive, from, to, reverse: false, limit: 1 })?;
            let Some((key, _)) = next.first() else { return Ok(tenants) };
            let tenant = archive::tenant(key).ok_or_else(|| QueueError::Corrupt("archive key".into()))?;
            from = prefix_end(&archive::of_tenant(&tenant)).unwrap_or_default();
            tenants.push(tenant);
            if from.is_empty() {
                return Ok(tenants);
            }
        }
    }

    /// One tenant's hooks received in `[since, until)`, after the key
    /// `after`, in receive order.
    pub fn archived(
        &self,
        tenant: &str,
        since: u64,
        until: u64,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<Archived>, QueueError> {
        let start = archive::window_start(tenant, since);
        let from = match after {
            Some(key) if key >= start.as_slice() => crate::store::keys::after(key),
            _ => start,
        };
        let to = Some(archive::window_start(tenant, until));
        let rows = self.store.scan(&Scan { cf: Cf::Archive, from, to, reverse: false, limit })?;
        rows.into_iter()
            .map(|(key, value)| {
                let envelope =
                    Envelope::decode(0, &value).map_err(|e| QueueError::Corrupt(format!("archived hook: {e}")))?;
                Ok(Archived { envelope, key })
            })
            .collect()
    }

    /// Drop archived hooks received before `before` (their retention is
    /// over), in synced chunks; how many went.
    pub fn sweep_archive(&self, before: u64) -> Result<u64, QueueError> {
        let mut removed = 0;
        for tenant in self.archive_tenants()? {
            removed += self.delete_range(archive::of_tenant(&tenant), archive::window_start(&tenant, before))?;
        }
        Ok(removed)
    }

    /// Drop a tenant's whole archive (an erase); how many went.
    pub fn purge_archive(&self, tenant: &str) -> Result<u64, QueueError> {
        let prefix = archive::of_tenant(tenant);
        let end = prefix_end(&prefix).unwrap_or_default();
        self.delete_range(prefix, end)
    }

    fn delete_range(&self, from: Vec<u8>, to: Vec<u8>) -> Result<u64, QueueError> {
        let mut removed = 0;
        loop {
            let keys = self.store.scan(&Scan {
                cf: Cf::Archive,
                from: from.clone(),
                to: Some(to.clone()),
                reverse: false,
                limit: ARCHIVE_CHUNK,
            })?;
            if keys.is_empty() {
                return Ok(removed);
            }
            let mut batch = Batch::new();
            for (key, _) in &keys {
                batch.delete(Cf::Archive, key.clone());
            }
            self.store.write(&batch, Durability::Synced)?;
            removed += keys.len() as u64;
        }
    }
}

/// The tenant whose archive a key (a replay's cursor) is in.
pub fn archive_key_tenant(key: &[u8]) -> Option<String> {
    archive::tenant(key)
}

impl Archive {
    /// Commit archived hooks again with fresh seqs and `replay_id` on their
    /// rows, with `extra` (the job's cursor) in the same synced batch. No
    /// dedupe, no quotas. Returns how many were committed (a tenant being
    /// erased gets none).
    pub async fn redrive(&self, entries: Vec<Entry>, replay_id: &str, extra: Batch) -> Result<usize, QueueError> {
        let planned = self.prepare(entries, false, Some(replay_id))?;
        let outcomes = self.call(Kind::Redrive, planned, extra, None).await?;
        Ok(outcomes.iter().filter(|o| matches!(o, EntryOutcome::Committed(_))).count())
    }
}
