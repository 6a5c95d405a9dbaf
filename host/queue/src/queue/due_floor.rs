//! Where claims start: the due index's floor, each ordered line's floor
//! and the entries a walk read ahead of it, and the lines a commit wrote
//! waiting rows to (looked at again by the next claim).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::store::keys::index::{self, LineId};
use crate::store::{Batch, Cf, WriteOp};

/// A lower bound on the due time of every live due-index entry.
///
/// Claimed rows leave tombstones at the front of the due index until a
/// compaction drops them; a scan from the index's start would walk all of
/// them on every claim. Claims start at this floor instead. Every write
/// that adds due entries lowers `inserted` *after* it lands; a claim takes
/// `min(floor, inserted)` as its start, and afterwards raises the floor to
/// the first entry it left due (or past `now`), never above anything
/// inserted meanwhile.
///
/// Ordered lines have the same trouble: a line's delivered rows leave
/// tombstones before its head. Each line's floor (no live entry of it is
/// below that seq) is kept here too, raised only once what proves it is
/// written, and forgotten with the due floor.
#[derive(Debug)]
pub(crate) struct DueFloor {
    floor: AtomicU64,
    inserted: AtomicU64,
    lines: Mutex<HashMap<LineId, LineFloor>>,
    /// Lines a commit wrote waiting rows to, to be looked at by the next
    /// claim: a row written waiting behind a head that left meanwhile
    /// would wait for nothing.
    recheck: Mutex<HashSet<LineId>>,
    /// The floors were forgotten because the store may have lost writes:
    /// the next claim walks every line for a head that waits (see `ready`).
    walk_lines: AtomicBool,
}

impl Default for DueFloor {
    fn default() -> Self {
        DueFloor {
            floor: AtomicU64::new(0),
            inserted: AtomicU64::new(u64::MAX),
            lines: Default::default(),
            recheck: Default::default(),
            walk_lines: AtomicBool::new(false),
        }
    }
}

/// What is known of one ordered line.
#[derive(Debug)]
struct LineFloor {
    /// No live entry of the line is below it.
    floor: u64,
    /// The line's entries from the floor on, as far as a walk read them:
    /// the next head is found among them without a seek (see `line_head`).
    ahead: VecDeque<u64>,
    /// The lowest entry a commit wrote below what was known of the line (a
    /// hook committed again under the seq it was first logged with), not
    /// yet seen by a look that started at or below it: no raise passes it.
    /// (A settle that looked at the line before that commit landed would
    /// otherwise raise the floor over the entry once its batch is written,
    /// and hide it from every later look.)
    low: Option<u64>,
}

/// Lines whose floors are kept at most; past it they are all forgotten
/// (each is found again by one scan).
const MAX_LINE_FLOORS: usize = 65_536;

impl DueFloor {
    /// Note the due entries a written batch added, and the lines it wrote
    /// waiting rows to.
    pub(crate) fn note(&self, batch: &Batch) {
        let mut min = None;
        let mut entries = Vec::new();
        let mut waiting = Vec::new();
        for op in batch.ops() {
            let WriteOp::Put { cf: Cf::Index, key, value } = op else { continue };
            if let Some(due) = index::due_time(key) {
                min = Some(min.map_or(due, |m: u64| m.min(due)));
            } else if let Some((line, seq)) = index::parse_line(key) {
                if value.as_slice() == index::WRITTEN_WAITING {
                    waiting.push(line.clone());
                }
                entries.push((line, seq));
            }
        }
        if !entries.is_empty() {
            // No raise passes an entry written until a look sees it: a
            // settle that looked at the line before this write landed
            // would raise the floor over an entry written below what it
            // saw (a hook committed again under the seq it was first
            // logged with). Such an entry below the floor or below one
            // known ahead also brings the floor down to it, and what is
            // known ahead is not all there is. (A floor above it hid the
            // entry from every look for the line's head: a row written
            // waiting there waited for good.)
            let mut lines = self.lines();
            for (line, seq) in entries {
                let room = lines.len() < MAX_LINE_FLOORS;
                match lines.get_mut(&line) {
                    Some(known) => {
                        if known.floor > seq || known.ahead.back().is_some_and(|last| *last > seq) {
                            known.floor = known.floor.min(seq);
                            known.ahead.clear();
                        }
                        known.low = Some(known.low.map_or(seq, |low| low.min(seq)));
                    }
                    // Known from the line's start: nothing of it is hidden.
                    None if room => {
                        lines.insert(line, LineFloor { floor: 0, ahead: VecDeque::new(), low: Some(seq) });
                    }
                    None => {}
                }
            }
        }
        if !waiting.is_empty() {
            self.recheck.lock().unwrap_or_else(|e| e.into_inner()).extend(waiting);
        }
        if let Some(min) = min {
            self.inserted.fetch_min(min, Ordering::AcqRel);
        }
    }

    /// Where a claim starts scanning.
    pub(crate) fn start(&self) -> u64 {
        let inserted = self.inserted.swap(u64::MAX, Ordering::AcqRel);
        let start = self.floor.load(Ordering::Acquire).min(inserted);
        self.floor.store(start, Ordering::Release);
        start
    }

    /// After a claim: nothing live is due before `first_left`.
    pub(crate) fn advance(&self, first_left: u64) {
        let raised = first_left.min(self.inserted.load(Ordering::Acquire));
        self.floor.fetch_max(raised.min(first_left), Ordering::AcqRel);
    }

    /// Forget the floor: due entries may have come back below it (the store
    /// recovered, losing claims that were never synced); line entries too.
    pub(crate) fn reset(&self) {
        self.inserted.store(u64::MAX, Ordering::Release);
        self.floor.store(0, Ordering::Release);
        self.lines.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.walk_lines.store(true, Ordering::Release);
    }

    /// Whether the lines are to be walked, taken.
    pub(crate) fn take_walk(&self) -> bool {
        self.walk_lines.swap(false, Ordering::AcqRel)
    }

    /// A walk of the lines failed: the next claim tries again.
    pub(crate) fn walk_again(&self) {
        self.walk_lines.store(true, Ordering::Release);
    }

    /// Lines whose look failed, to be looked at by the next claim.
    pub(crate) fn recheck_again(&self, lines: Vec<LineId>) {
        self.recheck.lock().unwrap_or_else(|e| e.into_inner()).extend(lines);
    }

    /// The lines to look at again (see `recheck`), taken.
    pub(crate) fn take_recheck(&self) -> Vec<LineId> {
        self.recheck.lock().unwrap_or_else(|e| e.into_inner()).drain().collect()
    }

    fn lines(&self) -> std::sync::MutexGuard<'_, HashMap<LineId, LineFloor>> {
        self.lines.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// No live entry of `line` is below this seq, if known.
    pub(crate) fn line_floor(&self, line: &LineId) -> Option<u64> {
        self.lines().get(line).map(|known| known.floor)
    }

    /// A live entry of `line` is at `seq` (a hook committed again under the
    /// seq it was first logged with): the floor comes down to it, and the
    /// entries known above it are not all there is.
    pub(crate) fn lower_line(&self, line: &LineId, seq: u64) {
        if let Some(known) = self.lines().get_mut(line)
            && known.floor > seq
        {
            known.floor = seq;
            known.ahead.clear();
        }
    }

    /// Whether `seq`, a live entry of `line`, is at or below the line's
    /// floor, and so its head; the floor comes down to it if it was above.
    pub(crate) fn heads_line(&self, line: &LineId, seq: u64) -> bool {
        match self.lines().get_mut(line) {
            Some(known) if known.floor >= seq => {
                if known.floor > seq {
                    known.floor = seq;
                    known.ahead.clear();
                }
                true
            }
            _ => false,
        }
    }

    /// No live entry of each line is below its seq any more (as a look
    /// that began before the latest commits saw it: never past an entry a
    /// commit wrote low since, see `LineFloor::low`).
    pub(crate) fn raise_lines(&self, floors: impl IntoIterator<Item = (LineId, u64)>) {
        let mut lines = self.lines();
        for (line, seq) in floors {
            if lines.len() >= MAX_LINE_FLOORS && !lines.contains_key(&line) {
                lines.clear();
            }
            let known = lines.entry(line).or_insert(LineFloor { floor: seq, ahead: VecDeque::new(), low: None });
            known.floor = known.floor.max(seq).min(known.low.unwrap_or(u64::MAX));
            while known.ahead.front().is_some_and(|next| *next < known.floor) {
                known.ahead.pop_front();
            }
        }
    }

    /// A look for `line`'s head that started at `from` (its floor then)
    /// found `head` first: an entry written low at or above `from` has been
    /// seen (it is the head, or it left), and the floor rises to `head`.
    pub(crate) fn saw_head(&self, line: &LineId, from: Option<u64>, head: u64) {
        if let Some(known) = self.lines().get_mut(line)
            && known.low.is_some_and(|low| from.is_none_or(|from| from <= low))
        {
            known.low = None;
        }
        self.raise_lines([(line.clone(), head)]);
    }

    /// The entries of `line` a walk from its floor read (`seqs`, in order,
    /// the first at the floor): every entry from the floor up to the last
    /// of them, as the store held them. Entries added later have greater
    /// seqs (the writer assigns them in order), except a hook committed
    /// again under an old seq, which lowers the floor and forgets these.
    pub(crate) fn saw_ahead(&self, line: &LineId, from: u64, seqs: &[u64]) {
        if let Some(known) = self.lines().get_mut(line)
            && known.floor == from
        {
            // An entry a commit wrote within what was read and the read
            // did not see (its snapshot came first): what was read is not
            // all there is, and is not kept.
            let missed = known.low.is_some_and(|low| {
                low < from || (seqs.last().is_some_and(|last| *last >= low) && !seqs.contains(&low))
            });
            if !missed {
                known.ahead = seqs.iter().copied().collect();
            }
        }
    }

    /// The first entry of `line` known from its floor on (see `saw_ahead`)
    /// that is not `leaving`: the line's head if its row is live.
    pub(crate) fn next_ahead(&self, line: &LineId, leaving: &HashSet<u64>) -> Option<u64> {
        self.lines().get(line)?.ahead.iter().copied().find(|seq| !leaving.contains(seq))
    }

    /// Where a read of the earliest due row may start.
    pub(crate) fn peek(&self) -> u64 {
        self.floor.load(Ordering::Acquire).min(self.inserted.load(Ordering::Acquire))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line() -> LineId {
        LineId { tenant: "default".into(), source: "orders".into(), sink: 0, key: "k".into() }
    }

    /// A hook committed again under an old seq, below what the line's floor
    /// says: the floor comes down to it, so a look for the line's head
    /// finds it, and the line is looked at again.
    #[test]
    fn a_line_entry_written_below_the_floor_lowers_it() {
        let floor = DueFloor::default();
        floor.raise_lines([(line(), 40)]);
        floor.saw_ahead(&line(), 40, &[40, 41]);
        let mut batch = Batch::new();
        batch.put(Cf::Index, index::line(&line(), 12), index::WRITTEN_WAITING.to_vec());
        floor.note(&batch);
        assert_eq!(floor.line_floor(&line()), Some(12));
        assert_eq!(floor.next_ahead(&line(), &HashSet::new()), None, "what was known ahead is forgotten");
        assert_eq!(floor.take_recheck(), vec![line()]);
    }

    /// A settle that looked at the line before a commit wrote an entry low
    /// raises the floor after it: not past that entry, until a look from
    /// at or below it has seen it.
    #[test]
    fn a_raise_from_an_earlier_look_does_not_hide_an_entry_written_low() {
        let floor = DueFloor::default();
        floor.raise_lines([(line(), 40)]);
        let mut batch = Batch::new();
        batch.put(Cf::Index, index::line(&line(), 12), index::WRITTEN_WAITING.to_vec());
        floor.note(&batch);
        floor.raise_lines([(line(), 41)]);
        assert_eq!(floor.line_floor(&line()), Some(12), "the settle's raise stops at the entry");
        floor.saw_head(&line(), Some(40), 41);
        assert_eq!(floor.line_floor(&line()), Some(12), "a look from above it did not see it");
        floor.saw_head(&line(), Some(12), 12);
        floor.raise_lines([(line(), 13)]);
        assert_eq!(floor.line_floor(&line()), Some(13), "seen, it no longer holds the floor down");
    }

    /// A look whose read came before a commit's write, kept after it:
    /// what it read ahead is not kept, as it lacks the entry written.
    #[test]
    fn a_read_ahead_that_missed_an_entry_written_is_not_kept() {
        let floor = DueFloor::default();
        floor.raise_lines([(line(), 10)]);
        let mut batch = Batch::new();
        batch.put(Cf::Index, index::line(&line(), 12), index::WRITTEN_WAITING.to_vec());
        floor.note(&batch);
        floor.saw_ahead(&line(), 10, &[10, 20, 30]);
        assert_eq!(floor.next_ahead(&line(), &HashSet::from([10])), None, "12 was missed: nothing kept");
        floor.saw_ahead(&line(), 10, &[10, 12, 20]);
        assert_eq!(floor.next_ahead(&line(), &HashSet::from([10])), Some(12), "a read that saw it is kept");
    }

    /// A line not known yet becomes known at an entry a commit writes, so
    /// a settle that found the line empty before does not raise past it.
    #[test]
    fn an_unknown_line_is_known_from_an_entry_written() {
        let floor = DueFloor::default();
        let mut batch = Batch::new();
        batch.put(Cf::Index, index::line(&line(), 7), Vec::new());
        floor.note(&batch);
        assert_eq!(floor.line_floor(&line()), Some(0), "looked at from the line's start");
        floor.raise_lines([(line(), 30)]);
        assert_eq!(floor.line_floor(&line()), Some(7));
    }

    /// An entry above the floor (a new hook of the key) leaves it, and
    /// only a waiting one asks for a look again.
    #[test]
    fn a_line_entry_above_the_floor_leaves_it() {
        let floor = DueFloor::default();
        floor.raise_lines([(line(), 40)]);
        let mut batch = Batch::new();
        batch.put(Cf::Index, index::line(&line(), 50), Vec::new());
        floor.note(&batch);
        assert_eq!(floor.line_floor(&line()), Some(40));
        assert!(floor.take_recheck().is_empty());
        floor.raise_lines([(line(), 45)]);
        assert_eq!(floor.line_floor(&line()), Some(45), "a raise below it is not held back");
    }
}
