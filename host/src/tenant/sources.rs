//! Sources created through the admin API, stored as their config section
//! (JSON) in the store's jobs family, so they come back at boot.
//!
//! | family | key | value |
//! |---|---|---|
//! | jobs | `s` · len · tenant · name | the source's section, as JSON |

use crate::config::SourceSection;
use crate::queue::{Queue, QueueError};
use crate::store::keys::{KeyBuf, KeyReader};
use crate::store::{Batch, Cf};

fn source_key(tenant: &str, name: &str) -> Vec<u8> {
    KeyBuf::new().tag(b's').short(tenant).tail(name.as_bytes()).build()
}

/// Every stored source: (name, section), the section naming its tenant.
pub fn stored_sources(queue: &Queue) -> Result<Vec<(String, SourceSection)>, QueueError> {
    queue
        .jobs_scan(b"s")?
        .into_iter()
        .map(|(key, value)| {
            let mut r = KeyReader::new(&key);
            let name = match (r.tag(), r.short()) {
                (Some(b's'), Some(_tenant)) => String::from_utf8_lossy(r.rest()).into_owned(),
                _ => return Err(QueueError::Corrupt("a stored source's key".into())),
            };
            let section: SourceSection = serde_json::from_slice(&value)
                .map_err(|e| QueueError::Corrupt(format!("stored source `{name}`: {e}")))?;
            Ok((name, section))
        })
        .collect()
}

/// Store (or replace) a source, synced.
pub fn put_source(queue: &Queue, name: &str, section: &SourceSection) -> Result<(), QueueError> {
    let bytes = serde_json::to_vec(section).map_err(|e| QueueError::Corrupt(e.to_string()))?;
    let mut batch = Batch::new();
    batch.put(Cf::Jobs, source_key(&section.tenant, name), bytes);
    queue.job_put(batch)
}

pub fn delete_source(queue: &Queue, tenant: &str, name: &str) -> Result<(), QueueError> {
    let mut batch = Batch::new();
    batch.delete(Cf::Jobs, source_key(tenant, name));
    queue.job_put(batch)
}
