//! Archive family: accepted hooks kept for their retention, tenant first
//! (an erase removes a tenant's archive with one range, a window of one
//! tenant is one range), then by receive time.

use super::{KeyBuf, KeyReader};

const ARCHIVE: u8 = b'a';

pub fn archived(tenant: &str, received_at: u64, id: &str) -> Vec<u8> {
    KeyBuf::new().tag(ARCHIVE).short(tenant).u64(received_at).tail(id.as_bytes()).build()
}

/// The whole archive.
pub fn all() -> Vec<u8> {
    vec![ARCHIVE]
}

/// One tenant's archive.
pub fn of_tenant(tenant: &str) -> Vec<u8> {
    KeyBuf::new().tag(ARCHIVE).short(tenant).build()
}

/// The first key of `tenant`'s hooks received at or after `at`.
pub fn window_start(tenant: &str, at: u64) -> Vec<u8> {
    KeyBuf::new().tag(ARCHIVE).short(tenant).u64(at).build()
}

/// The tenant of an archive key.
pub fn tenant(key: &[u8]) -> Option<String> {
    let mut r = KeyReader::new(key);
    r.expect(ARCHIVE)?;
    r.short().map(str::to_string)
}
