//! Dedupe family: live keys by scope (tenant, source, key), and an expiry
//! index that the background sweep walks in time order.

use super::{KeyBuf, KeyReader};

const ENTRY: u8 = b'k';
const EXPIRY: u8 = b'e';

/// A live key of `(tenant, source)`, in the form it is stored in.
pub fn entry(tenant: &str, source: &str, stored: &str) -> Vec<u8> {
    KeyBuf::new().tag(ENTRY).short(tenant).short(source).tail(stored.as_bytes()).build()
}

/// A live key read back: (tenant, source, stored form).
pub fn parse_entry(key: &[u8]) -> Option<(String, String, String)> {
    let mut r = KeyReader::new(key);
    r.expect(ENTRY)?;
    let tenant = r.short()?.to_string();
    let source = r.short()?.to_string();
    Some((tenant, source, r.text()?))
}

/// Every live key.
pub fn entries() -> Vec<u8> {
    vec![ENTRY]
}

/// Every live key of one tenant.
pub fn entries_of(tenant: &str) -> Vec<u8> {
    KeyBuf::new().tag(ENTRY).short(tenant).build()
}

/// The tenant of a live key.
pub fn entry_tenant(key: &[u8]) -> Option<&str> {
    let mut r = KeyReader::new(key);
    r.expect(ENTRY)?;
    r.short()
}

pub fn expiry(expires_at: u64, tenant: &str, source: &str, stored: &str) -> Vec<u8> {
    KeyBuf::new().tag(EXPIRY).u64(expires_at).short(tenant).short(source).tail(stored.as_bytes()).build()
}

/// The start of the expiry index.
pub fn expiries() -> Vec<u8> {
    vec![EXPIRY]
}

/// The first expiry key at or after `at` (the exclusive bound of keys
/// expired before it).
pub fn expiry_from(at: u64) -> Vec<u8> {
    KeyBuf::new().tag(EXPIRY).u64(at).build()
}

/// An expiry key read back: when, and whose key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expiry {
    pub expires_at: u64,
    pub tenant: String,
    pub source: String,
    pub stored: String,
}

impl Expiry {
    /// The live key this entry expires.
    pub fn entry(&self) -> Vec<u8> {
        entry(&self.tenant, &self.source, &self.stored)
    }
}

pub fn parse_expiry(key: &[u8]) -> Option<Expiry> {
    let mut r = KeyReader::new(key);
    r.expect(EXPIRY)?;
    let expires_at = r.u64()?;
    let tenant = r.short()?.to_string();
    let source = r.short()?.to_string();
    Some(Expiry { expires_at, tenant, source, stored: r.text()? })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_keys_read_back() {
        let parsed = parse_expiry(&expiry(9, "t", "s", "k:1")).expect("parses");
        assert_eq!(parsed, Expiry { expires_at: 9, tenant: "t".into(), source: "s".into(), stored: "k:1".into() });
        assert_eq!(parsed.entry(), entry("t", "s", "k:1"));
        assert_eq!(entry_tenant(&entry("acme", "s", "k")), Some("acme"));
        assert_eq!(parse_entry(&entry("acme", "s", "k:1")), Some(("acme".into(), "s".into(), "k:1".into())));
    }
}
