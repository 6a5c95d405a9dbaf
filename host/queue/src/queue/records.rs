//! Durable records of jobs and runtime settings (replay jobs, tenant
//! erases, rate limits, runtime sources), as JSON in the jobs family under
//! a typed [`RecordKey`]. Replay and tenant code read and write them here,
//! never by store key.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Queue, QueueError};
use crate::store::keys::records::{RecordKey, RecordKind};
use crate::store::{Batch, Cf, Durability, Scan};

/// A record write to commit in another call's batch (a job's cursor with
/// the rows its page moved).
pub fn record_write<T: Serialize>(key: &RecordKey, value: &T) -> Result<Batch, QueueError> {
    let bytes = serde_json::to_vec(value).map_err(|e| QueueError::Corrupt(format!("{key} does not encode: {e}")))?;
    let mut batch = Batch::new();
    batch.put(Cf::Jobs, key.encode(), bytes);
    Ok(batch)
}

fn decode<T: DeserializeOwned>(key: &RecordKey, bytes: &[u8]) -> Result<T, QueueError> {
    serde_json::from_slice(bytes).map_err(|e| QueueError::Corrupt(format!("{key} does not decode: {e}")))
}

impl Queue {
    /// One record, if stored.
    pub fn record<T: DeserializeOwned>(&self, key: &RecordKey) -> Result<Option<T>, QueueError> {
        self.store.get(Cf::Jobs, &key.encode())?.map(|bytes| decode(key, &bytes)).transpose()
    }

    /// Every record of a kind, in key order, each decoded on its own (a
    /// record that does not decode is reported, the others still read).
    #[allow(clippy::type_complexity)]
    pub fn records<T: DeserializeOwned>(
        &self,
        kind: RecordKind,
    ) -> Result<Vec<(RecordKey, Result<T, QueueError>)>, QueueError> {
        let rows = self.store.scan(&Scan::prefix(Cf::Jobs, &kind.prefix(), usize::MAX))?;
        rows.into_iter()
            .map(|(key, value)| {
                let key = RecordKey::decode(&key)
                    .filter(|k| k.kind() == kind)
                    .ok_or_else(|| QueueError::Corrupt(format!("record key {}", hex::encode(&key))))?;
                let value = decode(&key, &value);
                Ok((key, value))
            })
            .collect()
    }

    /// Store (or replace) a record, synced.
    pub fn put_record<T: Serialize>(&self, key: &RecordKey, value: &T) -> Result<(), QueueError> {
        Ok(self.store.write(&record_write(key, value)?, Durability::Synced)?)
    }

    /// Delete a record, synced.
    pub fn delete_record(&self, key: &RecordKey) -> Result<(), QueueError> {
        let mut batch = Batch::new();
        batch.delete(Cf::Jobs, key.encode());
        Ok(self.store.write(&batch, Durability::Synced)?)
    }
}
