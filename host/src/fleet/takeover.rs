//! Takeover: a live node commits a lapsed node's undelivered hooks into its
//! own store (and so its own subject), and its dead letters into its DLQ.
//!
//! The claim is `taken.<node>` in the bucket, written by create (no record
//! yet) or compare-and-set on the revision read (a record of an earlier
//! takeover, or a running one whose taker lapsed): exactly one node wins.
//! It names the positions of the node's hook subject taken, `from..=through`
//! (through: the subject's last message when claimed). Each hook is
//! committed under the message id `import.<node>.<position>`, so a takeover
//! run again after its taker died commits nothing twice.
//!
//! What a takeover can deliver twice: rows the lapsed node delivered whose
//! outcomes it had not yet published (at most `outcomes::Publisher::allowed_age`
//! of deliveries plus those in flight when it died).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use super::lease::{Taken, TakenState, taken_key};
use super::outcomes::{self, Outcomes};
use super::{Fleet, FleetError};
use crate::error_class::ErrorClass;
use crate::intake::{BodyError, Read, SubjectReader, logged_by, stream_identity};
use crate::queue::{
    DeliveryRow, EntryOutcome, Envelope, FinalOutcome, Handover, Imported, QueueError, RowState, handoff, now_ms,
};
use crate::store::Store;

/// Hooks committed per import call.
const IMPORT_BATCH: usize = 256;

/// What a takeover moved.
#[derive(Default)]
struct Moved {
    imported: u64,
    delivered: u64,
    dead_letters: u64,
    through_seqs: BTreeMap<String, u64>,
    /// Per store: the seqs of the hooks read.
    read: BTreeMap<String, Vec<u64>>,
}

impl Moved {
    /// The seqs read, per store, as inclusive ranges in order.
    fn read_ranges(&mut self) -> BTreeMap<String, Vec<(u64, u64)>> {
        std::mem::take(&mut self.read).into_iter().map(|(store, seqs)| (store, ranges(seqs))).collect()
    }
}

/// What takeovers of a node read, carried from one record to the next: a
/// node that comes back settles with the last record only, so each names
/// every hook read since (ranges of one store join up as seqs go on), and
/// the highest seq per store.
fn carry(into: &mut Taken, from: &Taken) {
    super::abandoned::carry_abandoned(&mut into.abandoned, &from.abandoned);
    into.quarantined += from.quarantined;
    add_read(into, &from.read_seqs, &from.through_seqs);
}

/// Add the seq ranges read and the highest seqs, per store, to `into`'s.
fn add_read(into: &mut Taken, read_seqs: &BTreeMap<String, Vec<(u64, u64)>>, through_seqs: &BTreeMap<String, u64>) {
    for (store, ranges_read) in read_seqs {
        let seqs = into.read_seqs.entry(store.clone()).or_default();
        seqs.extend_from_slice(ranges_read);
        *seqs = join(std::mem::take(seqs));
    }
    for (store, through) in through_seqs {
        let best = into.through_seqs.entry(store.clone()).or_insert(0);
        *best = (*best).max(*through);
    }
}

/// `claim`, its run ended: done, with what it moved and read.
fn finished(claim: Taken, mut moved: Moved) -> Taken {
    let mut done = Taken {
        state: TakenState::Done,
        done_ms: Some(now_ms()),
        imported: moved.imported,
        delivered: moved.delivered,
        dead_letters: moved.dead_letters,
        ..claim
    };
    add_read(&mut done, &moved.read_ranges(), &moved.through_seqs);
    done
}

/// Inclusive ranges, sorted and joined where they touch or overlap.
fn join(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable();
    let mut joined: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (start, end) in ranges {
        match joined.last_mut() {
            Some((_, last)) if start <= last.saturating_add(1) => *last = (*last).max(end),
            _ => joined.push((start, end)),
        }
    }
    joined
}

/// Whether `seq` is in one of `ranges` (inclusive, in order).
fn in_ranges(ranges: Option<&Vec<(u64, u64)>>, seq: u64) -> bool {
    let Some(ranges) = ranges else { return false };
    let after = ranges.partition_point(|(start, _)| *start <= seq);
    after > 0 && ranges[after - 1].1 >= seq
}

/// `seqs` as inclusive ranges of consecutive seqs, in order.
pub(super) fn ranges(mut seqs: Vec<u64>) -> Vec<(u64, u64)> {
    seqs.sort_unstable();
    seqs.dedup();
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    for seq in seqs {
        match ranges.last_mut() {
            Some((_, end)) if end.checked_add(1) == Some(seq) => *end = seq,
            _ => ranges.push((seq, seq)),
        }
    }
    ranges
}

impl Fleet {
    /// The last position of `subject` in the stream (0: none).
    async fn last_position(&self, subject: &str) -> Result<u64, FleetError> {
        crate::intake::last_position(&self.connection.stream, subject).await.map_err(FleetError::Nats)
    }

    /// The stream's identity now (read afresh: it may have been deleted
    /// and made again since this node connected).
    async fn stream_now(&self) -> Result<String, FleetError> {
        let stream = self
            .connection
            .context
            .get_stream(&self.settings.stream)
            .await
            .map_err(|e| FleetError::Nats(format!("reading stream {}: {e}", self.settings.stream)))?;
        Ok(stream_identity(stream.cached_info()))
    }

    /// Reads `subject` at `from..=through` (see `intake::Read`).
    pub(super) async fn reader(
        &self,
        read: Read,
        subject: &str,
        from: u64,
        through: u64,
    ) -> Result<SubjectReader, FleetError> {
        SubjectReader::open(read, &self.connection.stream, subject, from, through, self.settings.publish_timeout)
            .await
            .map_err(FleetError::Nats)
    }

    /// Claim `node` if its hooks need taking: create the record, or swap
    /// it at the revision read. `None`: nothing to take, or another node
    /// holds the claim.
    async fn claim(&self, node: &str) -> Result<Option<(Taken, u64)>, FleetError> {
        let key = taken_key(node);
        let stream = self.stream_now().await?;
        let last = self.last_position(&self.settings.subjects().hooks(node)).await?;
        let previous = self.read::<Taken>(&key).await?;
        // Positions of another stream (this one deleted and made again
        // since) say nothing here: the subject is read from its start.
        let here = |taken: &Taken, position: u64| if taken.of_stream(&stream) { position } else { 1 };
        let from = match &previous {
            None => 1,
            Some((taken, _)) if taken.state == TakenState::Done => here(taken, taken.through + 1),
            // A running takeover whose taker lapsed is run again, whole.
            Some((taken, _)) if !self.seen_alive(&taken.by) || taken.by == self.node() => here(taken, taken.from),
            Some(_) => return Ok(None),
        };
        let settled = previous.as_ref().is_none_or(|(taken, _)| taken.state == TakenState::Done);
        if from > last && settled && !self.pen_owed(node).await? {
            return Ok(None);
        }
        let mut claim = Taken {
            node: node.to_string(),
            by: self.node().to_string(),
            from,
            through: last,
            stream,
            state: TakenState::Running,
            at_ms: now_ms(),
            done_ms: None,
            imported: 0,
            delivered: 0,
            dead_letters: 0,
            quarantined: 0,
            through_seqs: BTreeMap::new(),
            read_seqs: BTreeMap::new(),
            logged_from: self.last_position(&self.settings.subjects().hooks(self.node())).await? + 1,
            abandoned: Vec::new(),
            restored: false,
        };
        if let Some((taken, _)) = &previous
            && taken.of_stream(&claim.stream)
        {
            carry(&mut claim, taken);
        }
        let value = serde_json::to_vec(&claim).map_err(|e| FleetError::Nats(e.to_string()))?.into();
        let bucket = &self.connection.bucket;
        let write = async {
            match &previous {
                None => bucket.create(&key, value).await.map_err(|e| e.to_string()),
                Some((_, revision)) => bucket.update(&key, value, *revision).await.map_err(|e| e.to_string()),
            }
        };
        // An answer lost to a leader election is not waited out: the next
        // turn finds the record this node wrote, or writes it.
        let turn = self.turn();
        let written = tokio::time::timeout(turn, write).await.unwrap_or_else(|_| Err(format!("no answer in {turn:?}")));
        match written {
            Ok(revision) => Ok(Some((claim, revision))),
            Err(e) => {
                tracing::debug!(node, "another node claimed it first: {e}");
                Ok(None)
            }
        }
    }

    /// Whether `node`, unclaimed, has quarantined hooks to carry: a
    /// takeover carries them even with no hook left to take. Its lease
    /// says so as of its last renewal; a hook quarantined after that is
    /// found among the pen's copies, looked at once per lease revision.
    async fn pen_owed(&self, node: &str) -> Result<bool, FleetError> {
        if node == self.node() {
            return Ok(false);
        }
        let Some((lease, revision)) = self.read::<super::Lease>(&super::lease::lease_key(node)).await? else {
            return Ok(false);
        };
        if lease.claimed_by.is_some() {
            return Ok(false);
        }
        if lease.quarantined_bytes > 0 {
            return Ok(true);
        }
        let looked = self.watch.lock().unwrap_or_else(|e| e.into_inner()).pen_empty_at.get(node) == Some(&revision);
        if looked {
            return Ok(false);
        }
        let owed = self.holds_pen_copies(node).await?;
        if !owed {
            self.watch.lock().unwrap_or_else(|e| e.into_inner()).pen_empty_at.insert(node.to_string(), revision);
        }
        Ok(owed)
    }

    /// Take `node`, whose lease this node judged lapsed at `judged`, over
    /// if its hooks need taking: the takeover record is claimed first, then
    /// the lease at the revision judged (see `lease`). A node that renewed
    /// meanwhile (a restart in time) wins the lease; the record is then
    /// closed having taken nothing.
    pub(super) async fn take_over(&self, handover: &Handover, node: &str, judged: u64) -> Result<(), FleetError> {
        let Some((mut claim, revision)) = self.claim(node).await? else { return Ok(()) };
        if !self.claim_lease(node, judged).await? {
            tracing::info!(node, "its lease moved (it renewed in time) or a live peer claims it: not taken over");
            claim.through = claim.from.saturating_sub(1);
            claim.state = TakenState::Done;
            claim.done_ms = Some(now_ms());
            self.update_record(&claim, revision)
                .await?
                .ok_or_else(|| FleetError::Nats(format!("closing the takeover record of {node}: it moved")))?;
            return Ok(());
        }
        tracing::warn!(node, from = claim.from, through = claim.through, "taking over a node whose lease lapsed");
        let moved = self.import_range(handover, node, (claim.from, claim.through), &claim.read_seqs).await?;
        let mut claim = finished(claim, moved);
        let quarantined = self.carry_pen(handover, node).await?;
        claim.quarantined += quarantined;
        let recorded = self
            .update_record(&claim, revision)
            .await?
            .ok_or_else(|| FleetError::Nats(format!("recording the takeover of {node}: the record moved")))?;
        crate::metrics::metrics().fleet_takeovers.inc();
        tracing::warn!(
            node,
            revision = recorded,
            imported = claim.imported,
            delivered_before = claim.delivered,
            dead_letters = claim.dead_letters,
            quarantined,
            took_ms = claim.done_ms.unwrap_or(0).saturating_sub(claim.at_ms),
            "takeover done"
        );
        self.ran.lock().unwrap_or_else(|e| e.into_inner()).push(claim);
        Ok(())
    }

    /// Commit the undelivered hooks of `node`'s subject at positions
    /// `from..=through` into this node's queue. A hook is one store's seq:
    /// a second copy of it in the subject (published again after its
    /// message id left the duplicate window) is passed by, as is one an
    /// earlier takeover read (`read_before`, per store).
    async fn import_range(
        &self,
        handover: &Handover,
        node: &str,
        (from, through): (u64, u64),
        read_before: &BTreeMap<String, Vec<(u64, u64)>>,
    ) -> Result<Moved, FleetError> {
        let mut moved = Moved::default();
        let mut read_now: std::collections::HashSet<(String, u64)> = std::collections::HashSet::new();
        if from > through {
            return Ok(moved);
        }
        let outcomes = self.read_outcomes(node).await?;
        let subject = self.settings.subjects().hooks(node);
        let void = self.void_imports(node).await?;
        let mut reader = self.reader(Read::Exact, &subject, from, through).await?;
        let mut batch = Vec::new();
        while let Some(message) = reader.next().await.map_err(FleetError::Nats)? {
            let position = message.position;
            let (store, seq) = logged_by(&message.headers);
            if let Some(seq) = seq
                && (in_ranges(read_before.get(&store), seq) || !read_now.insert((store.clone(), seq)))
            {
                tracing::warn!(node, position, seq, "a second copy of a hook already read: passed by");
                continue;
            }
            let seq = seq.unwrap_or(0);
            let best = moved.through_seqs.entry(store.clone()).or_insert(0);
            *best = (*best).max(seq);
            // An import of an abandoned run: its node kept that hook.
            if void(&message.headers) {
                moved.read.entry(store.clone()).or_default().push(seq);
                continue;
            }
            let decoded = match self.connection.bodies.payload(&message.headers, &message.payload).await {
                Ok(payload) => handoff::decode(&payload).map_err(|e| (e.to_string(), payload)),
                Err(BodyError::Missing(e)) => Err((e, Vec::new())),
                Err(BodyError::Unavailable(e)) => return Err(FleetError::Nats(e)),
            };
            let mut hook = match decoded {
                Ok(hook) => hook,
                // Not counted as read: its node, back, keeps its own copy
                // (intact in its store) and delivers it.
                Err((reason, bytes)) => {
                    batch.push(undecodable(node, position, bytes, &reason));
                    continue;
                }
            };
            moved.read.entry(store.clone()).or_default().push(seq);
            let settled = outcomes.get(&(store, seq));
            let final_of = |sink: u16| settled.and_then(|s| s.get(&sink));
            hook.rows.retain(|(sink, _)| !matches!(final_of(*sink), Some(FinalOutcome::Delivered)));
            if hook.rows.is_empty() {
                moved.delivered += 1;
                continue;
            }
            // Its dead letters are imported dead, in the same write as
            // its live rows.
            let mut dead = 0;
            for (sink, row) in &mut hook.rows {
                if let Some(FinalOutcome::Dead { dead_at, reason, class, attempts }) = final_of(*sink) {
                    *row = buried(row, *dead_at, reason, *class, *attempts)?;
                    dead += 1;
                }
            }
            let origin = format!("import.{node}.{position}");
            batch.push((Imported { handoff: hook, origin }, dead));
            if batch.len() >= IMPORT_BATCH {
                self.commit_imports(handover, std::mem::take(&mut batch), &mut moved).await?;
            }
        }
        self.commit_imports(handover, batch, &mut moved).await?;
        Ok(moved)
    }

    async fn commit_imports(
        &self,
        handover: &Handover,
        batch: Vec<(Imported, u64)>,
        moved: &mut Moved,
    ) -> Result<(), FleetError> {
        if batch.is_empty() {
            return Ok(());
        }
        let (hooks, dead): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
        let outcomes = handover.import(hooks).await?;
        for (outcome, dead) in outcomes.into_iter().zip(dead) {
            match outcome {
                EntryOutcome::Committed(_) => {
                    moved.imported += 1;
                    moved.dead_letters += dead;
                }
                // Committed by an earlier run of this takeover.
                EntryOutcome::Duplicate(_) => {}
                EntryOutcome::Refused(refusal) => {
                    return Err(FleetError::Nats(format!("committing taken-over hooks: {refusal}")));
                }
            }
        }
        Ok(())
    }

    /// Every outcome `node` published: (store, seq) → sink → the last one.
    pub(super) async fn read_outcomes(
        &self,
        node: &str,
    ) -> Result<HashMap<(String, u64), HashMap<u16, FinalOutcome>>, FleetError> {
        let subject = self.settings.subjects().outcomes(node);
        let mut all: HashMap<(String, u64), HashMap<u16, FinalOutcome>> = HashMap::new();
        let through = self.last_position(&subject).await?;
        let mut reader = self.reader(Read::Batched, &subject, 1, through).await?;
        while let Some(message) = reader.next().await.map_err(FleetError::Nats)? {
            match outcomes::decode(&message.payload) {
                Ok(Outcomes { store, rows }) => {
                    for (seq, sink, outcome) in rows {
                        all.entry((store.clone(), seq)).or_default().insert(sink, outcome);
                    }
                }
                // Lost outcomes cost duplicate deliveries, never a hook.
                Err(e) => {
                    tracing::error!(subject, position = message.position, "published outcomes do not decode: {e}")
                }
            }
        }
        Ok(all)
    }

    /// Settle with the fleet before dispatch starts: drop what a peer took
    /// over while this node was away, and take back this node's own hooks
    /// that its store lacks (a new store: the old one was lost). A peer
    /// that claims this node meanwhile (its lease had lapsed) is waited for.
    pub async fn rejoin(&self, handover: &Handover, store: &dyn Store, fresh_store: bool) -> Result<(), FleetError> {
        let key = taken_key(self.node());
        let mut taken_back = !fresh_store;
        for _ in 0..1200 {
            let record = self.read::<Taken>(&key).await?;
            let seen = record.as_ref().map(|(taken, revision)| (taken.by.clone(), taken.state, *revision));
            match record {
                Some((taken, revision)) if taken.state == TakenState::Running && taken.by != self.node() => {
                    if self.peer_alive(&taken.by).await? {
                        tracing::info!(by = taken.by, "waiting for a peer's takeover of this node to finish");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        continue;
                    }
                    // Its taker lapsed too. Back on its own store, this
                    // node still holds the hooks: it keeps them (see
                    // `abandoned`). A new store runs the takeover again,
                    // below.
                    if !fresh_store {
                        // Closed, or the record moved: read it again.
                        self.close_abandoned(handover, store, &taken, revision).await?;
                        continue;
                    }
                    taken_back = false;
                }
                Some((taken, revision))
                    if taken.state == TakenState::Done
                        && taken.by != self.node()
                        && revision > self.reconciled.load(std::sync::atomic::Ordering::Acquire) =>
                {
                    let own = format!("{:016x}", self.store_id);
                    // Exactly the hooks the peer read; a record from before
                    // names only the highest, and everything at or below
                    // it but what was logged past its range goes.
                    let dropped = match (taken.read_seqs.get(&own), taken.through_seqs.get(&own)) {
                        (Some(ranges), _) => handover.purge_ranges(ranges)?,
                        (None, Some(&through)) if taken.read_seqs.is_empty() => {
                            let keep = self.logged_past(&taken).await?;
                            handover.purge_through(through, &keep)?
                        }
                        _ => 0,
                    };
                    tracing::warn!(
                        by = taken.by,
                        through = taken.through,
                        dropped,
                        "a peer took this node over while it was away; its rows of those hooks are dropped here"
                    );
                    if taken.quarantined > 0 {
                        self.pen_carried_away.store(true, std::sync::atomic::Ordering::Release);
                    }
                    self.set_reconciled(store, revision)?;
                    continue;
                }
                Some((taken, _)) if taken.state == TakenState::Running => taken_back = false,
                _ => {}
            }
            if taken_back {
                let reconciled = self.reconciled.load(std::sync::atomic::Ordering::Acquire);
                tracing::info!(record = ?seen, reconciled, "settled with the takeover record of this node");
                return Ok(());
            }
            // Everything logged since the last takeover is this node's again.
            let Some((claim, revision)) = self.claim(self.node()).await? else {
                // Nothing to take back, unless a peer claimed this node meanwhile.
                match self.read::<Taken>(&key).await? {
                    Some((taken, _)) if taken.state == TakenState::Running => continue,
                    Some((taken, revision))
                        if taken.by != self.node()
                            && revision > self.reconciled.load(std::sync::atomic::Ordering::Acquire) =>
                    {
                        continue;
                    }
                    _ => return Ok(()),
                }
            };
            tracing::warn!(from = claim.from, through = claim.through, "taking back this node's logged hooks");
            let moved = self.import_range(handover, self.node(), (claim.from, claim.through), &claim.read_seqs).await?;
            match self.update_record(&finished(claim, moved), revision).await? {
                Some(revision) => {
                    self.set_reconciled(store, revision)?;
                    taken_back = true;
                }
                // A peer claimed this node meanwhile (this node's lease was
                // not yet renewed, so it looked lapsed): its takeover is
                // waited for and what it took dropped here, like any other.
                // What this run committed was logged under the same message
                // ids the peer's import uses, so nothing is taken twice.
                None => {
                    tracing::warn!("a peer claimed this node while it took its hooks back; waiting for that takeover");
                    taken_back = false;
                }
            }
        }
        Err(FleetError::Nats("gave up waiting for a peer's takeover of this node".into()))
    }

    /// Write `taken` over its node's takeover record at `revision`: the
    /// revision written, or `None` if the record moved since.
    pub(super) async fn update_record(&self, taken: &Taken, revision: u64) -> Result<Option<u64>, FleetError> {
        let value = serde_json::to_vec(taken).map_err(|e| FleetError::Nats(e.to_string()))?.into();
        match self.connection.bucket.update(taken_key(&taken.node), value, revision).await {
            Ok(revision) => {
                self.keep_finished(taken)?;
                Ok(Some(revision))
            }
            Err(e) if e.kind() == async_nats::jetstream::kv::UpdateErrorKind::WrongLastRevision => Ok(None),
            Err(e) => Err(FleetError::Nats(format!("writing the takeover record of {}: {e}", taken.node))),
        }
    }

    /// Seqs of this store's hooks logged past what `taken` took: a seq at
    /// or below its highest may still be this store's alone (a hook
    /// published again after a failed round, landing after the claim), so
    /// dropping what the peer took keeps these.
    async fn logged_past(&self, taken: &Taken) -> Result<std::collections::HashSet<u64>, FleetError> {
        let subject = self.settings.subjects().hooks(self.node());
        let from = if taken.of_stream(&self.stream_now().await?) { taken.through + 1 } else { 1 };
        let last = self.last_position(&subject).await?;
        let own = format!("{:016x}", self.store_id);
        let mut reader = self.reader(Read::Exact, &subject, from, last).await?;
        let mut seqs = std::collections::HashSet::new();
        while let Some(message) = reader.next().await.map_err(FleetError::Nats)? {
            if let (store, Some(seq)) = logged_by(&message.headers)
                && store == own
            {
                seqs.insert(seq);
            }
        }
        Ok(seqs)
    }

    /// The last position of this node's subject a finished takeover (a
    /// peer's, or this node's own takeback) took: its hooks there are
    /// another store's now, and a settle never reads them.
    pub async fn taken_through(&self) -> Result<u64, FleetError> {
        let stream = self.stream_now().await?;
        Ok(match self.read::<Taken>(&taken_key(self.node())).await? {
            Some((taken, _)) if taken.state == TakenState::Done && taken.of_stream(&stream) => taken.through,
            _ => 0,
        })
    }

    /// Whether `node` may still be alive: its lease was not yet watched
    /// unmoved for a whole lease by this node's monotonic clock (the caller
    /// asks again until it knows).
    async fn peer_alive(&self, node: &str) -> Result<bool, FleetError> {
        let lease = self.read::<super::Lease>(&super::lease::lease_key(node)).await?;
        Ok(lease.is_some_and(|(_, revision)| !self.observe(node, revision)))
    }

    /// The outcome publisher this node's queue reports to.
    pub fn outcome_log(self: &Arc<Self>) -> Arc<dyn crate::queue::OutcomeLog> {
        let publisher = self.outcomes.get_or_init(|| {
            outcomes::Publisher::start(
                self.connection.context.clone(),
                self.settings.subjects().outcomes(self.node()),
                format!("{:016x}", self.store_id),
                self.settings.lease_ttl,
            )
        });
        publisher.clone()
    }

    /// Publish the outcomes not yet published (at shutdown, after dispatch
    /// stopped), so a later takeover repeats none of them.
    pub async fn flush_outcomes(&self) {
        if let Some(publisher) = self.outcomes.get()
            && let Err(e) = publisher.flush().await
        {
            tracing::warn!("the last delivery outcomes were not published ({e}); a takeover may repeat them");
        }
    }
}

/// A logged hook that does not decode (or whose body is gone from the
/// bucket): never skipped, it is committed as a dead letter of class
/// `fault` carrying the bytes that were there, and the operator hears of
/// it at ERROR and in `ankusa_fleet_undecodable_total`.
fn undecodable(node: &str, position: u64, bytes: Vec<u8>, reason: &str) -> (Imported, u64) {
    tracing::error!(
        node,
        position,
        "a hook node {node} logged does not decode; it is dead-lettered as a fault with the bytes that were there: {reason}"
    );
    crate::metrics::metrics().fleet_undecodable.inc();
    let source = format!("undecodable.{node}");
    let tenant = crate::tenant::DEFAULT_TENANT.to_string();
    let now = now_ms();
    let envelope = Envelope::new(format!("undecodable.{node}.{position}"), source.clone(), tenant.clone(), now, bytes);
    let row = DeliveryRow {
        seq: 0,
        sink: 0,
        tenant,
        source,
        sink_name: String::new(),
        bytes: envelope.size() as u64,
        attempts: 0,
        replay_id: None,
        state: RowState::Dead {
            dead_at: now,
            reason: format!("logged by node {node} at position {position}, it does not decode: {reason}"),
            class: Some(ErrorClass::Fault),
        },
        rows_of_hook: 1,
        last_failure: None,
        line: None,
        previous_dead: None,
    };
    let handoff = handoff::Handoff { encoded: envelope.encode(), envelope, rows: vec![(0, row.encode())] };
    (Imported { handoff, origin: format!("import.{node}.{position}") }, 1)
}

/// A handed-over row as its node's published outcome left it: given up on.
fn buried(row: &[u8], dead_at: u64, reason: &str, class: ErrorClass, attempts: u32) -> Result<Vec<u8>, FleetError> {
    let row = DeliveryRow::decode(0, 0, row).map_err(|e| QueueError::Corrupt(format!("a taken-over row: {e}")))?;
    let state = RowState::Dead { dead_at, reason: reason.to_string(), class: Some(class) };
    Ok(DeliveryRow { attempts, state, ..row }.encode())
}

#[cfg(test)]
mod tests {
    use super::{in_ranges, join, ranges};

    #[test]
    fn a_seq_is_found_in_the_ranges_read_before() {
        let read = vec![(3, 5), (9, 9), (20, 30)];
        let found: Vec<u64> = (0..35).filter(|seq| in_ranges(Some(&read), *seq)).collect();
        assert_eq!(found, [3, 4, 5, 9, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30]);
        assert!(!in_ranges(None, 4));
        assert!(!in_ranges(Some(&Vec::new()), 4));
    }

    #[test]
    fn ranges_carried_from_record_to_record_join_up() {
        assert_eq!(join(vec![(10, 12), (1, 5), (6, 8), (11, 20), (30, 30)]), [(1, 8), (10, 20), (30, 30)]);
    }

    #[test]
    fn seqs_read_are_kept_as_ranges_of_consecutive_seqs() {
        assert_eq!(ranges(vec![7, 3, 4, 5, 9, 8, 12, 4]), [(3, 5), (7, 9), (12, 12)]);
        assert_eq!(ranges(vec![]), []);
        assert_eq!(ranges(vec![u64::MAX, u64::MAX - 1]), [(u64::MAX - 1, u64::MAX)]);
    }
}
