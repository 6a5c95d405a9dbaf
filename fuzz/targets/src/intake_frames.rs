//! The intake log's frame reader over torn and damaged segments: records
//! are appended, then bytes of the segment files are flipped, cut off or
//! replaced. Replay either refuses (naming the damage) or returns records
//! that are exactly a prefix of those appended: never a changed record,
//! never one from past a gap. (Segments replaced whole are only checked
//! for a clean verdict: bytes written with valid checksums are records.)

use ankusa::intake::{IntakeOptions, SegmentLog, read_all};
use arbitrary::Arbitrary;

#[derive(Debug, Arbitrary)]
struct Input {
    payloads: Vec<Vec<u8>>,
    damage: Vec<Damage>,
}

#[derive(Debug, Arbitrary)]
enum Damage {
    Flip { segment: u8, at: u32, mask: u8 },
    Cut { segment: u8, at: u32 },
    Replace { segment: u8, bytes: Vec<u8> },
}

pub fn run(data: &[u8]) {
    let Some(input) = crate::shared::structured::<Input>(data) else { return };
    // Every append is fsynced: on tmpfs that costs nothing.
    let shm = std::path::Path::new("/dev/shm");
    let dir = if shm.is_dir() { tempfile::tempdir_in(shm) } else { tempfile::tempdir() }.expect("temp dir");
    let options = IntakeOptions { dir: dir.path().to_path_buf(), segment_bytes: 256 };
    let mut appended = Vec::new();
    {
        let (mut log, replay) = SegmentLog::open(options).expect("a new log opens");
        assert!(replay.records.is_empty());
        for (n, payload) in input.payloads.iter().take(64).enumerate() {
            let seq = n as u64 + 1;
            log.append(seq, seq, payload).expect("append");
            appended.push((seq, payload.clone()));
        }
    }
    let mut segments: Vec<_> = std::fs::read_dir(dir.path()).expect("list").flatten().map(|e| e.path()).collect();
    segments.sort();
    for damage in input.damage.iter().take(4) {
        let pick = |segment: &u8| &segments[*segment as usize % segments.len()];
        match damage {
            Damage::Flip { segment, at, mask } => {
                let path = pick(segment);
                let mut bytes = std::fs::read(path).expect("read");
                if !bytes.is_empty() {
                    let at = *at as usize % bytes.len();
                    bytes[at] ^= mask.max(&1);
                    std::fs::write(path, bytes).expect("write");
                }
            }
            Damage::Cut { segment, at } => {
                let path = pick(segment);
                let len = std::fs::metadata(path).expect("stat").len();
                let file = std::fs::OpenOptions::new().write(true).open(path).expect("open");
                file.set_len(u64::from(*at) % (len + 1)).expect("cut");
            }
            Damage::Replace { segment, bytes } => std::fs::write(pick(segment), bytes).expect("write"),
        }
    }
    let replaced = input.damage.iter().take(4).any(|d| matches!(d, Damage::Replace { .. }));
    let replay = read_all(dir.path());
    if let (Ok(replay), false) = (replay, replaced) {
        assert!(replay.records.len() <= appended.len(), "more records than were appended");
        for (record, (seq, payload)) in replay.records.iter().zip(&appended) {
            assert_eq!((record.first_seq, record.last_seq), (*seq, *seq), "a record out of place");
            assert_eq!(&record.payload, payload, "a changed record passed its checks");
        }
    }
}
