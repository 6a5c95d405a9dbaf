//! Meta family: the seq marker, the DLQ cursor key, which tenants hold
//! data or are being erased, damage found and not repaired, and the gaps
//! skipped dead hooks left at the end of ordered lines.

use super::index::{LineId, line_key, line_keys_of, parse_line_key};
use super::{KeyBuf, KeyReader};

/// The seq marker: the next seq to hand out, as of the last commit.
pub const NEXT_SEQ: &[u8] = b"next_seq";
/// The HMAC key DLQ cursors are signed with.
pub const DLQ_CURSOR_KEY: &[u8] = b"dlq_cursor_key";

const HOLDING: u8 = b'T';
const ERASING: u8 = b'E';
const DAMAGE: u8 = b'X';
const GAP: u8 = b'G';

/// Damage found in a family and not yet repaired (value: what was found).
pub fn damage(family: &str) -> Vec<u8> {
    KeyBuf::new().tag(DAMAGE).tail(family.as_bytes()).build()
}

pub fn all_damage() -> Vec<u8> {
    vec![DAMAGE]
}

/// The family a damage mark names.
pub fn damaged_family(key: &[u8]) -> Option<String> {
    let mut r = KeyReader::new(key);
    match r.tag()? {
        DAMAGE => r.text(),
        _ => None,
    }
}

/// The tenant holds data on the node.
pub fn holding(tenant: &str) -> Vec<u8> {
    KeyBuf::new().tag(HOLDING).tail(tenant.as_bytes()).build()
}

/// An erase of the tenant is running.
pub fn erasing(tenant: &str) -> Vec<u8> {
    KeyBuf::new().tag(ERASING).tail(tenant.as_bytes()).build()
}

pub fn all_holding() -> Vec<u8> {
    vec![HOLDING]
}

pub fn all_erasing() -> Vec<u8> {
    vec![ERASING]
}

/// The tenant of a holding or erasing mark.
pub fn marked_tenant(key: &[u8]) -> Option<String> {
    let mut r = KeyReader::new(key);
    match r.tag()? {
        HOLDING | ERASING => r.text(),
        _ => None,
    }
}

/// A line whose last row was a dead hook skipped with no row behind it;
/// the value is that hook's id, for the next delivery of the line's key.
/// Kept here, not in the index family, because the index is rebuilt from
/// delivery rows and the skipped row is no longer in its line.
pub fn gap(line: &LineId) -> Vec<u8> {
    line_key(GAP, line)
}

/// Every gap (of one tenant, if given).
pub fn gap_prefix(tenant: Option<&str>) -> Vec<u8> {
    line_keys_of(GAP, tenant)
}

/// The line a gap key names.
pub fn parse_gap(key: &[u8]) -> Option<LineId> {
    parse_line_key(GAP, key)
}

/// `fleet`: this store's id, named in the headers of the hooks it logs.
pub const FLEET_STORE: &[u8] = b"fleet_store";
/// `fleet`: the revision of this node's takeover record it has settled with.
pub const FLEET_RECONCILED: &[u8] = b"fleet_reconciled";
/// `fleet`: how far this store is settled with its hooks in the replicated
/// log (`queue::settle::Settled`).
pub const FLEET_SETTLED: &[u8] = b"fleet_settled";
/// `fleet`: every hook this store holds went through the replicated log.
pub const FLEET_LOGGED: &[u8] = b"fleet_logged";
/// `fleet`: the leases bucket this store last worked with (its stream's
/// name and creation time): a bucket made again since is found out.
pub const FLEET_BUCKET: &[u8] = b"fleet_bucket";
/// `fleet`: the takeover records this node finished, one per node taken,
/// kept to be written back into a bucket made again.
pub const FLEET_RAN: &[u8] = b"fleet_ran.";

/// `fleet`: the key of the last takeover record this node finished of `node`.
pub fn fleet_ran(node: &str) -> Vec<u8> {
    [FLEET_RAN, node.as_bytes()].concat()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gap_key_names_its_line_and_sorts_under_its_tenant() {
        let line = LineId { tenant: "acme".into(), source: "shop".into(), sink: 3, key: "c-1".into() };
        let key = gap(&line);
        assert_eq!(parse_gap(&key), Some(line));
        assert!(key.starts_with(&gap_prefix(Some("acme"))) && key.starts_with(&gap_prefix(None)));
        assert!(!key.starts_with(&gap_prefix(Some("acm"))), "a tenant's prefix is not another's");
        assert_eq!(parse_gap(&holding("acme")), None);
    }
}
