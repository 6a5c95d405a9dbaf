//! Quarantine family: held hooks by (tenant, source, hook id).

use super::{KeyBuf, KeyReader};

const PEN: u8 = b'q';

pub fn held(tenant: &str, source: &str, id: &str) -> Vec<u8> {
    KeyBuf::new().tag(PEN).short(tenant).short(source).tail(id.as_bytes()).build()
}

/// Every held hook, one tenant's, or one of its sources' (a source
/// without its tenant means all).
pub fn prefix(tenant: Option<&str>, source: Option<&str>) -> Vec<u8> {
    match (tenant, source) {
        (Some(t), Some(s)) => KeyBuf::new().tag(PEN).short(t).short(s).build(),
        (Some(t), None) => KeyBuf::new().tag(PEN).short(t).build(),
        (None, _) => KeyBuf::new().tag(PEN).build(),
    }
}

/// The tenant and source of a held hook's key.
pub fn parse(key: &[u8]) -> Option<(String, String)> {
    let mut r = KeyReader::new(key);
    r.expect(PEN)?;
    Some((r.short()?.to_string(), r.short()?.to_string()))
}
