//! The intake log's framing under any damage: a segment cut anywhere (a
//! crash mid-append) replays exactly the records wholly before the cut,
//! and any changed byte before the last record (damage to acked data) is
//! refused, naming the file, with the file left as it was.

use std::fs;
use std::path::{Path, PathBuf};

use ankusa::intake::{IntakeError, IntakeOptions, LoggedGroup, MAGIC, SegmentLog};
use proptest::prelude::*;

/// Appends `payloads` as records with seqs 1, 2, … to a fresh log in `dir`
/// (one segment), and returns the segment and its length after each record.
fn write(dir: &Path, payloads: &[Vec<u8>]) -> (PathBuf, Vec<u64>) {
    let (mut log, replay) = SegmentLog::open(IntakeOptions::new(dir)).expect("open a new log");
    assert!(replay.records.is_empty());
    let segment = log.current_segment().to_path_buf();
    let mut ends = Vec::new();
    for (n, payload) in payloads.iter().enumerate() {
        let seq = n as u64 + 1;
        log.append(seq, seq, payload).expect("append");
        ends.push(fs::metadata(&segment).expect("segment").len());
    }
    (segment, ends)
}

fn expected(payloads: &[Vec<u8>], count: usize) -> Vec<LoggedGroup> {
    payloads[..count]
        .iter()
        .enumerate()
        .map(|(n, payload)| LoggedGroup { first_seq: n as u64 + 1, last_seq: n as u64 + 1, payload: payload.clone() })
        .collect()
}

fn payloads() -> impl Strategy<Value = Vec<Vec<u8>>> {
    proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 1..10)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn a_segment_cut_anywhere_replays_the_records_before_the_cut(
        payloads in payloads(),
        cut_at in any::<prop::sample::Index>(),
    ) {
        let dir = tempfile::tempdir().expect("dir");
        let (segment, ends) = write(dir.path(), &payloads);
        let full = fs::read(&segment).expect("read");
        let cut = cut_at.index(full.len() + 1);
        fs::write(&segment, &full[..cut]).expect("cut");

        let whole = ends.iter().filter(|end| **end <= cut as u64).count();
        let (_, replay) = SegmentLog::open(IntakeOptions::new(dir.path())).expect("a torn tail opens");
        prop_assert_eq!(&replay.records, &expected(&payloads, whole));
        // A segment cut inside its magic is torn from its first byte.
        let good_end = match whole {
            _ if cut < MAGIC.len() => 0,
            0 => MAGIC.len() as u64,
            n => ends[n - 1],
        };
        prop_assert_eq!(replay.torn_bytes, cut as u64 - good_end);

        // The cut was repaired on disk: the next open finds nothing torn.
        let (_, again) = SegmentLog::open(IntakeOptions::new(dir.path())).expect("reopen");
        prop_assert_eq!(&again.records, &expected(&payloads, whole));
        prop_assert_eq!(again.torn_bytes, 0);
    }

    #[test]
    fn any_changed_byte_before_the_last_record_is_refused(
        payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 2..10),
        at in any::<prop::sample::Index>(),
        flip in 1..=255u8,
    ) {
        let dir = tempfile::tempdir().expect("dir");
        let (segment, ends) = write(dir.path(), &payloads);
        let mut bytes = fs::read(&segment).expect("read");
        // Anywhere from the magic to the end of the second-to-last record.
        let position = at.index(ends[ends.len() - 2] as usize);
        bytes[position] ^= flip;
        fs::write(&segment, &bytes).expect("damage");

        match SegmentLog::open(IntakeOptions::new(dir.path())) {
            Err(IntakeError::Damaged { path, offset, .. }) => {
                prop_assert_eq!(path, segment.display().to_string());
                prop_assert!(offset <= position as u64, "damage at {} reported at {}", position, offset);
            }
            Err(other) => prop_assert!(false, "byte {} changed: {}", position, other),
            Ok((_, replay)) => prop_assert!(
                false,
                "byte {} changed, yet the log opened with {} of {} records ({} bytes cut as torn)",
                position,
                replay.records.len(),
                payloads.len(),
                replay.torn_bytes
            ),
        }
        prop_assert_eq!(fs::read(&segment).expect("read"), bytes, "a damaged log is never cut");
    }
}
