//! Meta family: the seq marker, the DLQ cursor key, and which tenants hold
//! data or are being erased.

use super::{KeyBuf, KeyReader};

/// The seq marker: the next seq to hand out, as of the last commit.
pub const NEXT_SEQ: &[u8] = b"next_seq";
/// The HMAC key DLQ cursors are signed with.
pub const DLQ_CURSOR_KEY: &[u8] = b"dlq_cursor_key";

const HOLDING: u8 = b'T';
const ERASING: u8 = b'E';

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
