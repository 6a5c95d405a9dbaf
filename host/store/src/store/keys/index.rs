//! Index family: each delivery row's state entry (due, inflight or dead),
//! the by-tenant dead index, and the owner index of every live row.
//!
//! A row has exactly one state entry (a dead row also its by-tenant
//! entry) and one owner entry while it exists.

use super::{KeyBuf, KeyReader};

pub const DUE: u8 = b'd';
pub const INFLIGHT: u8 = b'i';
pub const DEAD: u8 = b'x';
pub const DEAD_BY_TENANT: u8 = b't';
/// Every live row of a tenant, whatever its state (purges, erases, and
/// per-tenant walks read this instead of the whole queue).
pub const OWNER: u8 = b'o';

/// A place in a dead index: (dead_at, seq, sink).
pub type DeadPosition = (u64, u64, u16);

pub fn due(due_at: u64, seq: u64, sink: u16) -> Vec<u8> {
    KeyBuf::new().tag(DUE).u64(due_at).u64(seq).u16(sink).build()
}

/// The first due key at or after `due_at` (also the exclusive upper bound
/// of rows due before it).
pub fn due_from(due_at: u64) -> Vec<u8> {
    KeyBuf::new().tag(DUE).u64(due_at).build()
}

/// (due_at, seq, sink) of a due key.
pub fn parse_due(key: &[u8]) -> Option<(u64, u64, u16)> {
    let mut r = KeyReader::new(key);
    r.expect(DUE)?;
    let entry = (r.u64()?, r.u64()?, r.u16()?);
    r.end(entry)
}

/// The due time of a due key; `None` for any other key.
pub fn due_time(key: &[u8]) -> Option<u64> {
    let mut r = KeyReader::new(key);
    r.expect(DUE)?;
    r.u64()
}

pub fn inflight(seq: u64, sink: u16) -> Vec<u8> {
    KeyBuf::new().tag(INFLIGHT).u64(seq).u16(sink).build()
}

/// (seq, sink) of an inflight key.
pub fn parse_inflight(key: &[u8]) -> Option<(u64, u16)> {
    let mut r = KeyReader::new(key);
    r.expect(INFLIGHT)?;
    let position = (r.u64()?, r.u16()?);
    r.end(position)
}

pub fn dead(dead_at: u64, seq: u64, sink: u16) -> Vec<u8> {
    [&[DEAD][..], &position(dead_at, seq, sink)].concat()
}

pub fn dead_by_tenant(tenant: &str, dead_at: u64, seq: u64, sink: u16) -> Vec<u8> {
    [dead_by_tenant_prefix(tenant), position(dead_at, seq, sink)].concat()
}

/// The node's dead index.
pub fn dead_prefix() -> Vec<u8> {
    vec![DEAD]
}

/// One tenant's range of the by-tenant dead index.
pub fn dead_by_tenant_prefix(tenant: &str) -> Vec<u8> {
    KeyBuf::new().tag(DEAD_BY_TENANT).short(tenant).build()
}

/// A dead position as bytes: the tail of both dead keys, in their order.
pub fn position(dead_at: u64, seq: u64, sink: u16) -> Vec<u8> {
    KeyBuf::new().u64(dead_at).u64(seq).u16(sink).build()
}

/// The bytes of [`position`] read back.
pub fn parse_position(bytes: &[u8]) -> Option<DeadPosition> {
    let mut r = KeyReader::new(bytes);
    let position = (r.u64()?, r.u64()?, r.u16()?);
    r.end(position)
}

/// The position of a key of either dead index.
pub fn parse_dead(key: &[u8]) -> Option<DeadPosition> {
    let mut r = KeyReader::new(key);
    match r.tag()? {
        DEAD => {}
        DEAD_BY_TENANT => {
            r.short()?;
        }
        _ => return None,
    }
    let position = (r.u64()?, r.u64()?, r.u16()?);
    r.end(position)
}

pub fn owner(tenant: &str, seq: u64, sink: u16) -> Vec<u8> {
    KeyBuf::new().tag(OWNER).short(tenant).u64(seq).u16(sink).build()
}

/// The owner index of one tenant.
pub fn owner_prefix(tenant: &str) -> Vec<u8> {
    KeyBuf::new().tag(OWNER).short(tenant).build()
}

/// (seq, sink) of an owner key.
pub fn parse_owner(key: &[u8]) -> Option<(u64, u16)> {
    let mut r = KeyReader::new(key);
    r.expect(OWNER)?;
    r.short()?;
    let position = (r.u64()?, r.u16()?);
    r.end(position)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_index_key_reads_back() {
        assert_eq!(parse_due(&due(5, 7, 2)), Some((5, 7, 2)));
        assert_eq!(due_time(&due(5, 7, 2)), Some(5));
        assert_eq!(due_time(&inflight(7, 2)), None);
        assert_eq!(parse_inflight(&inflight(7, 2)), Some((7, 2)));
        assert_eq!(parse_dead(&dead(9, 7, 2)), Some((9, 7, 2)));
        assert_eq!(parse_dead(&dead_by_tenant("acme", 9, 7, 2)), Some((9, 7, 2)));
        assert!(dead_by_tenant("acme", 9, 7, 2).starts_with(&dead_by_tenant_prefix("acme")));
        assert_eq!(parse_owner(&owner("acme", 7, 2)), Some((7, 2)));
        assert!(owner("acme", 7, 2).starts_with(&owner_prefix("acme")));
        assert_eq!(parse_position(&position(9, 7, 2)), Some((9, 7, 2)));
        assert_eq!(parse_due(&inflight(7, 2)), None, "a key of another index");
    }
}
