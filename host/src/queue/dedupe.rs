//! Dedupe keys: scope (tenant, source, key), a TTL, and an expiry index.
//!
//! | family | key | value |
//! |---|---|---|
//! | dedupe | `k` · tenant · source · key | seq · expires_at · hook id |
//! | dedupe | `e` · expires_at · tenant · source · key | — |

use sha2::{Digest, Sha256};

use super::codec::{CodecError, Reader, Writer};
use crate::store::keys::KeyBuf;

/// Longer keys are stored as `sha256:<hex>`.
pub const MAX_KEY_BYTES: usize = 200;

/// The form a provider's key is stored in.
pub fn stored_key(key: &str) -> String {
    if key.len() > MAX_KEY_BYTES {
        format!("sha256:{}", hex::encode(Sha256::digest(key.as_bytes())))
    } else {
        key.to_string()
    }
}

pub fn key(tenant: &str, source: &str, stored: &str) -> Vec<u8> {
    KeyBuf::new().tag(b'k').short(tenant).short(source).tail(stored.as_bytes()).build()
}

pub fn expiry_key(expires_at: u64, tenant: &str, source: &str, stored: &str) -> Vec<u8> {
    KeyBuf::new().tag(b'e').u64(expires_at).short(tenant).short(source).tail(stored.as_bytes()).build()
}

/// What a live key remembers of the hook that first carried it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Original {
    pub seq: u64,
    pub expires_at: u64,
    pub id: String,
}

impl Original {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(64);
        w.u8(1).u64(self.seq).u64(self.expires_at).str(&self.id);
        w.finish()
    }

    pub fn decode(bytes: &[u8]) -> Result<Original, CodecError> {
        let mut r = Reader::new(bytes, "dedupe entry");
        r.version(1)?;
        let original = Original { seq: r.u64()?, expires_at: r.u64()?, id: r.string("hook id")? };
        r.end()?;
        Ok(original)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_keys_are_hashed_short_ones_kept() {
        assert_eq!(stored_key("evt_123"), "evt_123");
        let long = "x".repeat(201);
        let stored = stored_key(&long);
        assert!(stored.starts_with("sha256:") && stored.len() == 7 + 64, "{stored}");
        assert_eq!(stored_key(&"y".repeat(200)).len(), 200);
    }

    #[test]
    fn originals_round_trip() {
        let o = Original { seq: 9, expires_at: 100, id: "0190-abc".into() };
        assert_eq!(Original::decode(&o.encode()), Ok(o));
    }
}
