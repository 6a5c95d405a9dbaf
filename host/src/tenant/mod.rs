//! Tenants: the sources they mint at runtime and the rate limits set for
//! them (both kept in the store), and erasing everything a tenant has on
//! the node.

mod erase;
mod limits;
mod sources;

pub use erase::{Erase, EraseCounts, ErasePhase, Erasures};
pub use limits::{StoredRate, put_limit, stored_limits};
/// Store `value` as JSON under `key` in the jobs family, synced.
fn put_json(
    queue: &crate::queue::Queue,
    key: Vec<u8>,
    value: &impl serde::Serialize,
) -> Result<(), crate::queue::QueueError> {
    let bytes = serde_json::to_vec(value).map_err(|e| crate::queue::QueueError::Corrupt(e.to_string()))?;
    let mut batch = crate::store::Batch::new();
    batch.put(crate::store::Cf::Jobs, key, bytes);
    queue.job_put(batch)
}

pub use sources::{SourceRecords, delete_source, put_source, stored_sources};
