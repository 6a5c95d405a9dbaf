//! Seeded inputs beyond a corpus: each one a corpus entry (or random bytes)
//! put through a few of libFuzzer's simpler mutations. The same seed gives
//! the same inputs, so a failure replays from the seed the test printed.

/// A small seeded generator (SplitMix64): every choice follows from the
/// seed, so a failing run can be repeated. (The kill soak's too.)
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number below `bound` (0 when `bound` is 0).
    pub fn below(&mut self, bound: usize) -> usize {
        if bound == 0 { 0 } else { (self.next_u64() % bound as u64) as usize }
    }

    /// Uniform in `[low, high)` (`low` when the range is empty).
    pub fn range(&mut self, low: u64, high: u64) -> u64 {
        if high <= low { low } else { low + self.next_u64() % (high - low) }
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }

    fn byte(&mut self) -> u8 {
        self.next_u64() as u8
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.byte()).collect()
    }
}

/// Bytes that sit on parsers' boundaries: lengths, signs, separators.
const INTERESTING: &[u8] = &[0, 1, 0x7f, 0x80, 0xff, b'\r', b'\n', b':', b'$', b'*', b'-', b'{', b'"', b'9'];

/// A stable seed per target, so adding a target does not change the
/// inputs of the others.
pub fn seed_for(seed: u64, target: &str) -> u64 {
    target.bytes().fold(seed ^ 0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// `count` inputs made from `corpus` (random bytes where it is empty).
pub fn inputs(seed: u64, corpus: &[Vec<u8>], count: usize) -> impl Iterator<Item = Vec<u8>> + '_ {
    let mut rng = Rng::new(seed);
    (0..count).map(move |_| one(&mut rng, corpus))
}

fn one(rng: &mut Rng, corpus: &[Vec<u8>]) -> Vec<u8> {
    let mut data = if corpus.is_empty() || rng.below(16) == 0 {
        let len = rng.below(512);
        rng.bytes(len)
    } else {
        corpus[rng.below(corpus.len())].clone()
    };
    for _ in 0..=rng.below(4) {
        mutate(rng, &mut data, corpus);
    }
    data
}

fn mutate(rng: &mut Rng, data: &mut Vec<u8>, corpus: &[Vec<u8>]) {
    let len = data.len();
    match rng.below(8) {
        // Flip one bit.
        0 if len > 0 => {
            let at = rng.below(len);
            data[at] ^= 1 << rng.below(8);
        }
        // Put a boundary byte somewhere.
        1 if len > 0 => {
            let at = rng.below(len);
            data[at] = INTERESTING[rng.below(INTERESTING.len())];
        }
        // Insert random bytes.
        2 => {
            let at = rng.below(len + 1);
            let extra = rng.below(32) + 1;
            let bytes = rng.bytes(extra);
            insert(data, at, &bytes);
        }
        // Delete a range.
        3 if len > 0 => {
            let at = rng.below(len);
            let end = (at + rng.below(32) + 1).min(len);
            data.drain(at..end);
        }
        // Cut the tail off.
        4 => data.truncate(rng.below(len + 1)),
        // Repeat a range (a length field now lies, a frame comes twice).
        5 if len > 0 => {
            let at = rng.below(len);
            let end = (at + rng.below(64) + 1).min(len);
            let copy = data[at..end].to_vec();
            insert(data, end, &copy);
        }
        // Splice another entry's tail onto this one's head.
        6 if !corpus.is_empty() => {
            let other = &corpus[rng.below(corpus.len())];
            data.truncate(rng.below(len + 1));
            data.extend_from_slice(&other[rng.below(other.len() + 1)..]);
        }
        // Overwrite a little-endian or big-endian word with an extreme.
        _ if len >= 4 => {
            let at = rng.below(len - 3);
            let word: u32 = [0, 1, u32::MAX, i32::MAX as u32, 0x8000_0000][rng.below(5)];
            let bytes = if rng.below(2) == 0 { word.to_le_bytes() } else { word.to_be_bytes() };
            data[at..at + 4].copy_from_slice(&bytes);
        }
        _ => data.push(rng.byte()),
    }
}

fn insert(data: &mut Vec<u8>, at: usize, bytes: &[u8]) {
    let tail = data.split_off(at);
    data.extend_from_slice(bytes);
    data.extend_from_slice(&tail);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_inputs() {
        let corpus = vec![b"+OK\r\n".to_vec(), b"$3\r\nabc\r\n".to_vec()];
        let a: Vec<_> = inputs(7, &corpus, 200).collect();
        let b: Vec<_> = inputs(7, &corpus, 200).collect();
        let c: Vec<_> = inputs(8, &corpus, 200).collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!(a.iter().any(|input| !corpus.contains(input)), "the inputs are mutated");
    }
}
