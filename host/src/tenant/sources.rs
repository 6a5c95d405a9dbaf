//! Sources created through the admin API, stored as their config section
//! (JSON) in the store's jobs family (or, without a store, a file), so they
//! come back at boot.
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
    super::put_json(queue, source_key(&section.tenant, name), section)
}

pub fn delete_source(queue: &Queue, tenant: &str, name: &str) -> Result<(), QueueError> {
    let mut batch = Batch::new();
    batch.delete(Cf::Jobs, source_key(tenant, name));
    queue.job_put(batch)
}

/// Where runtime sources are kept: the store's jobs family, or, under
/// `wal.mode: none` (which keeps no store), a JSON file in the data
/// directory, replaced whole by an fsynced rename.
pub enum SourceRecords {
    Store(std::sync::Arc<Queue>),
    File(std::path::PathBuf),
}

impl SourceRecords {
    /// Every stored source: (name, section).
    pub fn all(&self) -> Result<Vec<(String, SourceSection)>, QueueError> {
        match self {
            SourceRecords::Store(queue) => stored_sources(queue),
            SourceRecords::File(path) => Ok(read_file(path)?.into_iter().collect()),
        }
    }

    pub fn put(&self, name: &str, section: &SourceSection) -> Result<(), QueueError> {
        match self {
            SourceRecords::Store(queue) => put_source(queue, name, section),
            SourceRecords::File(path) => {
                let mut all = read_file(path)?;
                all.insert(name.to_string(), section.clone());
                write_file(path, &all)
            }
        }
    }

    pub fn delete(&self, tenant: &str, name: &str) -> Result<(), QueueError> {
        match self {
            SourceRecords::Store(queue) => delete_source(queue, tenant, name),
            SourceRecords::File(path) => {
                let mut all = read_file(path)?;
                all.remove(name);
                write_file(path, &all)
            }
        }
    }
}

type SourceFile = std::collections::BTreeMap<String, SourceSection>;

fn file_error(path: &std::path::Path, e: impl std::fmt::Display) -> QueueError {
    QueueError::Store(format!("{}: {e}", path.display()))
}

fn read_file(path: &std::path::Path) -> Result<SourceFile, QueueError> {
    match std::fs::read(path) {
        Ok(bytes) => {
            serde_json::from_slice(&bytes).map_err(|e| QueueError::Corrupt(format!("{}: {e}", path.display())))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(SourceFile::new()),
        Err(e) => Err(file_error(path, e)),
    }
}

/// Write the whole file beside itself, fsync it, rename it into place and
/// fsync the directory: a crash leaves the old file or the new one.
fn write_file(path: &std::path::Path, all: &SourceFile) -> Result<(), QueueError> {
    use std::io::Write as _;
    let bytes = serde_json::to_vec_pretty(all).map_err(|e| file_error(path, e))?;
    let staged = path.with_extension("json.new");
    let mut file = std::fs::File::create(&staged).map_err(|e| file_error(&staged, e))?;
    file.write_all(&bytes).and_then(|()| file.sync_all()).map_err(|e| file_error(&staged, e))?;
    std::fs::rename(&staged, path).map_err(|e| file_error(path, e))?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| file_error(dir, e))?;
    }
    Ok(())
}
