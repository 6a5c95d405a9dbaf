//! Durable records of jobs and runtime settings (replay jobs, tenant
//! erases, rate limits, runtime sources), as JSON in the jobs family under
//! a typed [`RecordKey`]. Replay and tenant code read and write them here,
//! never by store key; the queue only lends its store.

use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use thiserror::Error;

use crate::store::keys::records::{RecordKey, RecordKind};
use crate::store::{Batch, Cf, Durability, Scan, Store, StoreError};

#[derive(Debug, Error)]
pub enum RecordError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A stored record (or its key) that does not read: damaged, or
    /// written by a newer version.
    #[error("{0}")]
    Corrupt(String),
}

/// The job records of one store.
#[derive(Clone)]
pub struct Records {
    store: Arc<dyn Store>,
}

/// A record write to commit in another call's batch (a job's cursor with
/// the rows its page moved).
pub fn record_write<T: Serialize>(key: &RecordKey, value: &T) -> Result<Batch, RecordError> {
    let bytes = serde_json::to_vec(value).map_err(|e| RecordError::Corrupt(format!("{key} does not encode: {e}")))?;
    let mut batch = Batch::new();
    batch.put(Cf::Jobs, key.encode(), bytes);
    Ok(batch)
}

fn decode<T: DeserializeOwned>(key: &RecordKey, bytes: &[u8]) -> Result<T, RecordError> {
    serde_json::from_slice(bytes).map_err(|e| RecordError::Corrupt(format!("{key} does not decode: {e}")))
}

impl Records {
    pub fn new(store: Arc<dyn Store>) -> Records {
        Records { store }
    }

    /// One record, if stored.
    pub fn get<T: DeserializeOwned>(&self, key: &RecordKey) -> Result<Option<T>, RecordError> {
        self.store.get(Cf::Jobs, &key.encode())?.map(|bytes| decode(key, &bytes)).transpose()
    }

    /// Every record of a kind, in key order, each decoded on its own (a
    /// record that does not decode is reported, the others still read).
    #[allow(clippy::type_complexity)]
    pub fn all<T: DeserializeOwned>(
        &self,
        kind: RecordKind,
    ) -> Result<Vec<(RecordKey, Result<T, RecordError>)>, RecordError> {
        let rows = self.store.scan(&Scan::prefix(Cf::Jobs, &kind.prefix(), usize::MAX))?;
        rows.into_iter()
            .map(|(key, value)| {
                let key = RecordKey::decode(&key)
                    .filter(|k| k.kind() == kind)
                    .ok_or_else(|| RecordError::Corrupt(format!("record key {}", hex::encode(&key))))?;
                let value = decode(&key, &value);
                Ok((key, value))
            })
            .collect()
    }

    /// Store (or replace) a record, synced.
    pub fn put<T: Serialize>(&self, key: &RecordKey, value: &T) -> Result<(), RecordError> {
        Ok(self.store.write(&record_write(key, value)?, Durability::Synced)?)
    }

    /// Delete a record, synced.
    pub fn delete(&self, key: &RecordKey) -> Result<(), RecordError> {
        let mut batch = Batch::new();
        batch.delete(Cf::Jobs, key.encode());
        Ok(self.store.write(&batch, Durability::Synced)?)
    }
}
