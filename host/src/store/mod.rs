//! Durable storage of a node: one RocksDB database with a column family
//! per kind of row, behind the [`Store`] trait so a replicated engine can
//! take RocksDB's place without touching the queue.
//!
//! Invariants this module keeps for everyone above it:
//! - every multi-row change is one [`Batch`], applied atomically; a synced
//!   write returns only after the WAL is fsynced;
//! - a read or scan that fails is an error, never an empty result;
//! - a store that exists but cannot be opened is an error, never a new,
//!   empty store;
//! - integers in keys are big-endian (see [`keys`]), so byte order is
//!   numeric order and range scans walk rows in sequence.
//!
//! Callers: the queue (all row kinds), replay and tenant jobs (cursors).

pub mod keys;
mod rocks;

use std::fmt;

use thiserror::Error;

pub use rocks::{DEFAULT_WAL_MAX_BYTES, Faults, RocksStore, StoreOptions};

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

/// One change inside a [`Batch`] (the queue contract's "store op").
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteOp {
    Put {
        cf: Cf,
        key: Vec<u8>,
        value: Vec<u8>,
    },
    Delete {
        cf: Cf,
        key: Vec<u8>,
    },
    /// Add `delta` to the counter at `key` (in [`Cf::Counters`]).
    AddCounter {
        key: Vec<u8>,
        delta: i64,
    },
}

/// Changes applied atomically, all or none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    ops: Vec<WriteOp>,
    /// Where each counter's op is, so deltas to one counter become one op
    /// (additions commute, so the order of merges does not matter).
    counters: std::collections::HashMap<Vec<u8>, usize>,
}

impl Batch {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn put(&mut self, cf: Cf, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> &mut Self {
        self.ops.push(WriteOp::Put { cf, key: key.into(), value: value.into() });
        self
    }

    pub fn delete(&mut self, cf: Cf, key: impl Into<Vec<u8>>) -> &mut Self {
        self.ops.push(WriteOp::Delete { cf, key: key.into() });
        self
    }

    pub fn add_counter(&mut self, key: impl Into<Vec<u8>>, delta: i64) -> &mut Self {
        if delta == 0 {
            return self;
        }
        let key = key.into();
        match self.counters.get(&key).and_then(|&i| self.ops.get_mut(i)) {
            Some(WriteOp::AddCounter { delta: total, .. }) => *total += delta,
            _ => {
                self.counters.insert(key.clone(), self.ops.len());
                self.ops.push(WriteOp::AddCounter { key, delta });
            }
        }
        self
    }

    pub fn push(&mut self, op: WriteOp) -> &mut Self {
        match op {
            WriteOp::AddCounter { key, delta } => self.add_counter(key, delta),
            other => {
                self.ops.push(other);
                self
            }
        }
    }

    pub fn extend(&mut self, other: Batch) -> &mut Self {
        for op in other.ops {
            self.push(op);
        }
        self
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn ops(&self) -> &[WriteOp] {
        &self.ops
    }

    /// Drop every op after the first `len`.
    pub fn truncate(&mut self, len: usize) {
        self.ops.truncate(len);
        self.counters.retain(|_, i| *i < len);
    }

    /// The bytes of [`Batch::encode`]'s output: the keys and values with a
    /// few bytes of framing each, so also about what a store's own batch
    /// format takes.
    pub fn encoded_len(&self) -> usize {
        self.ops.iter().map(WriteOp::encoded_len).sum::<usize>() + 4
    }

    /// A self-contained encoding, for logs that replay batches into a
    /// store (the intake log).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        out.extend_from_slice(&(self.ops.len() as u32).to_be_bytes());
        for op in &self.ops {
            match op {
                WriteOp::Put { cf, key, value } => {
                    out.extend_from_slice(&[0, cf.id()]);
                    put_bytes(&mut out, key);
                    put_bytes(&mut out, value);
                }
                WriteOp::Delete { cf, key } => {
                    out.extend_from_slice(&[1, cf.id()]);
                    put_bytes(&mut out, key);
                }
                WriteOp::AddCounter { key, delta } => {
                    out.extend_from_slice(&[2, Cf::Counters.id()]);
                    put_bytes(&mut out, key);
                    out.extend_from_slice(&delta.to_be_bytes());
                }
            }
        }
        out
    }

    pub fn decode(mut bytes: &[u8]) -> Result<Batch, BatchDecodeError> {
        let count = take_u32(&mut bytes)?;
        let mut batch = Batch::new();
        for _ in 0..count {
            let [kind, cf] = take::<2>(&mut bytes)?;
            let cf = Cf::from_id(cf).ok_or(BatchDecodeError::UnknownFamily(cf))?;
            let key = take_bytes(&mut bytes)?;
            let op = match kind {
                0 => WriteOp::Put { cf, key, value: take_bytes(&mut bytes)? },
                1 => WriteOp::Delete { cf, key },
                2 => WriteOp::AddCounter { key, delta: i64::from_be_bytes(take::<8>(&mut bytes)?) },
                other => return Err(BatchDecodeError::UnknownOp(other)),
            };
            batch.push(op);
        }
        if !bytes.is_empty() {
            return Err(BatchDecodeError::Trailing(bytes.len()));
        }
        Ok(batch)
    }
}

impl WriteOp {
    /// The family and key the op changes.
    pub fn target(&self) -> (Cf, &[u8]) {
        match self {
            WriteOp::Put { cf, key, .. } | WriteOp::Delete { cf, key } => (*cf, key),
            WriteOp::AddCounter { key, .. } => (Cf::Counters, key),
        }
    }

    fn encoded_len(&self) -> usize {
        match self {
            WriteOp::Put { key, value, .. } => 10 + key.len() + value.len(),
            WriteOp::Delete { key, .. } => 6 + key.len(),
            WriteOp::AddCounter { key, .. } => 14 + key.len(),
        }
    }
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum BatchDecodeError {
    #[error("the batch ends early")]
    Short,
    #[error("unknown column family id {0}")]
    UnknownFamily(u8),
    #[error("unknown op kind {0}")]
    UnknownOp(u8),
    #[error("{0} bytes after the last op")]
    Trailing(usize),
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(bytes);
}

fn take<const N: usize>(bytes: &mut &[u8]) -> Result<[u8; N], BatchDecodeError> {
    let (head, rest) = bytes.split_first_chunk::<N>().ok_or(BatchDecodeError::Short)?;
    *bytes = rest;
    Ok(*head)
}

fn take_u32(bytes: &mut &[u8]) -> Result<u32, BatchDecodeError> {
    take::<4>(bytes).map(u32::from_be_bytes)
}

fn take_bytes(bytes: &mut &[u8]) -> Result<Vec<u8>, BatchDecodeError> {
    let len = take_u32(bytes)? as usize;
    if bytes.len() < len {
        return Err(BatchDecodeError::Short);
    }
    let (head, rest) = bytes.split_at(len);
    *bytes = rest;
    Ok(head.to_vec())
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

#[derive(Debug, Error)]
pub enum StoreError {
    #[error("cannot open the store at {path}: {reason}")]
    Open { path: String, reason: String },
    #[error("store {what} failed: {reason}")]
    Io { what: &'static str, reason: String },
    #[error("the store is missing column family `{0}`")]
    MissingCf(&'static str),
    #[error("counter at {key} holds {len} bytes, not an 8-byte integer")]
    BadCounter { key: String, len: usize },
}

/// Estimates and sizes for `stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    pub estimated_hooks: u64,
    pub estimated_deliveries: u64,
    /// SST and blob files across every family.
    pub disk_bytes: u64,
}

/// A key and its value, as a scan returns them.
pub type KeyValue = (Vec<u8>, Vec<u8>);

/// What the queue needs from a storage engine.
pub trait Store: Send + Sync + 'static {
    fn write(&self, batch: &Batch, durability: Durability) -> Result<(), StoreError>;
    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError>;
    /// One read of many keys, results in the order asked.
    fn multi_get(&self, cf: Cf, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>, StoreError>;
    fn scan(&self, scan: &Scan) -> Result<Vec<KeyValue>, StoreError>;
    /// The greatest key of a family, if any.
    fn last_key(&self, cf: Cf) -> Result<Option<Vec<u8>>, StoreError>;
    /// A counter's value (0 when never written).
    fn counter(&self, key: &[u8]) -> Result<i64, StoreError>;
    fn stats(&self) -> Result<StoreStats, StoreError>;
}
