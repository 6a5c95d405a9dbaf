//! The embedded intake log: an append-only log of segment files,
//! `<20-digit index>.intake`, each starting with [`MAGIC`] and holding
//! records framed as
//!
//! ```text
//! len: u32 BE │ len_crc: u32 BE │ crc: u32 BE │ first_seq: u64 BE │ last_seq: u64 BE │ payload
//!                                             └───────── crc over first_seq .. end ──────────┘
//! ```
//!
//! where `len` counts from `first_seq` to the payload's end and `len_crc`
//! is the CRC32 of `len`'s four bytes. A record is fsynced before the
//! append returns, and the queue acks a hook only after both this log and
//! the store have it.
//!
//! Replay tells a torn tail from damage. A crash mid-append can only leave
//! the *last* record of the *last* segment incomplete, and that record was
//! never acked: it is dropped (the file is cut back to the last good
//! record). Anything wrong before that point is damage to acked data: the
//! log refuses to open, naming the file and the offset. The length has a
//! check of its own because replay trusts it to find the next record: a
//! damaged length that pointed past the end of the file would otherwise
//! look like a torn tail, and every acked record behind it would be cut.
//! Segments of the first format ([`MAGIC_V1`], no `len_crc`) are still read.
//!
//! Segments roll at a size; a closed segment is deleted once the store has
//! checkpointed past its last seq (its memtables flushed to SST files).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::{IntakeError, IntakeLog, Record, Replay};

/// The first bytes of every segment written now.
pub const MAGIC: &[u8; 8] = b"ANKINTK2";
/// The first format's magic: its frames have no `len_crc`.
pub const MAGIC_V1: &[u8; 8] = b"ANKINTK1";
const SEQS: usize = 16;
/// Records larger than this are damage, not a length (a group of 1024
/// calls of 1 MiB hooks stays well below).
pub(super) const MAX_RECORD: usize = 1 << 31;

fn io_error(path: &Path) -> impl Fn(io::Error) -> IntakeError + '_ {
    move |source| IntakeError::Io { path: path.display().to_string(), source }
}

#[derive(Clone, Debug)]
pub struct IntakeOptions {
    pub dir: PathBuf,
    /// Roll to a new segment past this size.
    pub segment_bytes: u64,
}

impl IntakeOptions {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        IntakeOptions { dir: dir.into(), segment_bytes: 64 << 20 }
    }
}

#[derive(Debug)]
struct Closed {
    path: PathBuf,
    bytes: u64,
    last_seq: u64,
}

pub struct SegmentLog {
    options: IntakeOptions,
    file: File,
    path: PathBuf,
    index: u64,
    len: u64,
    /// The greatest seq in the open segment (0: none yet).
    last_seq: u64,
    closed: Vec<Closed>,
    /// Why appends stopped: a failed append left bytes that could not be
    /// cut off, and a record written after them would read as damage.
    stopped: Option<String>,
}

fn segment_path(dir: &Path, index: u64) -> PathBuf {
    dir.join(format!("{index:020}.intake"))
}

/// The segments in `dir`, in order.
fn segments(dir: &Path) -> Result<Vec<(u64, PathBuf)>, IntakeError> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_error(dir))? {
        let path = entry.map_err(io_error(dir))?.path();
        let index = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".intake"))
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(index) = index {
            found.push((index, path));
        }
    }
    found.sort();
    Ok(found)
}

/// The frame layout of a segment, told by its magic.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Format {
    V1,
    V2,
}

impl Format {
    fn of(magic: &[u8]) -> Option<Format> {
        match magic {
            m if m == MAGIC => Some(Format::V2),
            m if m == MAGIC_V1 => Some(Format::V1),
            _ => None,
        }
    }

    /// Bytes before `first_seq`: `len`, its check (V2) and the CRC.
    fn header_len(self) -> usize {
        match self {
            Format::V1 => 8,
            Format::V2 => 12,
        }
    }
}

fn be_u32(bytes: &[u8]) -> u32 {
    u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

/// A segment's records, and where a torn tail starts (offset, why).
type Parsed = (Vec<Record>, Option<(u64, String)>);

fn parse(path: &Path, bytes: &[u8]) -> Result<Parsed, IntakeError> {
    let damaged = |offset: usize, reason: &str| IntakeError::Damaged {
        path: path.display().to_string(),
        offset: offset as u64,
        reason: reason.to_string(),
    };
    if bytes.len() < MAGIC.len() {
        // A segment is created with its magic in one synced write; a
        // shorter one is a crash during that write.
        return Ok((Vec::new(), Some((0, "segment header incomplete".into()))));
    }
    let Some(format) = Format::of(&bytes[..MAGIC.len()]) else {
        return Err(damaged(0, "not an intake segment (bad magic)"));
    };
    let header = format.header_len();
    let mut records = Vec::new();
    let mut at = MAGIC.len();
    while at < bytes.len() {
        let rest = &bytes[at..];
        let torn = |reason: &str| Some((at as u64, reason.to_string()));
        if rest.len() < header {
            return Ok((records, torn("frame header incomplete")));
        }
        let len = be_u32(rest) as usize;
        if len == 0 && rest.iter().all(|b| *b == 0) {
            // The file grew but its data never landed: zeros to the end.
            return Ok((records, torn("zero-filled tail")));
        }
        if format == Format::V2 && crc32fast::hash(&rest[..4]) != be_u32(&rest[4..]) {
            return Err(damaged(at, "record length fails its checksum"));
        }
        if !(SEQS..MAX_RECORD).contains(&len) {
            return Err(damaged(at, &format!("impossible record length {len}")));
        }
        if rest.len() < header + len {
            return Ok((records, torn("record incomplete")));
        }
        let body = &rest[header..header + len];
        if crc32fast::hash(body) != be_u32(&rest[header - 4..]) {
            if at + header + len == bytes.len() {
                return Ok((records, torn("last record fails its checksum")));
            }
            return Err(damaged(at, "record fails its checksum"));
        }
        let first_seq = u64::from_be_bytes(body[..8].try_into().unwrap_or_default());
        let last_seq = u64::from_be_bytes(body[8..16].try_into().unwrap_or_default());
        records.push(Record { first_seq, last_seq, payload: body[SEQS..].to_vec() });
        at += header + len;
    }
    Ok((records, None))
}

fn sync_dir(dir: &Path) -> Result<(), IntakeError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(io_error(dir))
}

impl SegmentLog {
    /// Open the log, replaying every record. A torn tail is cut off; damage
    /// before it is an error naming the file and offset.
    pub fn open(options: IntakeOptions) -> Result<(SegmentLog, Replay), IntakeError> {
        fs::create_dir_all(&options.dir).map_err(io_error(&options.dir))?;
        let (replay, closed, last_index) = replay_dir(&options.dir, true)?;
        // Appends go to a fresh segment: replayed files are never written
        // again, only deleted once checkpointed.
        let index = last_index.map_or(0, |i| i + 1);
        let (file, path) = Self::create_segment(&options.dir, index)?;
        let log =
            SegmentLog { options, file, path, index, len: MAGIC.len() as u64, last_seq: 0, closed, stopped: None };
        Ok((log, replay))
    }

    fn create_segment(dir: &Path, index: u64) -> Result<(File, PathBuf), IntakeError> {
        let path = segment_path(dir, index);
        let mut file = OpenOptions::new().create_new(true).append(true).open(&path).map_err(io_error(&path))?;
        if let Err(e) = file.write_all(MAGIC).and_then(|_| file.sync_all()) {
            // Removed so the next roll can create it again.
            let _ = fs::remove_file(&path);
            return Err(io_error(&path)(e));
        }
        sync_dir(dir)?;
        Ok((file, path))
    }

    /// Append one record and fsync it. On error nothing is acked and what
    /// the record left in the file is cut off (see [`Self::discard_tail`]).
    pub fn append(&mut self, first_seq: u64, last_seq: u64, payload: &[u8]) -> Result<(), IntakeError> {
        if let Some(reason) = &self.stopped {
            return Err(IntakeError::Stopped { path: self.path.display().to_string(), reason: reason.clone() });
        }
        let len = SEQS + payload.len();
        if len >= MAX_RECORD {
            return Err(IntakeError::TooLarge { bytes: len });
        }
        if self.len >= self.options.segment_bytes {
            self.roll()?;
        }
        let header = Format::V2.header_len();
        let len = len as u32;
        let mut frame = Vec::with_capacity(header + len as usize);
        frame.extend_from_slice(&len.to_be_bytes());
        frame.extend_from_slice(&crc32fast::hash(&len.to_be_bytes()).to_be_bytes());
        frame.extend_from_slice(&[0; 4]);
        frame.extend_from_slice(&first_seq.to_be_bytes());
        frame.extend_from_slice(&last_seq.to_be_bytes());
        frame.extend_from_slice(payload);
        let crc = crc32fast::hash(&frame[header..]);
        frame[header - 4..header].copy_from_slice(&crc.to_be_bytes());
        if let Err(source) = self.file.write_all(&frame).and_then(|_| self.file.sync_data()) {
            self.discard_tail();
            return Err(IntakeError::Io { path: self.path.display().to_string(), source });
        }
        self.len += frame.len() as u64;
        self.last_seq = self.last_seq.max(last_seq);
        Ok(())
    }

    /// Cut the segment back to its last whole record after a failed
    /// append. Left in place, a partial record would sit in front of the
    /// next one, and replay takes anything wrong before the last record for
    /// damage to acked data. If the cut fails too, appends stop; a restart
    /// replays the segment and drops its torn tail.
    fn discard_tail(&mut self) {
        if let Err(e) = self.file.set_len(self.len).and_then(|_| self.file.sync_data()) {
            tracing::error!(file = %self.path.display(), "a failed intake append could not be cut off: {e}");
            self.stopped = Some(e.to_string());
        }
    }

    fn roll(&mut self) -> Result<(), IntakeError> {
        let (file, path) = Self::create_segment(&self.options.dir, self.index + 1)?;
        let old_path = std::mem::replace(&mut self.path, path);
        self.file = file;
        self.index += 1;
        self.closed.push(Closed { path: old_path, bytes: self.len, last_seq: self.last_seq });
        self.len = MAGIC.len() as u64;
        self.last_seq = 0;
        Ok(())
    }

    /// Closed segments waiting for a checkpoint.
    pub fn closed_segments(&self) -> usize {
        self.closed.len()
    }

    /// Bytes held in every segment.
    pub fn bytes(&self) -> u64 {
        self.closed.iter().map(|c| c.bytes).sum::<u64>() + self.len
    }

    /// Delete the closed segments whose every seq is below `checkpointed`
    /// (the store has them in its checkpoint). Returns how many went.
    pub fn truncate_below(&mut self, checkpointed: u64) -> Result<usize, IntakeError> {
        let mut removed = 0;
        while let Some(first) = self.closed.first() {
            if first.last_seq >= checkpointed {
                break;
            }
            fs::remove_file(&first.path).map_err(io_error(&first.path))?;
            self.closed.remove(0);
            removed += 1;
        }
        if removed > 0 {
            sync_dir(&self.options.dir)?;
        }
        Ok(removed)
    }

    pub fn dir(&self) -> &Path {
        &self.options.dir
    }

    /// The file appends go to now.
    pub fn current_segment(&self) -> &Path {
        &self.path
    }
}

impl IntakeLog for SegmentLog {
    fn append(&mut self, first_seq: u64, last_seq: u64, payload: &[u8]) -> Result<(), IntakeError> {
        SegmentLog::append(self, first_seq, last_seq, payload)
    }

    fn bytes(&self) -> u64 {
        SegmentLog::bytes(self)
    }

    /// A closed segment can go once the store has flushed past it.
    fn wants_checkpoint(&self) -> bool {
        self.closed_segments() > 0
    }

    fn truncate_below(&mut self, seq: u64) -> Result<(), IntakeError> {
        SegmentLog::truncate_below(self, seq).map(|_| ())
    }

    /// Read back from the files: every append before returned after its
    /// fsync, so they hold everything appended.
    fn replay(&self) -> Result<Vec<Record>, IntakeError> {
        read_all(&self.options.dir).map(|replay| replay.records)
    }
}

/// Read every record without opening the log for appends (for `store
/// rebuild`): the same checks as [`SegmentLog::open`], nothing changed.
pub fn read_all(dir: &Path) -> Result<Replay, IntakeError> {
    replay_dir(dir, false).map(|(replay, _, _)| replay)
}

/// Replay every segment of `dir` in order; with `repair`, cut a torn tail
/// off the last segment. Returns the records, the segments (all closed for
/// appends) and the last segment's index.
fn replay_dir(dir: &Path, repair: bool) -> Result<(Replay, Vec<Closed>, Option<u64>), IntakeError> {
    let found = segments(dir)?;
    let mut replay = Replay::default();
    let mut closed = Vec::new();
    for (n, (_, path)) in found.iter().enumerate() {
        let mut bytes = Vec::new();
        File::open(path).and_then(|mut f| f.read_to_end(&mut bytes)).map_err(io_error(path))?;
        let (records, tail) = parse(path, &bytes)?;
        if let Some((offset, reason)) = tail {
            if n + 1 != found.len() {
                return Err(IntakeError::Damaged {
                    path: path.display().to_string(),
                    offset,
                    reason: format!("{reason}, in a segment that is not the last"),
                });
            }
            replay.torn_bytes = bytes.len() as u64 - offset;
            tracing::warn!(
                file = %path.display(),
                offset,
                bytes = replay.torn_bytes,
                "intake log ends in a torn record ({reason}); it was never acked and is dropped"
            );
            if repair {
                cut_tail(path, offset)?;
            }
        }
        let last_seq = records.iter().map(|r| r.last_seq).max().unwrap_or(0);
        closed.push(Closed { path: path.clone(), bytes: bytes.len() as u64, last_seq });
        replay.records.extend(records);
    }
    Ok((replay, closed, found.last().map(|(i, _)| *i)))
}

/// Cut a segment back to `offset` (keeping its magic) and sync it.
fn cut_tail(path: &Path, offset: u64) -> Result<(), IntakeError> {
    let mut file = OpenOptions::new().write(true).open(path).map_err(io_error(path))?;
    if offset < MAGIC.len() as u64 {
        file.set_len(0).and_then(|_| file.seek(SeekFrom::Start(0))).and_then(|_| file.write_all(MAGIC))
    } else {
        file.set_len(offset)
    }
    .and_then(|_| file.sync_all())
    .map_err(io_error(path))
}

#[cfg(test)]
mod tests {
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
        assert_eq!(fs::read(&last).expect("read"), good, "cut back to the last record");

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
}
