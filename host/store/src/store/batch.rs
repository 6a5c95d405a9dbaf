//! Batches: changes a store applies atomically, and their self-contained
//! encoding (the intake log keeps batches in it, to replay them).

use thiserror::Error;

use super::Cf;

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
