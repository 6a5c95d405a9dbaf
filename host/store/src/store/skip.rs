//! Reading around a damaged block: where a scan that met damage after a
//! key goes on. A damaged block's key range is not known, so the keys
//! past it are probed: first whole prefixes of the last key read, each
//! shorter one skipping more, until a seek past one works; then the least
//! key that reads is searched byte by byte, so a scan loses the damaged
//! block and next to nothing past it.

/// The least key greater than every key that starts with `prefix`
/// (`None`: no such key, `prefix` is all `0xff`).
pub fn past_prefix(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut key = prefix.to_vec();
    while let Some(last) = key.pop() {
        if last < u8::MAX {
            key.push(last + 1);
            return Some(key);
        }
    }
    None
}

/// Probes a resume makes at most beyond the coarse step, one byte of key
/// each eight: enough for every key layout of the store.
const MAX_DEPTH: usize = 48;

/// The first key after `last` (the last key read, or the scan's lower
/// bound) at which `reads` holds, searched as the module says: a coarse
/// step over the shortest prefix needed, then, byte by byte, the least
/// key that reads; `None` when no key past `last` can be read.
pub fn resume_after(last: &[u8], mut reads: impl FnMut(&[u8]) -> bool) -> Option<Vec<u8>> {
    // The longest prefix whose whole range can be stepped over (from the
    // start of the family, nothing to step over: the search starts there).
    let coarse = (1..=last.len())
        .rev()
        .find_map(|len| past_prefix(&last[..len]).filter(|candidate| reads(candidate)).map(|c| (len, c)));
    let (mut best, mut prefix, mut low) = match coarse {
        Some((len, coarse)) => (Some(coarse), last[..len].to_vec(), last.get(len).map_or(0, |b| u16::from(*b) + 1)),
        None if last.is_empty() => (None, Vec::new(), 0),
        None => return None,
    };
    // The keys that failed lie below `prefix ++ [low]`; search upwards
    // from there, one byte at a time, for the least key that reads.
    for _ in 0..MAX_DEPTH {
        let (mut from, mut to) = (low, 256u16);
        while from < to {
            let mid = (from + to) / 2;
            if reads(&[prefix.as_slice(), &[mid as u8]].concat()) {
                to = mid;
            } else {
                from = mid + 1;
            }
        }
        if to == 256 {
            break;
        }
        best = Some([prefix.as_slice(), &[to as u8]].concat());
        if to == low {
            // Reads at the first byte tried: nothing finer to find.
            break;
        }
        // The boundary lies between `prefix ++ [to - 1]` and `best`.
        prefix.push((to - 1) as u8);
        low = 0;
    }
    best
}

/// Where a reverse scan that met damage before `last` goes on: the
/// longest proper prefix of `last` below which a seek works (keys between
/// it and the damage are passed over).
pub fn resume_before(last: &[u8], mut reads: impl FnMut(&[u8]) -> bool) -> Option<Vec<u8>> {
    (1..last.len()).rev().map(|len| last[..len].to_vec()).find(|candidate| reads(candidate))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys are u64 seqs; `damaged` seqs cannot be read: a seek to a key
    /// reads the block of the first key at or after it.
    fn reads_past(damaged: std::ops::RangeInclusive<u64>) -> impl FnMut(&[u8]) -> bool {
        move |key: &[u8]| {
            let mut padded = [0u8; 8];
            let n = key.len().min(8);
            padded[..n].copy_from_slice(&key[..n]);
            let at = u64::from_be_bytes(padded);
            !damaged.contains(&at)
        }
    }

    #[test]
    fn a_prefix_is_stepped_over() {
        assert_eq!(past_prefix(&[1, 2, 3]), Some(vec![1, 2, 4]));
        assert_eq!(past_prefix(&[1, 0xff, 0xff]), Some(vec![2]));
        assert_eq!(past_prefix(&[0xff, 0xff]), None);
        assert_eq!(past_prefix(&[]), None);
    }

    #[test]
    fn a_scan_goes_on_at_the_first_seq_past_the_damage() {
        let last = 179u64.to_be_bytes();
        let resumed = resume_after(&last, reads_past(180..=220)).expect("something past the damage");
        assert_eq!(resumed, 221u64.to_be_bytes().to_vec());
        // Damage across a byte boundary: still the first readable seq.
        let last = 250u64.to_be_bytes();
        let resumed = resume_after(&last, reads_past(251..=700)).expect("past it");
        let mut padded = [0u8; 8];
        padded[..resumed.len()].copy_from_slice(&resumed);
        let at = u64::from_be_bytes(padded);
        assert!((701..=768).contains(&at), "resumed at {at}, losing at most a step of 256 past the damage");
    }

    #[test]
    fn damage_far_past_the_bound_is_found_to_the_seq() {
        // A scan from 0 whose first block (seqs of today's times) is
        // damaged: it goes on right past the block, not past every seq.
        let now = 1_796_486_330_000u64;
        let resumed = resume_after(&0u64.to_be_bytes(), reads_past(0..=now + 40)).expect("past the damage");
        let mut padded = [0u8; 8];
        padded[..resumed.len()].copy_from_slice(&resumed);
        assert_eq!(u64::from_be_bytes(padded), now + 41);
    }

    #[test]
    fn damage_at_the_start_of_a_family_is_stepped_over() {
        let resumed = resume_after(&[], reads_past(0..=99)).expect("past the damage");
        let mut padded = [0u8; 8];
        padded[..resumed.len()].copy_from_slice(&resumed);
        assert_eq!(u64::from_be_bytes(padded), 100);
    }

    #[test]
    fn damage_to_the_end_leaves_nothing_to_read() {
        assert_eq!(resume_after(&5u64.to_be_bytes(), reads_past(6..=u64::MAX)), None);
    }

    #[test]
    fn a_reverse_scan_goes_on_below_the_damage() {
        let last = [7u8, 3, 9];
        assert_eq!(resume_before(&last, |key| key.len() == 1), Some(vec![7]));
        assert_eq!(resume_before(&last, |_| false), None);
    }
}
