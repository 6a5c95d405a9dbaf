//! Pages of the dead-letter queue, newest first, in bounded work.
//!
//! A call examines at most [`MAX_EXAMINED`] dead keys, whatever the DLQ
//! holds: a filter that matches little gives a short (or empty) page with
//! a cursor to continue from. Cursors are opaque and authenticated with an
//! HMAC under a key kept in the store, so a cursor this node did not issue
//! is `invalid_cursor`, never a scan from an arbitrary place.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::hmac;
use subtle::ConstantTimeEq;

use super::envelope::Envelope;
use super::rows::{DeadSummary, DeliveryRow, RowState};
use super::{DeadLetters, QueueError};
use crate::error_class::ErrorClass;
use crate::store::keys::index::{self, DeadPosition as Position};
use crate::store::keys::{deliveries, hooks, meta, prefix_end};
use crate::store::{Batch, Cf, Durability, Scan, StoreError};

/// The most dead keys one call examines.
pub const MAX_EXAMINED: usize = 10_000;
const MAC_BYTES: usize = 16;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadQuery {
    pub limit: usize,
    pub cursor: Option<String>,
    pub source_id: Option<String>,
    /// Only rows dead at or after this unix-ms time.
    pub since: Option<u64>,
    pub sink: Option<SinkSelector>,
    pub error_class: Option<ErrorClass>,
    /// Only these tenants' rows, read from the by-tenant index.
    pub tenants: Option<Vec<String>>,
}

/// Which sink's dead rows: by its name, as a person names it, or by its
/// index within the source (what replay jobs stored before names were kept
/// say).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
pub enum SinkSelector {
    Index(u16),
    Name(String),
}

impl std::fmt::Display for SinkSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SinkSelector::Index(index) => write!(f, "#{index}"),
            SinkSelector::Name(name) => f.write_str(name),
        }
    }
}

impl SinkSelector {
    /// Whether a row at sink `index`, named `name` where that is known,
    /// could be this sink's.
    fn could_be(&self, index: u16, name: Option<&str>) -> bool {
        match self {
            SinkSelector::Index(wanted) => *wanted == index,
            SinkSelector::Name(wanted) => name.is_none_or(|name| name == wanted),
        }
    }
}

impl DeadQuery {
    /// Whether a dead row of this source, sink and class passes the filters
    /// (`since` is checked on the index key).
    fn admits(&self, source: &str, sink: (u16, Option<&str>), class: Option<ErrorClass>) -> bool {
        self.source_id.as_deref().is_none_or(|s| s == source)
            && self.sink.as_ref().is_none_or(|s| s.could_be(sink.0, sink.1))
            && self.error_class.is_none_or(|c| Some(c) == class)
    }
}

impl Default for DeadQuery {
    fn default() -> Self {
        DeadQuery {
            limit: 50,
            cursor: None,
            source_id: None,
            since: None,
            sink: None,
            error_class: None,
            tenants: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadEntry {
    pub envelope: Envelope,
    pub reason: String,
    /// When the row died (unix ms).
    pub at: u64,
    pub sink: u16,
    /// The sink's name (bound at this index when the hook was acked).
    pub sink_name: String,
    pub error_class: Option<ErrorClass>,
    pub attempts: u32,
    /// The hook is damaged in the store: `envelope` holds only what the
    /// row knows (seq, source, tenant).
    pub unreadable: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadPage {
    /// From counters (no filter but tenants), exact (a filtered scan that
    /// reached the end within this page, without a cursor), or unknown.
    pub total: Option<u64>,
    pub entries: Vec<DeadEntry>,
    pub next_cursor: Option<String>,
    /// Dead keys this call examined (never more than [`MAX_EXAMINED`]).
    pub examined: usize,
}

/// A dead index entry: where it is (compared descending), and what it
/// says about its row.
type Candidate = (Position, Option<DeadSummary>);

fn position_suffix(p: Position) -> Vec<u8> {
    index::position(p.0, p.1, p.2)
}

impl DeadLetters {
    fn cursor_key(&self) -> Result<Vec<u8>, QueueError> {
        let _serial = self.transitions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(key) = self.store.get(Cf::Meta, meta::DLQ_CURSOR_KEY)? {
            return Ok(key);
        }
        let mut key = vec![0u8; 32];
        getrandom::getrandom(&mut key).map_err(|e| QueueError::Os(format!("no randomness for the cursor key: {e}")))?;
        let mut batch = Batch::new();
        batch.put(Cf::Meta, meta::DLQ_CURSOR_KEY.to_vec(), key.clone());
        self.store.write(&batch, Durability::Synced)?;
        Ok(key)
    }

    /// The cursor's tag: HMAC-SHA256 of `payload`, cut to `MAC_BYTES`.
    fn sign(key: &[u8], payload: &[u8]) -> Vec<u8> {
        let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), payload);
        tag.as_ref()[..MAC_BYTES].to_vec()
    }

    fn issue_cursor(&self, at: Position) -> Result<String, QueueError> {
        let mut token = position_suffix(at);
        token.extend(Self::sign(&self.cursor_key()?, &token));
        Ok(URL_SAFE_NO_PAD.encode(token))
    }

    /// A cursor that starts a walk of the DLQ at rows dead before `at_ms`
    /// (a replay job pins its upper bound when it starts, so rows that die
    /// again during the job are not visited twice).
    pub fn dead_cursor_before(&self, at_ms: u64) -> Result<String, QueueError> {
        self.issue_cursor((at_ms, 0, 0))
    }

    fn open_cursor(&self, cursor: &str) -> Result<Position, QueueError> {
        let token = URL_SAFE_NO_PAD.decode(cursor).map_err(|_| QueueError::InvalidCursor)?;
        if token.len() != 18 + MAC_BYTES {
            return Err(QueueError::InvalidCursor);
        }
        let (payload, tag) = token.split_at(18);
        if !bool::from(Self::sign(&self.cursor_key()?, payload).ct_eq(tag)) {
            return Err(QueueError::InvalidCursor);
        }
        index::parse_position(payload).ok_or(QueueError::InvalidCursor)
    }

    /// One page of the DLQ, newest first.
    pub fn dead(&self, query: &DeadQuery) -> Result<DeadPage, QueueError> {
        let below = query.cursor.as_deref().map(|c| self.open_cursor(c)).transpose()?;
        let limit = query.limit.max(1);
        let filtered =
            query.source_id.is_some() || query.since.is_some() || query.sink.is_some() || query.error_class.is_some();
        // Without a filter every key is a match: a page needs `limit` of
        // them, and one more tells whether another page follows.
        let budget = |share: usize| if filtered { share } else { share.min(limit + 1) };
        // Candidate positions, newest first, and the oldest position up to
        // which the candidates are complete (None: complete to the end).
        // A tenant named twice is one tenant: its rows list (and count) once.
        let tenants = query.tenants.clone().map(|mut tenants| {
            tenants.sort();
            tenants.dedup();
            tenants
        });
        if tenants.as_ref().is_some_and(|t| t.len() > MAX_EXAMINED) {
            return Err(QueueError::TooManyTenants { max: MAX_EXAMINED });
        }
        let (candidates, complete_to, examined) = match &tenants {
            None => self.scan_dead(&index::dead_prefix(), below, budget(MAX_EXAMINED))?,
            Some(tenants) => {
                // Every tenant gets a share of the budget, at least one key.
                let budget = budget(MAX_EXAMINED / tenants.len().max(1));
                let mut all = Vec::new();
                let mut complete_to: Option<Position> = None;
                let mut examined = 0;
                for tenant in tenants {
                    let prefix = index::dead_by_tenant_prefix(tenant);
                    let (found, stop, n) = self.scan_dead(&prefix, below, budget)?;
                    all.extend(found);
                    examined += n;
                    if let Some(stop) = stop {
                        complete_to = Some(complete_to.map_or(stop, |c| c.max(stop)));
                    }
                }
                all.sort_unstable_by_key(|(position, _)| std::cmp::Reverse(*position));
                // Past the newest place a tenant's scan stopped, another
                // tenant's rows may be missing: the page ends there.
                if let Some(stop) = complete_to {
                    all.retain(|(p, _)| *p >= stop);
                }
                (all, complete_to, examined)
            }
        };

        let mut entries = Vec::new();
        let mut last: Option<Position> = None;
        let mut reached_since = false;
        // A candidate past a full page that could match: another page
        // follows. Past a full page only what the index entries say is
        // checked (an entry without a summary could match).
        let mut more = false;
        for (position, summary) in candidates {
            if query.since.is_some_and(|since| position.0 < since) {
                reached_since = true;
                break;
            }
            let (at, seq, sink) = position;
            let could_match = match &summary {
                Some(s) => query.admits(&s.source, (sink, s.sink.as_deref()), s.class),
                None => query.sink.as_ref().is_none_or(|s| s.could_be(sink, None)),
            };
            if entries.len() == limit {
                if could_match {
                    more = true;
                    break;
                }
                continue;
            }
            last = Some(position);
            if !could_match {
                continue;
            }
            let Some(row) = self.row_for_dlq(seq, sink)? else { continue };
            let RowState::Dead { reason, class, .. } = &row.state else { continue };
            if !query.admits(&row.source, (sink, Some(&row.sink_name)), *class) {
                continue;
            }
            let Some((envelope, unreadable)) = self.hook_for_dlq(&row)? else { continue };
            entries.push(DeadEntry {
                envelope,
                reason: reason.clone(),
                at,
                sink,
                sink_name: row.sink_name.clone(),
                error_class: *class,
                attempts: row.attempts,
                unreadable,
            });
        }
        // The scan reached the end of what matches: no row left unexamined
        // (or every one left is older than `since`), and none examined past
        // the page could match.
        let exhausted = !more && (complete_to.is_none() || reached_since);
        let next_cursor = match (exhausted, last.or(complete_to)) {
            (false, Some(at)) => Some(self.issue_cursor(at)?),
            _ => None,
        };
        let total = if !filtered {
            let counted = match &tenants {
                None => self.count(None, "dead")?,
                Some(tenants) => tenants.iter().map(|t| self.count(Some(t), "dead")).sum::<Result<i64, _>>()?,
            };
            Some(counted.max(0) as u64)
        } else if exhausted && below.is_none() {
            Some(entries.len() as u64)
        } else {
            None
        };
        Ok(DeadPage { total, entries, next_cursor, examined })
    }

    /// Scan dead positions under `prefix` (a dead index, or one tenant's
    /// range) below `below`, newest first, examining at most `budget` keys.
    /// Returns the positions, where the scan stopped short (None: it
    /// reached the end), and how many keys it examined.
    fn scan_dead(
        &self,
        prefix: &[u8],
        below: Option<Position>,
        budget: usize,
    ) -> Result<(Vec<Candidate>, Option<Position>, usize), QueueError> {
        let to = match below {
            Some(p) => Some([prefix, &position_suffix(p)].concat()),
            None => prefix_end(prefix),
        };
        let rows = self.store.scan(&Scan { cf: Cf::Index, from: prefix.to_vec(), to, reverse: true, limit: budget })?;
        let examined = rows.len();
        let mut positions = Vec::with_capacity(examined);
        for (key, value) in &rows {
            match index::parse_dead(key) {
                Some(position) => positions.push((position, DeadSummary::decode(value))),
                None => tracing::warn!(key = hex::encode(key), "malformed dead index key; skipped"),
            }
        }
        let stopped = (examined == budget).then(|| positions.last().map(|(p, _)| *p)).flatten();
        Ok((positions, stopped, examined))
    }

    fn row_for_dlq(&self, seq: u64, sink: u16) -> Result<Option<DeliveryRow>, QueueError> {
        let Some(bytes) = self.store.get(Cf::Deliveries, &deliveries::row(seq, sink))? else {
            tracing::warn!(seq, sink, "dead index entry without its row; skipped");
            return Ok(None);
        };
        match DeliveryRow::decode(seq, sink, &bytes) {
            Ok(row) => Ok(Some(row)),
            Err(e) => {
                tracing::warn!(seq, sink, "dead row does not decode ({e}); skipped");
                Ok(None)
            }
        }
    }

    /// The hook of a dead row, and whether it is unreadable (damaged in the
    /// store, or lost to a repair of it: listed with what its row knows,
    /// so the operator sees it; the store told the damage once already).
    fn hook_for_dlq(&self, row: &DeliveryRow) -> Result<Option<(Envelope, bool)>, QueueError> {
        let seq = row.seq;
        let damaged = |e: &dyn std::fmt::Display| {
            tracing::debug!(seq, "the hook of a dead row is unreadable: {e}");
            let mut stub = Envelope::new(String::new(), row.source.clone(), row.tenant.clone(), 0, Vec::new());
            stub.seq = seq;
            Ok(Some((stub, true)))
        };
        let bytes = match self.store.get(Cf::Hooks, &hooks::hook(seq)) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => return damaged(&"it is not in the store"),
            Err(e @ StoreError::Corruption { .. }) => return damaged(&e),
            Err(e) => return Err(e.into()),
        };
        match Envelope::decode(seq, &bytes) {
            Ok(envelope) => Ok(Some((envelope, false))),
            Err(e) => damaged(&e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::{Entry, Queue, QueueConfig};

    /// Dead rows of sources `stripe`, `github`, `stripe` (seqs 1, 2, 3);
    /// seq 3 died `permanent`, the others `transient`.
    async fn three_dead(dir: &std::path::Path) -> Queue {
        let queue = Queue::open(dir, QueueConfig::default()).expect("open");
        let entries = ["stripe", "github", "stripe"]
            .into_iter()
            .enumerate()
            .map(|(i, source)| {
                Entry::new(
                    Envelope::new(format!("h{i}"), source.into(), "acme".into(), 1_000, b"{}".to_vec()),
                    vec![(0, "sha".into())],
                )
            })
            .collect();
        queue.intake().enqueue(entries, None).await.expect("enqueue");
        for row in queue.deliveries().claim_due(u64::MAX / 4, 10).expect("claim") {
            let class = if row.seq == 3 { ErrorClass::Permanent } else { ErrorClass::Transient };
            queue.deliveries().bury(row.seq, row.sink, 2_000 + row.seq, "gave up", class).expect("bury");
        }
        queue
    }

    fn seqs(queue: &Queue, query: DeadQuery) -> Vec<u64> {
        queue.dead_letters().dead(&query).expect("page").entries.iter().map(|e| e.envelope.seq).collect()
    }

    fn check_filters(queue: &Queue) {
        assert_eq!(seqs(queue, DeadQuery { source_id: Some("stripe".into()), ..DeadQuery::default() }), [3, 1]);
        assert_eq!(seqs(queue, DeadQuery { source_id: Some("github".into()), ..DeadQuery::default() }), [2]);
        let permanent = DeadQuery { error_class: Some(ErrorClass::Permanent), ..DeadQuery::default() };
        assert_eq!(seqs(queue, permanent), [3]);
        let both = DeadQuery {
            source_id: Some("stripe".into()),
            error_class: Some(ErrorClass::Transient),
            tenants: Some(vec!["acme".into()]),
            ..DeadQuery::default()
        };
        assert_eq!(seqs(queue, both), [1]);
    }

    #[tokio::test]
    async fn filters_read_the_summary_on_the_index_entry() {
        let dir = tempfile::tempdir().expect("temp dir");
        let queue = three_dead(dir.path()).await;
        let entries = queue.store.scan(&Scan::prefix(Cf::Index, &index::dead_prefix(), 10)).expect("scan");
        assert_eq!(entries.len(), 3);
        assert!(entries.iter().all(|(_, value)| DeadSummary::decode(value).is_some()), "every dead entry summarized");
        check_filters(&queue);
    }

    #[tokio::test]
    async fn entries_without_a_summary_are_filtered_by_their_row() {
        let dir = tempfile::tempdir().expect("temp dir");
        let queue = three_dead(dir.path()).await;
        // As a store written before summaries existed: every entry empty.
        let mut batch = Batch::new();
        for prefix in [index::dead_prefix(), index::dead_by_tenant_prefix("acme")] {
            for (key, _) in queue.store.scan(&Scan::prefix(Cf::Index, &prefix, 10)).expect("scan") {
                batch.put(Cf::Index, key, Vec::new());
            }
        }
        queue.store.write(&batch, Durability::Synced).expect("write");
        check_filters(&queue);
    }
}
