//! Dedupe keys: scope (tenant, source, key), a TTL, and an expiry index
//! (their key layouts: `store::keys::dedupe`). What a live key remembers
//! of its hook, and the window of keys committed lately.

use std::collections::{HashMap, VecDeque};

use super::codec::{CodecError, Reader, Writer};

/// Longer keys are stored as `sha256:<hex>` (see `digest::capped_key`:
/// so is a key that itself begins with `sha256:`, so none can collide).
pub const MAX_KEY_BYTES: usize = 200;

/// The form a provider's key is stored in.
pub fn stored_key(key: &str) -> String {
    crate::digest::capped_key(key, MAX_KEY_BYTES).into_owned()
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

/// The dedupe keys the writer committed lately, by commit epoch, so a
/// caller's prefetch can be re-validated without reading the store again.
///
/// A caller notes the epoch (commits made visible so far) before its
/// `multi_get`; its read saw every key of those commits. A key committed
/// later is here with a greater epoch, as long as the window still covers
/// every commit since the caller's epoch; beyond the window the writer
/// reads the key again.
#[derive(Debug)]
pub struct Recent {
    keys: HashMap<Vec<u8>, (u64, Original)>,
    epochs: VecDeque<(u64, Vec<Vec<u8>>)>,
    /// Every commit from this epoch on has its keys here.
    floor: u64,
}

/// Commits whose keys stay in the window.
const RECENT_EPOCHS: usize = 256;

/// What the writer makes of a prefetched key.
#[derive(Debug, PartialEq, Eq)]
pub enum Freshness {
    /// Committed after the prefetch: this is the original.
    Newer(Original),
    /// Nothing committed it since the prefetch: the prefetch stands.
    Prefetch,
    /// The window no longer reaches back to the prefetch: read again.
    Unknown,
}

impl Recent {
    /// A window starting after commit `epoch`.
    pub fn new(epoch: u64) -> Recent {
        Recent { keys: HashMap::new(), epochs: VecDeque::new(), floor: epoch + 1 }
    }

    pub fn freshness(&self, key: &[u8], prefetch_epoch: u64) -> Freshness {
        match self.keys.get(key) {
            Some((epoch, original)) if *epoch > prefetch_epoch => Freshness::Newer(original.clone()),
            _ if self.floor <= prefetch_epoch + 1 => Freshness::Prefetch,
            _ => Freshness::Unknown,
        }
    }

    /// Remember the keys commit `epoch` wrote.
    pub fn record(&mut self, epoch: u64, written: Vec<(Vec<u8>, Original)>) {
        let mut keys = Vec::with_capacity(written.len());
        for (key, original) in written {
            keys.push(key.clone());
            self.keys.insert(key, (epoch, original));
        }
        self.epochs.push_back((epoch, keys));
        while self.epochs.len() > RECENT_EPOCHS {
            let Some((old, keys)) = self.epochs.pop_front() else { break };
            for key in keys {
                if self.keys.get(&key).is_some_and(|(e, _)| *e == old) {
                    self.keys.remove(&key);
                }
            }
            self.floor = old + 1;
        }
    }

    /// Forget everything (keys were deleted behind the window's back):
    /// prefetches older than `epoch` are read again.
    pub fn reset(&mut self, epoch: u64) {
        *self = Recent::new(epoch);
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
    fn the_window_decides_when_a_prefetch_stands() {
        let original = |seq| Original { seq, expires_at: 1, id: format!("h{seq}") };
        let mut recent = Recent::new(0);
        assert_eq!(recent.freshness(b"k", 0), Freshness::Prefetch);
        recent.record(1, vec![(b"k".to_vec(), original(1))]);
        assert_eq!(recent.freshness(b"k", 0), Freshness::Newer(original(1)), "committed after a prefetch at 0");
        assert_eq!(recent.freshness(b"k", 1), Freshness::Prefetch, "a prefetch at 1 saw it");
        for epoch in 2..=(RECENT_EPOCHS as u64 + 1) {
            recent.record(epoch, Vec::new());
        }
        assert_eq!(recent.freshness(b"k", 0), Freshness::Unknown, "commit 1 left the window");
        assert_eq!(recent.freshness(b"k", 1), Freshness::Prefetch);
    }

    #[test]
    fn originals_round_trip() {
        let o = Original { seq: 9, expires_at: 100, id: "0190-abc".into() };
        assert_eq!(Original::decode(&o.encode()), Ok(o));
    }
}
