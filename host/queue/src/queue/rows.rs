//! Delivery rows: one per (hook, sink), in exactly one state, with exactly
//! one index entry for that state.

use super::codec::{CodecError, Reader, Writer};
use crate::error_class::ErrorClass;
use crate::store::keys::index::LineId;
use crate::store::keys::{deliveries, index};

/// Version 2 adds `rows_of_hook`, version 3 `last_failure`, version 4
/// `line`, `previous_dead` and the waiting state; rows of every earlier
/// version are still read.
const VERSION: u8 = 5;

/// A reason is kept on a retrying row up to this many bytes.
pub const MAX_FAILURE_REASON: usize = 1024;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RowState {
    /// Waiting to be claimed at or after `due_at` (unix ms).
    Due { due_at: u64 },
    /// Claimed by dispatch at `claimed_at`.
    Inflight { claimed_at: u64 },
    /// Given up on at `dead_at`.
    Dead { dead_at: u64, reason: String, class: Option<ErrorClass> },
    /// Behind an earlier row of its ordering key: it becomes due when
    /// every row before it in its line is done (or skipped).
    Waiting,
    /// A transform of its binding dropped the hook at `at`, for `reason`:
    /// not delivered, not dead. Kept while its hook has other rows, so the
    /// hook shows it; it goes with the hook's last row.
    Filtered { at: u64, reason: String },
}

/// The ordering key a row of an ordered binding is delivered in line with,
/// and what its death does to the line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    pub key: String,
    /// `on_dead: hold`: a dead row stays at the head of its line, and the
    /// rows behind it wait, until it is replayed or released.
    pub hold: bool,
}

/// What a dead index entry tells about its row, so that DLQ filters on
/// source, sink and class pass over rows that do not match without reading
/// them. Entries written before summaries existed are empty, and those of
/// the first version carry no sink name: their rows are read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadSummary {
    pub source: String,
    pub class: Option<ErrorClass>,
    /// The sink's name (`None` in a first-version entry).
    pub sink: Option<String>,
}

const SUMMARY_VERSION: u8 = 2;

impl DeadSummary {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(24 + self.source.len());
        w.u8(SUMMARY_VERSION)
            .str(&self.source)
            .opt_str(self.class.map(ErrorClass::as_str))
            .opt_str(self.sink.as_deref());
        w.finish()
    }

    /// `None` for an empty (older) entry or one this version cannot read;
    /// either way the caller falls back to the row itself.
    pub fn decode(bytes: &[u8]) -> Option<DeadSummary> {
        let (&version, _) = bytes.split_first()?;
        let mut r = Reader::new(bytes, "dead index entry");
        r.version(version.clamp(1, SUMMARY_VERSION)).ok()?;
        let source = r.string("source").ok()?;
        let class = match r.opt_string("error class").ok()? {
            Some(class) => Some(class.parse::<ErrorClass>().ok()?),
            None => None,
        };
        let sink = if version >= 2 { r.opt_string("sink").ok()? } else { None };
        r.end().ok()?;
        Some(DeadSummary { source, class, sink })
    }
}

/// Why a row's last attempt failed, kept while it is retrying, so an
/// operator sees why a hook waits before it is dead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LastFailure {
    pub class: ErrorClass,
    /// Cut to [`MAX_FAILURE_REASON`] bytes.
    pub reason: String,
    /// When the attempt failed, unix ms.
    pub at: u64,
}

impl LastFailure {
    pub fn new(class: ErrorClass, reason: &str, at: u64) -> LastFailure {
        let mut end = reason.len().min(MAX_FAILURE_REASON);
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        LastFailure { class, reason: reason[..end].to_string(), at }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeliveryRow {
    pub seq: u64,
    /// The sink's index within its source.
    pub sink: u16,
    pub tenant: String,
    pub source: String,
    /// The name of the sink bound at this index when the hook was acked
    /// (a reloaded component keeps its name, so its rows still deliver).
    pub sink_name: String,
    /// The hook's stored size (counted once per row).
    pub bytes: u64,
    pub attempts: u32,
    pub replay_id: Option<String>,
    pub state: RowState,
    /// How many rows its hook was stored with (0: not known, a row of the
    /// first version). A stored hook never gains rows, so the row of a hook
    /// stored with one is its last: completing it needs no look for others.
    pub rows_of_hook: u16,
    /// The last failed attempt's class and reason (none before the first
    /// failure, nor after a replay revives the row).
    pub last_failure: Option<LastFailure>,
    /// Its line, when its binding delivers in order.
    pub line: Option<Line>,
    /// The id of the hook dead and skipped just before it in its line.
    pub previous_dead: Option<String>,
}

impl DeliveryRow {
    pub fn key(&self) -> Vec<u8> {
        deliveries::row(self.seq, self.sink)
    }

    /// The row's entry in its tenant's owner index (kept in every state).
    pub fn owner_key(&self) -> Vec<u8> {
        index::owner(&self.tenant, self.seq, self.sink)
    }

    /// The line this row is in, if its binding delivers in order.
    pub fn line_id(&self) -> Option<LineId> {
        self.line.as_ref().map(|line| LineId {
            tenant: self.tenant.clone(),
            source: self.source.clone(),
            sink: self.sink,
            key: line.key.clone(),
        })
    }

    /// Whether the row holds a place in its line: every unfinished row of
    /// an ordered binding does, and a dead one only where its line holds.
    pub fn in_line(&self) -> bool {
        match (&self.line, &self.state) {
            (None, _) => false,
            (Some(line), RowState::Dead { .. }) => line.hold,
            (Some(_), RowState::Filtered { .. }) => false,
            (Some(_), _) => true,
        }
    }

    /// The index entries (key and value) this row has in its current state:
    /// one state entry (a waiting row has none: it is found by its line),
    /// the by-tenant entry of a dead row, and its line entries. Dead
    /// entries carry a [`DeadSummary`], a held line its head's seq; the
    /// others are empty.
    pub fn index_entries(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut entries = match &self.state {
            RowState::Due { due_at } => vec![(index::due(*due_at, self.seq, self.sink), Vec::new())],
            RowState::Inflight { .. } => vec![(index::inflight(self.seq, self.sink), Vec::new())],
            RowState::Waiting | RowState::Filtered { .. } => Vec::new(),
            RowState::Dead { dead_at, class, .. } => {
                let summary =
                    DeadSummary { source: self.source.clone(), class: *class, sink: Some(self.sink_name.clone()) }
                        .encode();
                vec![
                    (index::dead(*dead_at, self.seq, self.sink), summary.clone()),
                    (index::dead_by_tenant(&self.tenant, *dead_at, self.seq, self.sink), summary),
                ]
            }
        };
        if let Some(line) = self.line_id().filter(|_| self.in_line()) {
            entries.push((index::line(&line, self.seq), Vec::new()));
            if matches!(self.state, RowState::Dead { .. }) {
                entries.push((index::held(&line), self.seq.to_be_bytes().to_vec()));
            }
        }
        entries
    }

    /// The counters that count the row in its state (see `COUNTER_KINDS`).
    pub fn counted_as(&self) -> &'static [&'static str] {
        match &self.state {
            RowState::Due { .. } if self.attempts > 0 => &["pending", "scheduled"],
            RowState::Due { .. } => &["pending"],
            RowState::Waiting => &["pending", "waiting"],
            RowState::Inflight { .. } => &["inflight"],
            RowState::Dead { .. } if self.in_line() => &["dead", "held"],
            RowState::Dead { .. } => &["dead"],
            RowState::Filtered { .. } => &[],
        }
    }

    /// The index keys of [`DeliveryRow::index_entries`].
    pub fn index_keys(&self) -> Vec<Vec<u8>> {
        self.index_entries().into_iter().map(|(key, _)| key).collect()
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(128);
        w.u8(VERSION)
            .str(&self.tenant)
            .str(&self.source)
            .str(&self.sink_name)
            .u64(self.bytes)
            .u32(self.attempts)
            .opt_str(self.replay_id.as_deref());
        match &self.state {
            RowState::Due { due_at } => w.u8(0).u64(*due_at),
            RowState::Inflight { claimed_at } => w.u8(1).u64(*claimed_at),
            RowState::Dead { dead_at, reason, class } => {
                w.u8(2).u64(*dead_at).str(reason).opt_str(class.map(ErrorClass::as_str))
            }
            RowState::Waiting => w.u8(3),
            RowState::Filtered { at, reason } => w.u8(4).u64(*at).str(reason),
        };
        w.u16(self.rows_of_hook);
        match &self.last_failure {
            None => w.u8(0),
            Some(f) => w.u8(1).str(f.class.as_str()).str(&f.reason).u64(f.at),
        };
        match &self.line {
            None => w.u8(0),
            Some(line) => w.u8(if line.hold { 2 } else { 1 }).str(&line.key),
        };
        w.opt_str(self.previous_dead.as_deref());
        w.finish()
    }

    pub fn decode(seq: u64, sink: u16, bytes: &[u8]) -> Result<DeliveryRow, CodecError> {
        let mut r = Reader::new(bytes, "delivery row");
        let version = r.one_of(&[1, 2, 3, 4, VERSION])?;
        let tenant = r.string("tenant")?;
        let source = r.string("source")?;
        let sink_name = r.string("sink name")?;
        let size = r.u64()?;
        let attempts = r.u32()?;
        let replay_id = r.opt_string("replay id")?;
        let state = match r.u8()? {
            0 => RowState::Due { due_at: r.u64()? },
            1 => RowState::Inflight { claimed_at: r.u64()? },
            2 => {
                let dead_at = r.u64()?;
                let reason = r.string("reason")?;
                let class = r
                    .opt_string("error class")?
                    .map(|c| c.parse::<ErrorClass>())
                    .transpose()
                    .map_err(|_| CodecError::Invalid { what: "delivery row", field: "error class" })?;
                RowState::Dead { dead_at, reason, class }
            }
            3 if version >= 4 => RowState::Waiting,
            4 if version >= 5 => RowState::Filtered { at: r.u64()?, reason: r.string("filtered reason")? },
            _ => return Err(CodecError::Invalid { what: "delivery row", field: "state" }),
        };
        let rows_of_hook = if version >= 2 { r.u16()? } else { 0 };
        let last_failure = match version {
            3.. if r.u8()? == 1 => {
                let class = r
                    .string("error class")?
                    .parse::<ErrorClass>()
                    .map_err(|_| CodecError::Invalid { what: "delivery row", field: "error class" })?;
                Some(LastFailure { class, reason: r.string("reason")?, at: r.u64()? })
            }
            _ => None,
        };
        let (line, previous_dead) = match version {
            4.. => {
                let line = match r.u8()? {
                    0 => None,
                    hold @ (1 | 2) => Some(Line { key: r.string("ordering key")?, hold: hold == 2 }),
                    _ => return Err(CodecError::Invalid { what: "delivery row", field: "line" }),
                };
                (line, r.opt_string("previous dead")?)
            }
            _ => (None, None),
        };
        if state == RowState::Waiting && line.is_none() {
            return Err(CodecError::Invalid { what: "delivery row", field: "line" });
        }
        r.end()?;
        Ok(DeliveryRow {
            seq,
            sink,
            tenant,
            source,
            sink_name,
            bytes: size,
            attempts,
            replay_id,
            state,
            rows_of_hook,
            last_failure,
            line,
            previous_dead,
        })
    }
}

/// Encoded delivery rows of a hook committed again: each live row due at
/// `now_ms` (its due index entry is written at the commit's time, and a
/// row must agree with its index entry), and a row already given up on
/// dead as it was. A takeover imports a dead letter dead in the same
/// write, so dispatch never sees it due in between.
pub(crate) fn rows_anew(rows: &[(u16, Vec<u8>)], now_ms: u64) -> Result<Vec<(u16, Vec<u8>)>, super::QueueError> {
    rows.iter()
        .map(|(sink, value)| {
            let row = DeliveryRow::decode(0, *sink, value)
                .map_err(|e| super::QueueError::Corrupt(format!("a handed-over row: {e}")))?;
            if matches!(row.state, RowState::Dead { .. }) {
                return Ok((*sink, value.clone()));
            }
            Ok((*sink, DeliveryRow { state: RowState::Due { due_at: now_ms }, ..row }.encode()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(state: RowState) -> DeliveryRow {
        DeliveryRow {
            seq: 7,
            sink: 2,
            tenant: "acme".into(),
            source: "stripe".into(),
            sink_name: "c9c1".into(),
            bytes: 1024,
            attempts: 3,
            replay_id: Some("r-1".into()),
            state,
            rows_of_hook: 2,
            last_failure: Some(LastFailure::new(ErrorClass::Fault, "wasm trap: unreachable", 9)),
            line: None,
            previous_dead: None,
        }
    }

    #[test]
    fn rows_of_earlier_versions_are_read_without_what_they_lacked() {
        let current = DeliveryRow { last_failure: None, ..row(RowState::Due { due_at: 10 }) };
        let mut fourth = current.encode();
        fourth[0] = 4;
        assert_eq!(DeliveryRow::decode(7, 2, &fourth), Ok(current.clone()), "the fifth version only added a state");
        let mut filtered = row(RowState::Filtered { at: 1, reason: "r".into() }).encode();
        filtered[0] = 4;
        assert!(DeliveryRow::decode(7, 2, &filtered).is_err(), "no fourth-version row was filtered");
        let mut second = current.encode();
        // The fourth version's line (none) and previous dead (none).
        second.truncate(second.len() - 2);
        let mut third = second.clone();
        third[0] = 3;
        assert_eq!(DeliveryRow::decode(7, 2, &third), Ok(current.clone()));
        second[0] = 2;
        second.truncate(second.len() - 1);
        assert_eq!(DeliveryRow::decode(7, 2, &second), Ok(current.clone()));
        let mut first = second;
        first[0] = 1;
        first.truncate(first.len() - 2);
        assert_eq!(DeliveryRow::decode(7, 2, &first), Ok(DeliveryRow { rows_of_hook: 0, ..current }));
    }

    #[test]
    fn a_long_reason_is_cut_on_a_character_boundary() {
        let reason = "é".repeat(MAX_FAILURE_REASON);
        let kept = LastFailure::new(ErrorClass::Transient, &reason, 1).reason;
        assert!(kept.len() <= MAX_FAILURE_REASON && kept.len() >= MAX_FAILURE_REASON - 1, "{}", kept.len());
        assert!(reason.starts_with(&kept));
    }

    #[test]
    fn rows_round_trip_in_every_state() {
        for state in [
            RowState::Due { due_at: 10 },
            RowState::Inflight { claimed_at: 11 },
            RowState::Dead {
                dead_at: 12,
                reason: "destination answered 410".into(),
                class: Some(ErrorClass::Permanent),
            },
            RowState::Dead { dead_at: 13, reason: "legacy".into(), class: None },
            RowState::Waiting,
            RowState::Filtered { at: 14, reason: "keep: /type equals \"paid\" does not hold".into() },
        ] {
            let r = DeliveryRow { line: Some(Line { key: "customer-9".into(), hold: true }), ..row(state) };
            assert_eq!(DeliveryRow::decode(7, 2, &r.encode()), Ok(r.clone()));
            let skipping = DeliveryRow {
                line: Some(Line { key: String::new(), hold: false }),
                previous_dead: Some("0190-dead".into()),
                ..r
            };
            assert_eq!(DeliveryRow::decode(7, 2, &skipping.encode()), Ok(skipping.clone()));
        }
        let unordered_waiting = row(RowState::Waiting).encode();
        assert!(DeliveryRow::decode(7, 2, &unordered_waiting).is_err(), "a waiting row is always in a line");
    }

    #[test]
    fn a_row_holds_its_place_in_line_until_done_and_dead_only_where_the_line_holds() {
        let line = |hold| Some(Line { key: "k".into(), hold });
        let places = |row: DeliveryRow| {
            let keys = row.index_keys();
            (keys.iter().filter(|k| k[0] == index::LINE).count(), keys.iter().filter(|k| k[0] == index::HELD).count())
        };
        for state in [RowState::Due { due_at: 1 }, RowState::Inflight { claimed_at: 1 }, RowState::Waiting] {
            assert_eq!(places(DeliveryRow { line: line(false), ..row(state.clone()) }), (1, 0), "{state:?}");
            assert_eq!(places(row(state.clone())).0, 0, "unordered: {state:?}");
        }
        let dead = RowState::Dead { dead_at: 5, reason: "gone".into(), class: None };
        assert_eq!(places(DeliveryRow { line: line(false), ..row(dead.clone()) }), (0, 0), "skip: out of line");
        assert_eq!(places(DeliveryRow { line: line(true), ..row(dead) }), (1, 1), "hold: the line is held");
        assert!(DeliveryRow { line: line(true), ..row(RowState::Waiting) }.index_keys().len() == 1, "only its line");
    }

    #[test]
    fn each_state_has_its_own_index_entries() {
        assert_eq!(row(RowState::Due { due_at: 5 }).index_keys().len(), 1);
        assert_eq!(row(RowState::Inflight { claimed_at: 5 }).index_keys()[0][0], index::INFLIGHT);
        let dead = row(RowState::Dead { dead_at: 5, reason: String::new(), class: None }).index_keys();
        assert_eq!((dead.len(), dead[0][0], dead[1][0]), (2, index::DEAD, index::DEAD_BY_TENANT));
        assert_eq!(deliveries::parse(&row(RowState::Due { due_at: 5 }).key()), Some((7, 2)));
    }

    #[test]
    fn dead_entries_summarize_their_row() {
        let dead = row(RowState::Dead { dead_at: 5, reason: "gone".into(), class: Some(ErrorClass::Permanent) });
        let expected = DeadSummary {
            source: "stripe".into(),
            class: Some(ErrorClass::Permanent),
            sink: Some(dead.sink_name.clone()),
        };
        for (_, value) in dead.index_entries() {
            assert_eq!(DeadSummary::decode(&value), Some(expected.clone()));
        }
        let unclassed = DeadSummary { source: "s".into(), class: None, sink: None };
        assert_eq!(DeadSummary::decode(&unclassed.encode()), Some(unclassed));
        // A first-version entry names no sink.
        let mut first = Writer::with_capacity(16);
        first.u8(1).str("stripe").opt_str(Some("gone"));
        let first = DeadSummary::decode(&first.finish());
        assert_eq!(first, Some(DeadSummary { source: "stripe".into(), class: Some(ErrorClass::Gone), sink: None }));
        // Older entries are empty; a damaged one is not trusted either.
        assert_eq!(DeadSummary::decode(&[]), None);
        assert_eq!(DeadSummary::decode(&[SUMMARY_VERSION, 0xff]), None);
        assert!(row(RowState::Due { due_at: 5 }).index_entries().iter().all(|(_, v)| v.is_empty()));
    }
}
