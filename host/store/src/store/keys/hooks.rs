//! Hooks family: one hook by seq.

use super::{KeyBuf, KeyReader};

pub fn hook(seq: u64) -> Vec<u8> {
    KeyBuf::new().u64(seq).build()
}

pub fn parse(key: &[u8]) -> Option<u64> {
    let mut r = KeyReader::new(key);
    let seq = r.u64()?;
    r.end(seq)
}
