use super::*;

fn options(dir: &Path) -> IntakeOptions {
    IntakeOptions { dir: dir.to_path_buf(), segment_bytes: 200 }
}

fn write_records(dir: &Path, n: u64) {
    let (mut log, replay) = SegmentLog::open(options(dir)).expect("open");
    assert!(replay.records.is_empty());
    for seq in 1..=n {
        log.append(seq, seq, format!("hook {seq}").as_bytes()).expect("append");
    }
}

#[test]
fn records_replay_in_order_across_segments() {
    let dir = tempfile::tempdir().expect("dir");
    write_records(dir.path(), 30);
    assert!(segments(dir.path()).expect("list").len() > 2, "small segments rolled");
    let (_, replay) = SegmentLog::open(options(dir.path())).expect("reopen");
    let seqs: Vec<u64> = replay.records.iter().map(|r| r.first_seq).collect();
    assert_eq!(seqs, (1..=30).collect::<Vec<_>>());
    assert_eq!(replay.records[4].payload, b"hook 5");
    assert_eq!(replay.torn_bytes, 0);
}

#[test]
fn a_torn_tail_is_dropped_and_damage_before_it_is_refused() {
    let dir = tempfile::tempdir().expect("dir");
    write_records(dir.path(), 3);
    let last = segments(dir.path()).expect("list").last().expect("segment").1.clone();
    let full = fs::read(&last).expect("read");
    fs::write(&last, &full[..full.len() - 3]).expect("tear");
    let (_, replay) = SegmentLog::open(options(dir.path())).expect("a torn tail opens");
    assert_eq!(replay.records.len(), 2);
    assert!(replay.torn_bytes > 0);

    let segs = segments(dir.path()).expect("list");
    let first = &segs[0].1;
    let mut bytes = fs::read(first).expect("read");
    bytes[MAGIC.len() + Format::V2.header_len() + 2] ^= 0x40;
    fs::write(first, &bytes).expect("flip");
    let err = SegmentLog::open(options(dir.path())).err().expect("refused");
    let text = err.to_string();
    assert!(text.contains(&first.display().to_string()) && text.contains("offset 8"), "{text}");
}

#[test]
fn a_zero_filled_tail_is_dropped_but_a_damaged_length_is_refused() {
    let dir = tempfile::tempdir().expect("dir");
    write_records(dir.path(), 2);
    let last = segments(dir.path()).expect("list").last().expect("segment").1.clone();
    let good = fs::read(&last).expect("read");
    // The file grew in a crash but its data never landed.
    let mut grown = good.clone();
    grown.extend_from_slice(&[0; 40]);
    fs::write(&last, &grown).expect("grow");
    let (_, replay) = SegmentLog::open(options(dir.path())).expect("a zero-filled tail opens");
    assert_eq!(replay.torn_bytes, 40);
    let sealed = [good.as_slice(), &seal_frame()].concat();
    assert_eq!(fs::read(&last).expect("read"), sealed, "cut back to the last record, then sealed");

    // The first record's length now points past the end of the file.
    let mut bytes = good.clone();
    bytes[MAGIC.len()] ^= 0x10;
    fs::write(&last, &bytes).expect("flip");
    let err = SegmentLog::open(options(dir.path())).err().expect("refused");
    assert!(err.to_string().contains("record length fails its checksum"), "{err}");
    assert_eq!(fs::read(&last).expect("read"), bytes, "nothing was cut");
}

#[test]
fn a_failed_append_leaves_nothing_in_front_of_the_next_record() {
    let dir = tempfile::tempdir().expect("dir");
    let (mut log, _) = SegmentLog::open(IntakeOptions::new(dir.path())).expect("open");
    log.append(1, 1, b"one").expect("append");
    // What a write that failed half-way leaves behind.
    let mut other = OpenOptions::new().append(true).open(log.current_segment()).expect("second handle");
    other.write_all(&[9; 7]).expect("partial record");
    log.discard_tail();
    log.append(2, 2, b"two").expect("append after the failure");
    drop(log);
    let (_, replay) = SegmentLog::open(IntakeOptions::new(dir.path())).expect("reopen");
    let payloads: Vec<&[u8]> = replay.records.iter().map(|r| r.payload.as_slice()).collect();
    assert_eq!(payloads, [b"one".as_slice(), b"two".as_slice()]);
    assert_eq!(replay.torn_bytes, 0);
}

#[test]
fn appends_stop_when_a_failed_append_cannot_be_cut_off() {
    let dir = tempfile::tempdir().expect("dir");
    let (mut log, _) = SegmentLog::open(IntakeOptions::new(dir.path())).expect("open");
    log.append(1, 1, b"one").expect("append");
    // A handle that can neither write nor truncate.
    log.file = File::open(log.current_segment()).expect("read-only handle");
    assert!(matches!(log.append(2, 2, b"two"), Err(IntakeError::Io { .. })));
    let err = log.append(3, 3, b"three").expect_err("appends stopped");
    assert!(matches!(err, IntakeError::Stopped { .. }), "{err}");
    drop(log);
    let (_, replay) = SegmentLog::open(IntakeOptions::new(dir.path())).expect("reopen");
    assert_eq!(replay.records.iter().map(|r| r.last_seq).collect::<Vec<_>>(), [1]);
}

#[test]
fn segments_of_the_first_format_are_still_read() {
    let dir = tempfile::tempdir().expect("dir");
    let mut bytes = MAGIC_V1.to_vec();
    for (seq, payload) in [(1u64, b"one".as_slice()), (2, b"two")] {
        let mut body = seq.to_be_bytes().to_vec();
        body.extend_from_slice(&seq.to_be_bytes());
        body.extend_from_slice(payload);
        bytes.extend_from_slice(&(body.len() as u32).to_be_bytes());
        bytes.extend_from_slice(&crc32fast::hash(&body).to_be_bytes());
        bytes.extend_from_slice(&body);
    }
    fs::write(segment_path(dir.path(), 0), &bytes).expect("v1 segment");
    let (mut log, replay) = SegmentLog::open(IntakeOptions::new(dir.path())).expect("open");
    assert_eq!(replay.records.iter().map(|r| r.payload.as_slice()).collect::<Vec<_>>(), [b"one", b"two"]);
    log.append(3, 3, b"three").expect("appends go to a new-format segment");
    drop(log);
    let (_, replay) = SegmentLog::open(IntakeOptions::new(dir.path())).expect("reopen");
    assert_eq!(replay.records.iter().map(|r| r.last_seq).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(fs::read(segment_path(dir.path(), 1)).expect("segment 1")[..8], *MAGIC);
}

/// Every segment but the last, in order.
fn sealed_segments(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = segments(dir).expect("list").into_iter().map(|(_, p)| p).collect();
    found.pop();
    found
}

#[test]
fn a_segment_cut_at_a_record_boundary_is_refused_unless_it_is_the_last() {
    let seal = seal_frame();
    // Cut off just the seal, and cut after the first record: both leave
    // whole records only, and both drop acked records past the cut.
    let first_record = MAGIC.len() + frame(1, 1, b"hook 1").len();
    for keep in [None, Some(first_record)] {
        let dir = tempfile::tempdir().expect("dir");
        write_records(dir.path(), 30);
        let first = sealed_segments(dir.path())[0].clone();
        let bytes = fs::read(&first).expect("read");
        assert!(bytes.ends_with(&seal), "a closed segment ends in its seal");
        let cut = keep.unwrap_or(bytes.len() - seal.len());
        fs::write(&first, &bytes[..cut]).expect("cut");
        let err = SegmentLog::open(options(dir.path())).err().expect("a cut middle segment is refused");
        let text = err.to_string();
        assert!(text.contains(&first.display().to_string()) && text.contains("without its seal"), "{text}");
        assert!(read_all(dir.path()).is_err(), "store rebuild refuses it too");
    }
}

#[test]
fn a_segment_a_crash_left_open_is_sealed_on_open() {
    let dir = tempfile::tempdir().expect("dir");
    write_records(dir.path(), 3);
    let last = segments(dir.path()).expect("list").last().expect("segment").1.clone();
    assert!(!fs::read(&last).expect("read").ends_with(&seal_frame()), "a crash leaves no seal");
    let (log, replay) = SegmentLog::open(options(dir.path())).expect("open");
    assert!(fs::read(&last).expect("read").ends_with(&seal_frame()), "sealed before appends move on");
    // The sealed segment, and the new one's magic.
    assert_eq!(log.bytes(), fs::metadata(&last).expect("stat").len() + MAGIC.len() as u64);
    drop(log);
    let (_, again) = SegmentLog::open(options(dir.path())).expect("reopen");
    assert_eq!(again.records, replay.records);
}

#[test]
fn a_seal_is_as_long_as_it_says() {
    assert_eq!(seal_frame().len(), SEAL_LEN);
}

#[test]
fn bytes_after_a_seal_are_refused() {
    let dir = tempfile::tempdir().expect("dir");
    write_records(dir.path(), 30);
    let first = sealed_segments(dir.path())[0].clone();
    let mut bytes = fs::read(&first).expect("read");
    bytes.extend_from_slice(&frame(99, 99, b"appended after the seal"));
    fs::write(&first, &bytes).expect("append");
    let err = SegmentLog::open(options(dir.path())).err().expect("refused");
    assert!(err.to_string().contains("after the segment's seal"), "{err}");
}

#[test]
fn a_record_with_its_seqs_reversed_is_refused() {
    let dir = tempfile::tempdir().expect("dir");
    let (mut log, _) = SegmentLog::open(options(dir.path())).expect("open");
    let err = log.append(u64::MAX, 0, b"").expect_err("it would read as a seal");
    assert!(matches!(err, IntakeError::Seqs { .. }), "{err}");
}

#[test]
fn segments_of_the_second_format_need_no_seal() {
    let dir = tempfile::tempdir().expect("dir");
    let mut bytes = MAGIC_V2.to_vec();
    bytes.extend_from_slice(&frame(1, 1, b"one"));
    fs::write(segment_path(dir.path(), 0), &bytes).expect("v2 segment");
    let (mut log, _) = SegmentLog::open(options(dir.path())).expect("open");
    assert_eq!(fs::read(segment_path(dir.path(), 0)).expect("read"), bytes, "an old segment is left as it was");
    log.append(2, 2, b"two").expect("append");
    drop(log);
    let (_, replay) = SegmentLog::open(options(dir.path())).expect("reopen");
    assert_eq!(replay.records.iter().map(|r| r.last_seq).collect::<Vec<_>>(), [1, 2]);
}

#[test]
fn checkpointed_segments_are_deleted() {
    let dir = tempfile::tempdir().expect("dir");
    let (mut log, _) = SegmentLog::open(options(dir.path())).expect("open");
    for seq in 1..=40 {
        log.append(seq, seq, &[7; 40]).expect("append");
    }
    let closed = log.closed_segments();
    assert!(closed >= 3);
    let removed = log.truncate_below(20).expect("truncate");
    assert!(removed > 0 && removed < closed, "only segments wholly below seq 20: {removed} of {closed}");
    let (_, replay) = SegmentLog::open(options(dir.path())).expect("reopen");
    assert!(replay.records.iter().all(|r| r.last_seq >= 15));
    assert_eq!(replay.records.last().map(|r| r.last_seq), Some(40));
}
