//! Counters family: per-node and per-tenant counts kept by merge (add),
//! and the count of a replay's revived rows that died again.

use super::{KeyBuf, KeyReader};

const NODE: u8 = b'n';
const TENANT: u8 = b't';
const REPLAY_DIED: u8 = b'r';

/// The counter of `kind` (`pending`, `dead`, ...) for a tenant, or for the
/// node.
pub fn counter(tenant: Option<&str>, kind: &str) -> Vec<u8> {
    match tenant {
        None => KeyBuf::new().tag(NODE).tail(kind.as_bytes()).build(),
        Some(t) => KeyBuf::new().tag(TENANT).short(t).tail(kind.as_bytes()).build(),
    }
}

/// Every tenant counter.
pub fn tenant_counters() -> Vec<u8> {
    vec![TENANT]
}

/// The tenant of a tenant counter's key.
pub fn counter_tenant(key: &[u8]) -> Option<&str> {
    let mut r = KeyReader::new(key);
    r.expect(TENANT)?;
    r.short()
}

/// Revived rows of `replay_id` that died again.
pub fn replay_died(replay_id: &str) -> Vec<u8> {
    KeyBuf::new().tag(REPLAY_DIED).tail(replay_id.as_bytes()).build()
}
