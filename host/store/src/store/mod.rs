//! Durable storage of a node, behind the [`Store`] trait: the queue, replay
//! and tenant jobs depend on the trait alone, and [`open_embedded`] picks
//! the engine (RocksDB, in [`rocks`]). A second engine plugs in by
//! implementing the trait; the key layouts ([`keys`]) stay the same.
//!
//! Invariants every engine keeps for everyone above it:
//! - every multi-row change is one [`Batch`], applied atomically; a synced
//!   write returns only after the WAL is fsynced;
//! - a read or scan that fails is an error, never an empty result;
//! - a store that exists but cannot be opened is an error, never a new,
//!   empty store;
//! - integers in keys are big-endian (see [`keys`]), so byte order is
//!   numeric order and range scans walk rows in sequence.
//!
//! Callers: the queue (all row kinds and job records).

mod batch;
mod health;
pub mod keys;
mod rocks;
mod salvage;
mod skip;

use std::fmt;
use std::sync::Arc;

use thiserror::Error;

pub use batch::{Batch, BatchDecodeError, WriteOp};
pub use health::{Health, free_bytes};
pub use rocks::{
    DEFAULT_WAL_MAX_BYTES, Damage, Faults, RocksStore, Skipped, StoreOptions, VerifyProgress, VerifyReport,
};
pub use salvage::{DamagedRange, NamedKey, Salvaged};

/// The column families, one per kind of row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cf {
    /// Node metadata: the seq marker, the cursor key.
    Meta,
    /// Hooks by seq; large bodies go to blob files.
    Hooks,
    /// Delivery rows by (seq, sink).
    Deliveries,
    /// The due, inflight, dead and by-tenant dead indexes.
    Index,
    /// Dedupe keys and their expiry index.
    Dedupe,
    /// Counters per node and per tenant, updated by merge.
    Counters,
    /// The quarantine pen.
    Quarantine,
    /// Durable job state (replays, tenant erases) and their cursors.
    Jobs,
    /// Accepted hooks kept for their retention, for `archive` replays.
    Archive,
}

impl Cf {
    /// Every family; a family's id is its place here, so new ones go last.
    pub const ALL: [Cf; 9] = [
        Cf::Meta,
        Cf::Hooks,
        Cf::Deliveries,
        Cf::Index,
        Cf::Dedupe,
        Cf::Counters,
        Cf::Quarantine,
        Cf::Jobs,
        Cf::Archive,
    ];

    /// A stable one-byte id, for encoded batches.
    pub fn id(self) -> u8 {
        Cf::ALL.iter().position(|cf| *cf == self).map_or(u8::MAX, |i| i as u8)
    }

    pub fn from_id(id: u8) -> Option<Cf> {
        Cf::ALL.get(usize::from(id)).copied()
    }

    /// The family of that name.
    pub fn named(name: &str) -> Option<Cf> {
        Cf::ALL.into_iter().find(|cf| cf.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            Cf::Meta => "default",
            Cf::Hooks => "hooks",
            Cf::Deliveries => "deliveries",
            Cf::Index => "index",
            Cf::Dedupe => "dedupe",
            Cf::Counters => "counters",
            Cf::Quarantine => "quarantine",
            Cf::Jobs => "jobs",
            Cf::Archive => "archive",
        }
    }
}

impl fmt::Display for Cf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether a write waits for the WAL to reach the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// fsync before returning: the write survives power loss.
    Synced,
    /// In the WAL's page cache: survives a crash of the process, not of
    /// the machine. For rows whose loss only repeats work (outcomes).
    Buffered,
}

/// Which rows a scan visits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scan {
    pub cf: Cf,
    /// Inclusive lower bound.
    pub from: Vec<u8>,
    /// Exclusive upper bound; `None` scans to the end of the family.
    pub to: Option<Vec<u8>>,
    /// Walk from the upper bound down.
    pub reverse: bool,
    /// Stop after this many rows.
    pub limit: usize,
}

impl Scan {
    /// Every key starting with `prefix`, ascending.
    pub fn prefix(cf: Cf, prefix: &[u8], limit: usize) -> Scan {
        Scan { cf, from: prefix.to_vec(), to: keys::prefix_end(prefix), reverse: false, limit }
    }
}

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum StoreError {
    #[error("cannot open the store at {path}: {reason}")]
    Open { path: String, reason: String },
    #[error("store {what} failed: {reason}")]
    Io { what: &'static str, reason: String },
    #[error("the store is missing column family `{0}`")]
    MissingCf(&'static str),
    #[error("counter at {key} holds {len} bytes, not an 8-byte integer")]
    BadCounter { key: String, len: usize },
    #[error("the seq marker holds {len} bytes, not an 8-byte integer")]
    BadSeqMarker { len: usize },
    /// A checksum does not match: data on disk is damaged. The reason
    /// names the file.
    #[error("store {what} found damaged data: {reason}")]
    Corruption { what: &'static str, reason: String },
}

/// Estimates and sizes for `stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    pub estimated_hooks: u64,
    pub estimated_deliveries: u64,
    /// SST and blob files across every family.
    pub disk_bytes: u64,
}

/// One key's read: its value if any, or why it could not be read.
pub type KeyRead = Result<Option<Vec<u8>>, StoreError>;

/// A key and its value, as a scan returns them.
pub type KeyValue = (Vec<u8>, Vec<u8>);

/// What the queue needs from a storage engine.
pub trait Store: Send + Sync + 'static {
    fn write(&self, batch: &Batch, durability: Durability) -> Result<(), StoreError>;
    /// What the store's writes and reads found of its state.
    fn health(&self) -> &Health;
    /// Empty a family, its files (damaged ones too) dropped; the caller
    /// writes back what belongs there.
    fn reset(&self, cf: Cf) -> Result<(), StoreError>;
    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError>;
    /// One read of many keys, results in the order asked.
    fn multi_get(&self, cf: Cf, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>, StoreError>;
    /// The same, each key's read failing on its own (a damaged block fails
    /// the keys in it, not the others).
    fn multi_get_each(&self, cf: Cf, keys: &[Vec<u8>]) -> Result<Vec<KeyRead>, StoreError>;
    /// Scans read around damaged blocks (noting each, see `Health`).
    fn scan(&self, scan: &Scan) -> Result<Vec<KeyValue>, StoreError>;
    /// The greatest key of a family, if any.
    fn last_key(&self, cf: Cf) -> Result<Option<Vec<u8>>, StoreError>;
    /// A counter's value (0 when never written).
    fn counter(&self, key: &[u8]) -> Result<i64, StoreError>;
    fn stats(&self) -> Result<StoreStats, StoreError>;
    /// Make every write made so far durable (fsync the WAL): buffered
    /// writes before this call survive power loss once it returns `Ok`.
    fn sync_wal(&self) -> Result<(), StoreError>;
    /// Persist everything written so far outside the engine's own log
    /// (RocksDB: flush the memtables), so that log can be dropped and a
    /// restart replays nothing.
    fn flush(&self) -> Result<(), StoreError>;
    /// Recover from a failed write or WAL sync (a full disk): drop what is
    /// not on disk, clear the engine's error state, and persist what it
    /// holds. Fails while the disk still refuses writes.
    fn recover(&self) -> Result<(), StoreError>;
    /// Whether this open created a new, empty store.
    fn created(&self) -> bool;
    /// Where the store lives, for messages.
    fn location(&self) -> String;

    /// The persisted seq marker (see the queue's seq recovery).
    fn seq_marker(&self) -> Result<Option<u64>, StoreError> {
        self.get(Cf::Meta, keys::meta::NEXT_SEQ)?
            .map(|v| {
                <[u8; 8]>::try_from(v.as_slice())
                    .map(u64::from_be_bytes)
                    .map_err(|_| StoreError::BadSeqMarker { len: v.len() })
            })
            .transpose()
    }
}

/// Open the embedded engine (RocksDB) at `options.path`.
pub fn open_embedded(options: &StoreOptions) -> Result<Arc<dyn Store>, StoreError> {
    Ok(Arc::new(RocksStore::open(options)?))
}
