//! The quarantine pen: hooks whose signature failed under
//! `on_verify_failure: quarantine`, held durably (never delivered) until a
//! replay job re-verifies and releases them, or an operator purges them.
//! The pen never evicts: past its byte cap new entries are refused. Held
//! hooks are keyed by tenant, source and id (`store::keys::quarantine`);
//! the node counter `pen_bytes` counts their bytes.

use super::commit::Kind;
use super::envelope::Envelope;
use super::{Entry, EntryOutcome, Pen, QueueError, counter_key};
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

impl Pen {
    /// Hold `envelope` in the pen, synced. `QuarantineFull` past the cap.
    pub fn quarantine(&self, envelope: &Envelope, cap_bytes: u64) -> Result<(), QueueError> {
        let _serial = self.pen.lock().unwrap_or_else(|e| e.into_inner());
        let held = self.count(None, PEN_BYTES)?.max(0) as u64;
        let size = envelope.size();
        if held + size > cap_bytes {
            return Err(QueueError::QuarantineFull);
        }
        let mut batch = Batch::new();
        batch.put(
            Cf::Quarantine,
            quarantine::held(&envelope.tenant_id, &envelope.source_id, &envelope.id),
            envelope.encode(),
        );
        batch.add_counter(counter_key(None, PEN_BYTES), size as i64);
        self.store.write(&batch, Durability::Synced).map_err(Into::into)
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
            self.store.write(&batch, Durability::Synced)?;
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

    /// Bytes the pen holds.
    pub fn pen_bytes(&self) -> Result<u64, QueueError> {
        Ok(self.count(None, PEN_BYTES)?.max(0) as u64)
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
        self.call(Kind::Release, planned, extra, None).await
    }
}
