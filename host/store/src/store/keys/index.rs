//! Index family: each delivery row's state entry (due, inflight or dead),
//! the by-tenant dead index, the owner index of every live row, and the
//! lines of ordered bindings.
//!
//! A row has exactly one state entry (a dead row also its by-tenant
//! entry) and one owner entry while it exists. A row of an ordered binding
//! also has a line entry while it holds or waits in its key's line, and a
//! held entry while it is the dead head of a line that holds.

use super::{KeyBuf, KeyReader};

pub const DUE: u8 = b'd';
pub const INFLIGHT: u8 = b'i';
pub const DEAD: u8 = b'x';
pub const DEAD_BY_TENANT: u8 = b't';
/// Every live row of a tenant, whatever its state (purges, erases, and
/// per-tenant walks read this instead of the whole queue).
pub const OWNER: u8 = b'o';
/// The unfinished rows of one ordering key of one binding, in seq order:
/// the first is the line's head, the only one that may be delivered.
pub const LINE: u8 = b'l';
/// Lines stopped by a dead head (`on_dead: hold`), by binding and key.
pub const HELD: u8 = b'h';

/// One line: (tenant, source, sink index, ordering key).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LineId {
    pub tenant: String,
    pub source: String,
    pub sink: u16,
    pub key: String,
}

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

fn line_parts(tag: u8, line: &LineId) -> KeyBuf {
    KeyBuf::new().tag(tag).short(&line.tenant).short(&line.source).u16(line.sink).short(&line.key)
}

/// The parts [`line_parts`] wrote after its tag.
fn read_line_id(r: &mut KeyReader) -> Option<LineId> {
    Some(LineId {
        tenant: r.short()?.to_string(),
        source: r.short()?.to_string(),
        sink: r.u16()?,
        key: r.short()?.to_string(),
    })
}

/// The value of a line entry written with its row waiting: the commit that
/// writes it has the line looked at again (its head may have left meanwhile).
pub const WRITTEN_WAITING: &[u8] = b"w";

/// A row's place in its line.
pub fn line(line: &LineId, seq: u64) -> Vec<u8> {
    line_parts(LINE, line).u64(seq).build()
}

/// Every entry of one line, its head first.
pub fn line_prefix(line: &LineId) -> Vec<u8> {
    line_parts(LINE, line).build()
}

/// The seq of a line entry.
pub fn parse_line_seq(key: &[u8]) -> Option<u64> {
    parse_line_position(key).map(|(seq, _)| seq)
}

/// (seq, sink) of a line entry.
pub fn parse_line_position(key: &[u8]) -> Option<(u64, u16)> {
    parse_line(key).map(|(line, seq)| (seq, line.sink))
}

/// The line and seq of a line entry.
pub fn parse_line(key: &[u8]) -> Option<(LineId, u64)> {
    let mut r = KeyReader::new(key);
    r.expect(LINE)?;
    let line = read_line_id(&mut r)?;
    let seq = r.u64()?;
    r.end((line, seq))
}

/// A held line's entry; its value is the dead head's seq.
pub fn held(line: &LineId) -> Vec<u8> {
    line_key(HELD, line)
}

/// Every held line (of one tenant, if given).
pub fn held_prefix(tenant: Option<&str>) -> Vec<u8> {
    line_keys_of(HELD, tenant)
}

/// The line a held key names.
pub fn parse_held(key: &[u8]) -> Option<LineId> {
    parse_line_key(HELD, key)
}

/// A key of one line under `tag` (a family's per-line record).
pub(super) fn line_key(tag: u8, line: &LineId) -> Vec<u8> {
    line_parts(tag, line).build()
}

/// Every key under `tag`, of one tenant if given.
pub(super) fn line_keys_of(tag: u8, tenant: Option<&str>) -> Vec<u8> {
    match tenant {
        Some(tenant) => KeyBuf::new().tag(tag).short(tenant).build(),
        None => vec![tag],
    }
}

/// The line a key under `tag` names.
pub(super) fn parse_line_key(tag: u8, key: &[u8]) -> Option<LineId> {
    let mut r = KeyReader::new(key);
    r.expect(tag)?;
    let line = read_line_id(&mut r)?;
    r.end(line)
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
        let l = LineId { tenant: "acme".into(), source: "shop".into(), sink: 1, key: "customer-9".into() };
        assert_eq!(parse_line_seq(&line(&l, 7)), Some(7));
        assert_eq!(parse_line(&line(&l, 7)), Some((l.clone(), 7)));
        assert!(line(&l, 7).starts_with(&line_prefix(&l)) && line(&l, 7) < line(&l, 8));
        let other = LineId { key: "customer-90".into(), ..l.clone() };
        assert!(!line(&other, 1).starts_with(&line_prefix(&l)), "one key's line is not a prefix of another's");
        assert_eq!(parse_held(&held(&l)), Some(l.clone()));
        assert!(held(&l).starts_with(&held_prefix(Some("acme"))) && held(&l).starts_with(&held_prefix(None)));
    }
}
