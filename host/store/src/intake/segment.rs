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
//!
//! A segment ends in a *seal*: a frame with no payload and the seqs
//! `(u64::MAX, 0)`, which no record can have. It is written and fsynced
//! before the next segment is created (on a roll, and on open for the
//! segment a crash left open), so every segment but the last is sealed. A
//! segment that is not the last and has no seal was cut, and a cut at a
//! record boundary leaves nothing else to see: without the seal, the
//! records past it would be dropped in silence. Bytes after a seal are
//! damage too: nothing is ever written there.
//!
//! Segments of the earlier formats are still read: [`MAGIC_V2`] (no seal)
//! and [`MAGIC_V1`] (no seal, no `len_crc`).
//!
//! Segments roll at a size; a closed segment is deleted once the store has
//! checkpointed past its last seq (its memtables flushed to SST files).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::{IntakeError, IntakeLog, LoggedGroup, Replay};

/// The first bytes of every segment written now. It differs from the
/// earlier magics in two bytes, so no single damaged byte turns a sealed
/// segment into one of a format that needs no seal.
pub const MAGIC: &[u8; 8] = b"ANKINT3S";
/// The second format's magic: V3's frames, but no seal.
pub const MAGIC_V2: &[u8; 8] = b"ANKINTK2";
/// The first format's magic: its frames have no `len_crc`.
pub const MAGIC_V1: &[u8; 8] = b"ANKINTK1";
const SEQS: usize = 16;
/// The seqs of a seal: first above last, which no record has.
const SEAL_SEQS: (u64, u64) = (u64::MAX, 0);
/// Bytes a seal adds to a segment: a frame header and the seqs.
pub const SEAL_LEN: usize = 12 + SEQS;
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
    /// The open segment has its seal: a roll whose next segment could not
    /// be created is retried without a second one.
    sealed: bool,
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    V1,
    V2,
    /// V2's frames, and the segment ends in a seal.
    V3,
}

impl Format {
    fn of(magic: &[u8]) -> Option<Format> {
        match magic {
            m if m == MAGIC => Some(Format::V3),
            m if m == MAGIC_V2 => Some(Format::V2),
            m if m == MAGIC_V1 => Some(Format::V1),
            _ => None,
        }
    }

    /// Bytes before `first_seq`: `len`, its check (V2 on) and the CRC.
    fn header_len(self) -> usize {
        match self {
            Format::V1 => 8,
            Format::V2 | Format::V3 => 12,
        }
    }
}

/// One frame as written now: `(first_seq, last_seq, payload)` under the
/// current format's header.
fn frame(first_seq: u64, last_seq: u64, payload: &[u8]) -> Vec<u8> {
    let header = Format::V3.header_len();
    let len = (SEQS + payload.len()) as u32;
    let mut frame = Vec::with_capacity(header + len as usize);
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(&crc32fast::hash(&len.to_be_bytes()).to_be_bytes());
    frame.extend_from_slice(&[0; 4]);
    frame.extend_from_slice(&first_seq.to_be_bytes());
    frame.extend_from_slice(&last_seq.to_be_bytes());
    frame.extend_from_slice(payload);
    let crc = crc32fast::hash(&frame[header..]);
    frame[header - 4..header].copy_from_slice(&crc.to_be_bytes());
    frame
}

fn seal_frame() -> Vec<u8> {
    frame(SEAL_SEQS.0, SEAL_SEQS.1, &[])
}

fn be_u32(bytes: &[u8]) -> u32 {
    u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

/// What one segment holds.
#[derive(Default)]
struct Parsed {
    records: Vec<LoggedGroup>,
    /// Where a torn tail starts, and why.
    torn: Option<(u64, String)>,
    /// Whether the segment must end in a seal (its format has them).
    sealable: bool,
    sealed: bool,
}

fn parse(path: &Path, bytes: &[u8]) -> Result<Parsed, IntakeError> {
    let damaged = |offset: usize, reason: &str| IntakeError::Damaged {
        path: path.display().to_string(),
        offset: offset as u64,
        reason: reason.to_string(),
    };
    if bytes.len() < MAGIC.len() {
        // A segment is created with its magic in one synced write; a
        // shorter one is a crash during that write.
        let torn = Some((0, "segment header incomplete".into()));
        return Ok(Parsed { torn, sealable: true, ..Parsed::default() });
    }
    let Some(format) = Format::of(&bytes[..MAGIC.len()]) else {
        return Err(damaged(0, "not an intake segment (bad magic)"));
    };
    let header = format.header_len();
    let mut parsed = Parsed { sealable: format == Format::V3, ..Parsed::default() };
    let mut at = MAGIC.len();
    while at < bytes.len() {
        let rest = &bytes[at..];
        if parsed.sealed {
            return Err(damaged(at, "bytes after the segment's seal"));
        }
        let torn = |reason: &str| Some((at as u64, reason.to_string()));
        if rest.len() < header {
            return Ok(Parsed { torn: torn("frame header incomplete"), ..parsed });
        }
        let len = be_u32(rest) as usize;
        if len == 0 && rest.iter().all(|b| *b == 0) {
            // The file grew but its data never landed: zeros to the end.
            return Ok(Parsed { torn: torn("zero-filled tail"), ..parsed });
        }
        if format != Format::V1 && crc32fast::hash(&rest[..4]) != be_u32(&rest[4..]) {
            return Err(damaged(at, "record length fails its checksum"));
        }
        if !(SEQS..MAX_RECORD).contains(&len) {
            return Err(damaged(at, &format!("impossible record length {len}")));
        }
        if rest.len() < header + len {
            return Ok(Parsed { torn: torn("record incomplete"), ..parsed });
        }
        let body = &rest[header..header + len];
        if crc32fast::hash(body) != be_u32(&rest[header - 4..]) {
            if at + header + len == bytes.len() {
                return Ok(Parsed { torn: torn("last record fails its checksum"), ..parsed });
            }
            return Err(damaged(at, "record fails its checksum"));
        }
        let first_seq = u64::from_be_bytes(body[..8].try_into().unwrap_or_default());
        let last_seq = u64::from_be_bytes(body[8..16].try_into().unwrap_or_default());
        let payload = &body[SEQS..];
        if parsed.sealable && (first_seq, last_seq) == SEAL_SEQS && payload.is_empty() {
            parsed.sealed = true;
        } else {
            parsed.records.push(LoggedGroup { first_seq, last_seq, payload: payload.to_vec() });
        }
        at += header + len;
    }
    Ok(parsed)
}

fn sync_dir(dir: &Path) -> Result<(), IntakeError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(io_error(dir))
}

impl SegmentLog {
    /// Open the log, replaying every record. A torn tail is cut off; damage
    /// before it is an error naming the file and offset.
    pub fn open(options: IntakeOptions) -> Result<(SegmentLog, Replay), IntakeError> {
        fs::create_dir_all(&options.dir).map_err(io_error(&options.dir))?;
        let Scan { replay, mut closed, last } = replay_dir(&options.dir, true)?;
        // Appends go to a fresh segment: replayed files are never written
        // again, only sealed (if a crash left the last one open) and
        // deleted once checkpointed.
        if let (Some(last), Some(segment)) = (last.as_ref().filter(|l| l.needs_seal), closed.last_mut()) {
            let mut file = OpenOptions::new().append(true).open(&last.path).map_err(io_error(&last.path))?;
            let seal = seal_frame();
            file.write_all(&seal).and_then(|_| file.sync_data()).map_err(io_error(&last.path))?;
            segment.bytes += seal.len() as u64;
        }
        let index = last.map_or(0, |l| l.index + 1);
        let (file, path) = Self::create_segment(&options.dir, index)?;
        let log = SegmentLog {
            options,
            file,
            path,
            index,
            len: MAGIC.len() as u64,
            last_seq: 0,
            sealed: false,
            closed,
            stopped: None,
        };
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
        if first_seq > last_seq {
            return Err(IntakeError::Seqs { first_seq, last_seq });
        }
        if self.len >= self.options.segment_bytes {
            self.roll()?;
        }
        self.write_frame(&frame(first_seq, last_seq, payload))?;
        self.last_seq = self.last_seq.max(last_seq);
        Ok(())
    }

    /// Write and fsync one frame to the open segment; on error cut it off.
    fn write_frame(&mut self, frame: &[u8]) -> Result<(), IntakeError> {
        if let Err(source) = self.file.write_all(frame).and_then(|_| self.file.sync_data()) {
            self.discard_tail();
            return Err(IntakeError::Io { path: self.path.display().to_string(), source });
        }
        self.len += frame.len() as u64;
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

    /// Seal the open segment, then start the next one: the seal is durable
    /// before the next segment exists, so only the last can lack one.
    fn roll(&mut self) -> Result<(), IntakeError> {
        if !self.sealed {
            self.write_frame(&seal_frame())?;
            self.sealed = true;
        }
        let (file, path) = Self::create_segment(&self.options.dir, self.index + 1)?;
        let old_path = std::mem::replace(&mut self.path, path);
        self.file = file;
        self.index += 1;
        self.closed.push(Closed { path: old_path, bytes: self.len, last_seq: self.last_seq });
        self.len = MAGIC.len() as u64;
        self.last_seq = 0;
        self.sealed = false;
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
    fn replay(&self) -> Result<Vec<LoggedGroup>, IntakeError> {
        read_all(&self.options.dir).map(|replay| replay.records)
    }
}

/// Read every record without opening the log for appends (for `store
/// rebuild`): the same checks as [`SegmentLog::open`], nothing changed.
pub fn read_all(dir: &Path) -> Result<Replay, IntakeError> {
    replay_dir(dir, false).map(|scan| scan.replay)
}

/// What a replay of the directory found.
struct Scan {
    replay: Replay,
    /// Every segment, all closed for appends.
    closed: Vec<Closed>,
    last: Option<LastSegment>,
}

struct LastSegment {
    index: u64,
    path: PathBuf,
    /// Of a format with seals, and without one: a crash left it open.
    needs_seal: bool,
}

/// Replay every segment of `dir` in order; with `repair`, cut a torn tail
/// off the last segment.
fn replay_dir(dir: &Path, repair: bool) -> Result<Scan, IntakeError> {
    let found = segments(dir)?;
    let mut scan = Scan { replay: Replay::default(), closed: Vec::new(), last: None };
    for (n, (index, path)) in found.iter().enumerate() {
        let is_last = n + 1 == found.len();
        let damaged = |offset: u64, reason: String| IntakeError::Damaged {
            path: path.display().to_string(),
            offset,
            reason: format!("{reason}, in a segment that is not the last"),
        };
        let mut bytes = Vec::new();
        File::open(path).and_then(|mut f| f.read_to_end(&mut bytes)).map_err(io_error(path))?;
        let parsed = parse(path, &bytes)?;
        // The segment's bytes on disk after replay.
        let mut kept = bytes.len() as u64;
        if let Some((offset, reason)) = parsed.torn {
            if !is_last {
                return Err(damaged(offset, reason));
            }
            scan.replay.torn_bytes = bytes.len() as u64 - offset;
            tracing::warn!(
                file = %path.display(),
                offset,
                bytes = scan.replay.torn_bytes,
                "intake log ends in a torn record ({reason}); it was never acked and is dropped"
            );
            if repair {
                cut_tail(path, offset)?;
                kept = offset;
            }
        }
        let needs_seal = parsed.sealable && !parsed.sealed;
        if needs_seal && !is_last {
            // Cut at a record boundary: whatever followed is gone.
            return Err(damaged(bytes.len() as u64, "segment ends without its seal (it was cut)".into()));
        }
        let last_seq = parsed.records.iter().map(|r| r.last_seq).max().unwrap_or(0);
        scan.closed.push(Closed { path: path.clone(), bytes: kept, last_seq });
        scan.replay.records.extend(parsed.records);
        if is_last {
            scan.last = Some(LastSegment { index: *index, path: path.clone(), needs_seal });
        }
    }
    Ok(scan)
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
mod tests;
