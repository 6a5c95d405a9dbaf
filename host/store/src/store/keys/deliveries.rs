//! Deliveries family: one delivery row per (hook seq, sink index), so a
//! hook's rows sit together under its seq.

use super::{KeyBuf, KeyReader};

pub fn row(seq: u64, sink: u16) -> Vec<u8> {
    KeyBuf::new().u64(seq).u16(sink).build()
}

/// The prefix of every row of one hook.
pub fn of_hook(seq: u64) -> Vec<u8> {
    KeyBuf::new().u64(seq).build()
}

/// (seq, sink) of a row key.
pub fn parse(key: &[u8]) -> Option<(u64, u16)> {
    let mut r = KeyReader::new(key);
    let position = (r.u64()?, r.u16()?);
    r.end(position)
}
