//! Sources created through the admin API, stored as their config section
//! (JSON) in the store's source records (or, without a store, a file), so
//! they come back at boot.

use crate::config::Config;
use crate::queue::QueueError;
use crate::records::Records;
use crate::runtime::Runtime;
use crate::source::SourceSection;
use crate::source::{LiveDirectory, Origin};
use crate::store::StoreError;
use crate::store::keys::records::{RecordKey, RecordKind};

fn source_key(tenant: &str, name: &str) -> RecordKey {
    RecordKey::Source { tenant: tenant.to_string(), name: name.to_string() }
}

/// Every stored source: (name, section), the section naming its tenant.
pub fn stored_sources(records: &Records) -> Result<Vec<(String, SourceSection)>, QueueError> {
    records
        .all::<SourceSection>(RecordKind::Source)?
        .into_iter()
        .map(|(key, section)| match key {
            RecordKey::Source { name, .. } => Ok((name, section?)),
            other => Err(QueueError::Corrupt(format!("{other} among sources"))),
        })
        .collect()
}

/// Store (or replace) a source, synced.
pub fn put_source(records: &Records, name: &str, section: &SourceSection) -> Result<(), QueueError> {
    Ok(records.put(&source_key(&section.tenant, name), section)?)
}

pub fn delete_source(records: &Records, tenant: &str, name: &str) -> Result<(), QueueError> {
    Ok(records.delete(&source_key(tenant, name))?)
}

/// Where runtime sources are kept: the store's jobs family, or, under
/// `wal.mode: none` (which keeps no store), a JSON file in the data
/// directory, replaced whole by an fsynced rename.
pub enum SourceRecords {
    Store(Records),
    File(std::path::PathBuf),
}

impl SourceRecords {
    /// Every stored source: (name, section).
    pub fn all(&self) -> Result<Vec<(String, SourceSection)>, QueueError> {
        match self {
            SourceRecords::Store(records) => stored_sources(records),
            SourceRecords::File(path) => Ok(read_file(path)?.into_iter().collect()),
        }
    }

    pub fn put(&self, name: &str, section: &SourceSection) -> Result<(), QueueError> {
        match self {
            SourceRecords::Store(records) => put_source(records, name, section),
            SourceRecords::File(path) => {
                let mut all = read_file(path)?;
                all.insert(name.to_string(), section.clone());
                write_file(path, &all)
            }
        }
    }

    /// Load every stored source into `sources`; how many loaded. One that
    /// no longer loads (its sink was removed from the config, say) is
    /// reported and left out: its hooks are refused and its rows
    /// dead-lettered as `gone`. A config source of the same name wins.
    pub async fn load_into(&self, config: &Config, runtime: &Runtime, sources: &LiveDirectory) -> usize {
        let stored = match self.all() {
            Ok(stored) => stored,
            Err(e) => {
                tracing::error!("cannot read the stored sources: {e}");
                return 0;
            }
        };
        let mut loaded = 0;
        for (name, section) in stored {
            if sources.get(&name).is_some() {
                tracing::error!(source = %name, "a stored source has the name of a config source; the config's wins");
                continue;
            }
            let source = match config.source_settings(&name, &section) {
                Ok(settings) => crate::source::load(settings, runtime, config.wal_mode()).await,
                Err(problems) => Err(problems),
            };
            match source {
                Ok(source) => {
                    sources.insert(source, Origin::Runtime);
                    loaded += 1;
                }
                Err(problems) => {
                    for problem in problems {
                        tracing::error!(source = %name, "stored source not loaded: {problem}");
                    }
                }
            }
        }
        loaded
    }

    pub fn delete(&self, tenant: &str, name: &str) -> Result<(), QueueError> {
        match self {
            SourceRecords::Store(records) => delete_source(records, tenant, name),
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
    QueueError::Store(StoreError::Io { what: "source file", reason: format!("{}: {e}", path.display()) })
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
