//! The quarantine pen: hooks whose signature failed under
//! `on_verify_failure: quarantine`, held durably (never delivered) until a
//! replay job re-verifies and releases them, or an operator purges them.
//! The pen never evicts: past its byte cap new entries are refused. Held
//! hooks are keyed by tenant, source and id (`store::keys::quarantine`);
//! the node counter `pen_bytes` counts their bytes.
//!
//! In a fleet each held hook also has a copy beyond this store
//! ([`PenCopies`]), made before it is held here, so a node taking this one
//! over carries the pen; [`Handover`]'s pen operations move held hooks
//! between a store and those copies.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

use super::commit::Kind;
use super::envelope::Envelope;
use super::{Entry, EntryOutcome, Handover, Pen, QueueError, counter_key};
use crate::store::keys::{self, prefix_end, quarantine};
use crate::store::{Batch, Cf, Durability, Scan, WriteOp};

/// Held hooks removed per synced batch by a purge.
const PEN_PURGE_CHUNK: usize = 500;

/// The pen's default byte cap.
pub const DEFAULT_PEN_BYTES: u64 = 1 << 30;
const PEN_BYTES: &str = "pen_bytes";

/// A held hook, as listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PenEntry {
    pub envelope: Envelope,
    /// The key to pass to [`Pen::pen_delete`] (and to resume a listing).
    pub key: Vec<u8>,
}

/// A copy of each held hook kept beyond this store (`fleet`: the object
/// store bucket `<stream>-pen`), by the hook's pen key.
pub trait PenCopies: Send + Sync + 'static {
    /// Keep `value` (an encoded envelope) under `key`, durably, before the
    /// hook is held here: a held hook always has its copy.
    fn copy<'a>(
        &'a self,
        key: &'a [u8],
        value: &'a [u8],
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send + 'a>>;
}

impl Pen {
    /// Hold `envelope` in the pen, synced; its copy first, when the pen
    /// keeps one beyond this store. `QuarantineFull` past the cap.
    pub async fn quarantine(
        &self,
        envelope: &Envelope,
        cap_bytes: u64,
        copies: Option<&dyn PenCopies>,
    ) -> Result<(), QueueError> {
        let size = envelope.size();
        let over = |held: i64| held.max(0) as u64 + size > cap_bytes;
        let key = quarantine::held(&envelope.tenant_id, &envelope.source_id, &envelope.id);
        let value = envelope.encode();
        if let Some(copies) = copies {
            // Checked before the copy too, so a full pen copies nothing.
            if over(self.count(None, PEN_BYTES)?) {
                return Err(QueueError::QuarantineFull);
            }
            copies.copy(&key, &value).await.map_err(QueueError::PenCopy)?;
        }
        let _serial = self.pen.lock().unwrap_or_else(|e| e.into_inner());
        if over(self.count(None, PEN_BYTES)?) {
            return Err(QueueError::QuarantineFull);
        }
        let mut batch = Batch::new();
        batch.put(Cf::Quarantine, key, value);
        batch.add_counter(counter_key(None, PEN_BYTES), size as i64);
        self.write_pen(&batch)
    }

    /// Held hooks of one tenant and source, oldest first, after `after`.
    pub fn quarantined(
        &self,
        tenant: &str,
        source: &str,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<PenEntry>, QueueError> {
        self.pen_page(Some(tenant), Some(source), after, limit)
    }

    /// Held hooks of every tenant, one tenant, or one of its sources, in
    /// key order after `after` (a source without its tenant means all).
    pub fn pen_page(
        &self,
        tenant: Option<&str>,
        source: Option<&str>,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<PenEntry>, QueueError> {
        let prefix = quarantine::prefix(tenant, source);
        let from = after.map_or_else(|| prefix.clone(), keys::after);
        let rows =
            self.store.scan(&Scan { cf: Cf::Quarantine, from, to: prefix_end(&prefix), reverse: false, limit })?;
        rows.into_iter()
            .map(|(key, value)| {
                let envelope =
                    Envelope::decode(0, &value).map_err(|e| QueueError::Corrupt(format!("quarantined hook: {e}")))?;
                Ok(PenEntry { envelope, key })
            })
            .collect()
    }

    /// Remove held hooks (as [`Queue::pen_page`] selects them) in synced
    /// chunks; how many went.
    pub fn purge_pen(&self, tenant: Option<&str>, source: Option<&str>) -> Result<u64, QueueError> {
        let mut removed = 0;
        loop {
            let _serial = self.pen.lock().unwrap_or_else(|e| e.into_inner());
            let held = self.pen_page(tenant, source, None, PEN_PURGE_CHUNK)?;
            if held.is_empty() {
                return Ok(removed);
            }
            let mut batch = Batch::new();
            for entry in &held {
                for op in Pen::pen_delete(entry) {
                    batch.push(op);
                }
            }
            self.write_pen(&batch)?;
            removed += held.len() as u64;
        }
    }

    /// The ops that take `entry` out of the pen: for `release`'s extra ops
    /// (so a hook is never both committed and still held) or a purge.
    pub fn pen_delete(entry: &PenEntry) -> Vec<WriteOp> {
        vec![
            WriteOp::Delete { cf: Cf::Quarantine, key: entry.key.clone() },
            WriteOp::AddCounter { key: counter_key(None, PEN_BYTES), delta: -(entry.envelope.size() as i64) },
        ]
    }
}

/// Whether `key` names a held hook (a listing's cursor).
pub fn is_pen_key(key: &[u8]) -> bool {
    quarantine::parse(key).is_some()
}

impl Pen {
    /// Commit hooks out of the quarantine pen: `enqueue`'s semantics plus
    /// `replay_id`, with `extra` (the pen deletes, the job's cursor) in the
    /// same synced batch, even when every entry is a duplicate. A tenant or
    /// quota refusal refuses the whole call: nothing commits.
    pub async fn release(
        &self,
        entries: Vec<Entry>,
        replay_id: &str,
        extra: Batch,
    ) -> Result<Vec<EntryOutcome>, QueueError> {
        let planned = self.prepare(entries, true, Some(replay_id))?;
        let released = self.call(Kind::Release, planned, extra, None).await;
        self.pen_changes.fetch_add(1, Ordering::AcqRel);
        released
    }
}

impl Handover {
    /// Every held hook's pen key.
    pub fn held_keys(&self) -> Result<BTreeSet<Vec<u8>>, QueueError> {
        let prefix = quarantine::prefix(None, None);
        let mut keys = BTreeSet::new();
        let mut from = prefix.clone();
        loop {
            let scan = Scan { cf: Cf::Quarantine, from, to: prefix_end(&prefix), reverse: false, limit: 1000 };
            let page = self.store.scan(&scan)?;
            let Some((last, _)) = page.last() else { return Ok(keys) };
            from = keys::after(last);
            keys.extend(page.into_iter().map(|(key, _)| key));
        }
    }

    /// How many times the pen was written since the store opened: a count
    /// unchanged since a look at the pen means nothing changed.
    pub fn pen_changes(&self) -> u64 {
        self.pen_changes.load(Ordering::Acquire)
    }

    /// The stored form of the hook held under `key`.
    pub fn held_value(&self, key: &[u8]) -> Result<Option<Vec<u8>>, QueueError> {
        Ok(self.store.get(Cf::Quarantine, key)?)
    }

    /// Hold a hook taken from another node's pen (or this node's lost
    /// store) under `key`: past no cap (it was admitted once); nothing if
    /// it is held already. Whether it was added.
    pub fn hold_taken(&self, key: &[u8], value: &[u8]) -> Result<bool, QueueError> {
        let envelope =
            Envelope::decode(0, value).map_err(|e| QueueError::Corrupt(format!("a quarantined hook's copy: {e}")))?;
        if quarantine::held(&envelope.tenant_id, &envelope.source_id, &envelope.id) != key {
            return Err(QueueError::Corrupt("a quarantined hook's copy names another hook".into()));
        }
        let _serial = self.pen.lock().unwrap_or_else(|e| e.into_inner());
        if self.store.get(Cf::Quarantine, key)?.is_some() {
            return Ok(false);
        }
        let mut batch = Batch::new();
        batch.put(Cf::Quarantine, key.to_vec(), value.to_vec());
        batch.add_counter(counter_key(None, PEN_BYTES), envelope.size() as i64);
        self.write_pen(&batch)?;
        Ok(true)
    }

    /// Drop the hooks held under `keys` (a peer took them); how many went.
    pub fn drop_held(&self, keys: &[Vec<u8>]) -> Result<u64, QueueError> {
        if keys.is_empty() {
            return Ok(0);
        }
        let _serial = self.pen.lock().unwrap_or_else(|e| e.into_inner());
        let mut batch = Batch::new();
        let mut dropped = 0;
        for key in keys {
            let Some(value) = self.store.get(Cf::Quarantine, key)? else { continue };
            let size = Envelope::decode(0, &value).map_or(0, |envelope| envelope.size());
            batch.push(WriteOp::Delete { cf: Cf::Quarantine, key: key.clone() });
            batch.add_counter(counter_key(None, PEN_BYTES), -(size as i64));
            dropped += 1;
        }
        self.write_pen(&batch)?;
        Ok(dropped)
    }
}

impl super::Core {
    /// Bytes the pen holds (any handle: the pen's own, and the fleet's).
    pub fn pen_bytes(&self) -> Result<u64, QueueError> {
        Ok(self.count(None, PEN_BYTES)?.max(0) as u64)
    }

    /// Write a batch of pen changes, synced, and count the change.
    fn write_pen(&self, batch: &Batch) -> Result<(), QueueError> {
        self.store.write(batch, Durability::Synced)?;
        self.pen_changes.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }
}
