//! Every key layout of the store, one module per column family. Nothing
//! outside `store/` builds or parses a key by hand: the queue, replay and
//! tenant jobs ask these functions for the keys they read and write.
//!
//! Integers are big-endian, so byte order is numeric order; variable-length
//! parts carry a one-byte length first, so a prefix of one tenant's keys is
//! never a prefix of another tenant's.
//!
//! | family | key | value | module |
//! |---|---|---|---|
//! | meta | `next_seq` | u64: the seq marker | [`meta`] |
//! | meta | `dlq_cursor_key` | the HMAC key of DLQ cursors | [`meta`] |
//! | meta | `T` · tenant / `E` · tenant | — (tenant holds data / is being erased) | [`meta`] |
//! | hooks | seq (u64) | the hook | [`hooks`] |
//! | deliveries | seq (u64) · sink (u16) | the delivery row | [`deliveries`] |
//! | index | `d` · due_at (u64 ms) · seq · sink | — (due) | [`index`] |
//! | index | `i` · seq · sink | — (inflight) | [`index`] |
//! | index | `x` · dead_at (u64 ms) · seq · sink | a dead summary (dead) | [`index`] |
//! | index | `t` · len · tenant · dead_at · seq · sink | a dead summary (dead, by tenant) | [`index`] |
//! | index | `o` · len · tenant · seq · sink | — (every live row, by tenant) | [`index`] |
//! | index | `l` · len · tenant · len · source · sink · len · key · seq | — (a row's place in its ordered line) | [`index`] |
//! | index | `h` · len · tenant · len · source · sink · len · key | the dead head's seq (a held line) | [`index`] |
//! | dedupe | `k` · len · tenant · len · source · key | seq · expires_at · hook id | [`dedupe`] |
//! | dedupe | `e` · expires_at · len · tenant · len · source · key | — (expiry) | [`dedupe`] |
//! | counters | `n` · kind / `t` · len · tenant · kind | i64 (merge: add) | [`counters`] |
//! | counters | `r` · replay id | revived rows of that replay that died again | [`counters`] |
//! | quarantine | `q` · len · tenant · len · source · hook id | the held envelope | [`quarantine`] |
//! | jobs | `j` · job id | a replay job and its cursor (JSON) | [`records`] |
//! | jobs | `e` · tenant | a tenant erase and its progress (JSON) | [`records`] |
//! | jobs | `l` · tenant | a tenant's rate limit (JSON) | [`records`] |
//! | jobs | `s` · len · tenant · name | a source created at runtime (JSON) | [`records`] |
//! | archive | `a` · len · tenant · received_at · hook id | the envelope, as stored | [`archive`] |

pub mod archive;
pub mod counters;
pub mod dedupe;
pub mod deliveries;
pub mod hooks;
pub mod index;
pub mod meta;
pub mod quarantine;
pub mod records;

/// The smallest key greater than every key starting with `prefix`, or
/// `None` if there is none (the prefix is all `0xff`).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// The first key after `key` (to resume a scan past it).
pub fn after(key: &[u8]) -> Vec<u8> {
    [key, &[0]].concat()
}

/// Builds a key part by part.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct KeyBuf(Vec<u8>);

impl KeyBuf {
    fn new() -> Self {
        Self::default()
    }

    fn tag(mut self, tag: u8) -> Self {
        self.0.push(tag);
        self
    }

    fn u64(mut self, value: u64) -> Self {
        self.0.extend_from_slice(&value.to_be_bytes());
        self
    }

    fn u16(mut self, value: u16) -> Self {
        self.0.extend_from_slice(&value.to_be_bytes());
        self
    }

    /// A length-prefixed string of at most 255 bytes (tenant ids are at
    /// most 64, source names are validated to fit).
    fn short(mut self, part: &str) -> Self {
        let bytes = part.as_bytes();
        let len = bytes.len().min(255);
        self.0.push(len as u8);
        self.0.extend_from_slice(&bytes[..len]);
        self
    }

    /// Raw bytes, only as the last part of a key.
    fn tail(mut self, bytes: &[u8]) -> Self {
        self.0.extend_from_slice(bytes);
        self
    }

    fn build(self) -> Vec<u8> {
        self.0
    }
}

/// Reads a key back part by part; `None` when the key is shorter than
/// expected (a corrupt or foreign key).
struct KeyReader<'a>(&'a [u8]);

impl<'a> KeyReader<'a> {
    fn new(key: &'a [u8]) -> Self {
        KeyReader(key)
    }

    fn tag(&mut self) -> Option<u8> {
        let (&first, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(first)
    }

    /// The tag, and `None` unless it is `expected`.
    fn expect(&mut self, expected: u8) -> Option<()> {
        (self.tag()? == expected).then_some(())
    }

    fn u64(&mut self) -> Option<u64> {
        let (head, rest) = self.0.split_first_chunk::<8>()?;
        self.0 = rest;
        Some(u64::from_be_bytes(*head))
    }

    fn u16(&mut self) -> Option<u16> {
        let (head, rest) = self.0.split_first_chunk::<2>()?;
        self.0 = rest;
        Some(u16::from_be_bytes(*head))
    }

    fn short(&mut self) -> Option<&'a str> {
        let len = usize::from(self.tag()?);
        if self.0.len() < len {
            return None;
        }
        let (part, rest) = self.0.split_at(len);
        self.0 = rest;
        std::str::from_utf8(part).ok()
    }

    /// The rest as UTF-8 text.
    fn text(self) -> Option<String> {
        String::from_utf8(self.0.to_vec()).ok()
    }

    /// `Some(value)` only if nothing is left.
    fn end<T>(self, value: T) -> Option<T> {
        self.0.is_empty().then_some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn big_endian_keys_sort_numerically() {
        let mut keys: Vec<Vec<u8>> =
            [3u64, 256, 1, 65_536, 255].iter().map(|n| KeyBuf::new().u64(*n).build()).collect();
        keys.sort();
        let back: Vec<u64> = keys.iter().map(|k| KeyReader::new(k).u64().expect("u64")).collect();
        assert_eq!(back, [1, 3, 255, 256, 65_536]);
    }

    #[test]
    fn length_prefixes_keep_tenants_apart() {
        let a = KeyBuf::new().tag(b't').short("ab").u64(1).build();
        let b = KeyBuf::new().tag(b't').short("abc").u64(1).build();
        let prefix_a = KeyBuf::new().tag(b't').short("ab").build();
        assert!(a.starts_with(&prefix_a));
        assert!(!b.starts_with(&prefix_a));
        let mut r = KeyReader::new(&b);
        assert_eq!((r.tag(), r.short(), r.u64()), (Some(b't'), Some("abc"), Some(1)));
    }

    #[test]
    fn prefix_end_is_the_next_prefix() {
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(&[0x01, 0xff]), Some(vec![0x02]));
        assert_eq!(prefix_end(&[0xff, 0xff]), None);
    }

    #[test]
    fn short_keys_read_as_none() {
        assert_eq!(KeyReader::new(&[1, 2, 3]).u64(), None);
        assert_eq!(KeyReader::new(&[5, b'a']).short(), None);
    }
}
