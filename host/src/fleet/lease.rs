//! Leases: each node renews `lease.<node>` every quarter of `lease_ttl`;
//! peers judge a lease lapsed only when they have watched its revision not
//! move for `lease_ttl` by their own monotonic clock. No wall clock enters
//! it (hosts' clocks may disagree, or jump), and a peer not yet watched
//! for a whole lease, as every peer is at boot, counts as alive.
//!
//! Every write of a lease is a compare-and-set on the revision its writer
//! last saw, so exactly one of two writers wins (the protocol, as a state
//! machine: `docs/src/fleet/workings.md`):
//! - the node renews at the revision it last wrote; a renewal that finds
//!   the lease moved reads it: a peer's claim in it means this node was
//!   taken over while it ran, and it stops at once;
//! - a peer that judged the lease lapsed at a revision claims the node
//!   there first (`claimed_by`), and only then takes it over: a node that
//!   renewed meanwhile has moved the revision, and the claim fails;
//! - a node restarted on its own store (its lease names the store) renews
//!   at the revision it finds, unless a peer has claimed it: a restart
//!   within the lease is no takeover. A lease of another store with this
//!   node id is watched until it lapses, as before.
//!
//! Every call the loop makes to NATS is bounded by the renewal period, so
//! a stalled bucket (a leader election) cannot hold the loop past a lease.
//! A node measures its own lease from when it sent the last renewal that
//! succeeded: peers cannot have seen it earlier. A restart that found its
//! lease claimed settles with the takeover (`takeover::rejoin`) first.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::stream::LastRawMessageErrorKind;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};

use super::{Fleet, FleetError};
use crate::queue::{Handover, now_ms};

/// The header a bucket's delete or purge marker carries.
const KV_OPERATION: &str = "KV-Operation";

/// What a node says of itself in its lease.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct Lease {
    pub node: String,
    /// When it was renewed (unix ms, the node's clock).
    pub at_ms: u64,
    pub started_ms: u64,
    /// Undelivered and dead rows in its store (its lag).
    pub pending: i64,
    pub dead: i64,
    /// Bytes its quarantine pen holds: a takeover carries them even when
    /// no hook is left to take.
    #[serde(default)]
    pub quarantined_bytes: u64,
    /// The store (hex id) of the process renewing it: a node restarted on
    /// that store takes the lease up again (empty: a lease from before).
    #[serde(default)]
    pub store: String,
    /// The peer that judged it lapsed and claimed the node: no renewal of
    /// the node's moves it from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed_by: Option<String>,
    /// Written by the node's graceful stop, after its last delivery and
    /// its outcomes: it holds no claim. With rows still undelivered
    /// (`pending`) a peer takes it over at once rather than wait the lease
    /// out; with none, nothing is owed, and only a node gone for a whole
    /// lease is taken over (its dead letters move then).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub released: bool,
}

impl Lease {
    /// A stopped node's hooks wait for no lease to lapse.
    fn owed_now(&self) -> bool {
        self.released && self.pending > 0 && self.claimed_by.is_none()
    }
}

/// What a node found of its own lease as it started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AtBoot {
    /// It holds the lease (made, taken up again on its own store, or
    /// after another store's lapsed), at this revision.
    Held,
    /// A peer claimed it: the takeover is settled before it renews.
    Claimed { by: String },
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum TakenState {
    Running,
    Done,
}

/// A takeover of a node's hooks: the claim and, once done, what it moved.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct Taken {
    /// The node taken over.
    pub node: String,
    /// The node that took it.
    pub by: String,
    /// Positions of the node's hook subject taken: `from..=through`.
    pub from: u64,
    pub through: u64,
    /// The stream those positions are of (`intake::stream_identity`;
    /// empty in a record from before it was kept: the stream then).
    #[serde(default)]
    pub stream: String,
    pub state: TakenState,
    pub at_ms: u64,
    pub done_ms: Option<u64>,
    /// Hooks committed by the taker, with rows still to deliver or dead.
    pub imported: u64,
    /// Hooks passed over: every row delivered already.
    pub delivered: u64,
    /// Dead letters carried over.
    pub dead_letters: u64,
    /// Quarantined hooks carried into the taker's pen.
    #[serde(default)]
    pub quarantined: u64,
    /// Per store of the node (hex id): the highest seq taken.
    pub through_seqs: std::collections::BTreeMap<String, u64>,
    /// Per store of the node (hex id): the seqs of every hook the taker
    /// read, as inclusive ranges in order, so a node that comes back with
    /// that store drops exactly those hooks (a record from before names
    /// only the highest, and the node drops every hook at or below it).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub read_seqs: std::collections::BTreeMap<String, Vec<(u64, u64)>>,
    /// The first position of the taker's own hook subject its imports of
    /// this takeover could be logged at (0 in a record from before).
    #[serde(default)]
    pub logged_from: u64,
    /// Earlier runs of a takeover of this node whose taker died mid-import
    /// while the node came back holding its hooks (see `abandoned`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub abandoned: Vec<super::abandoned::Abandoned>,
    /// Written back by its taker into a bucket made again (see `bucket`):
    /// a record of the past, which fences nobody.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub restored: bool,
}

impl Taken {
    /// Whether this record's positions are of the stream `identity`.
    pub fn of_stream(&self, identity: &str) -> bool {
        self.stream.is_empty() || self.stream == identity
    }
}

/// A lease stamped this many leases ago by its own node's clock is gone,
/// whatever the skew between two hosts' clocks (which NTP keeps far
/// below a lease).
const STAMP_TRUSTED_PAST: u32 = 30;

pub fn lease_key(node: &str) -> String {
    format!("lease.{node}")
}

pub fn taken_key(node: &str) -> String {
    format!("taken.{node}")
}

/// What this node has seen of its peers' leases.
#[derive(Default)]
pub struct Watch {
    /// Per peer: the last revision seen, since when it has been watched
    /// unmoved, and when it was last read.
    pub(super) seen: HashMap<String, Seen>,
    /// Peers with a takeover running from here.
    taking: std::collections::HashSet<String>,
    /// Per lapsed peer: the lease revision at which its pen was found to
    /// hold no copy (looked at once per revision, see `takeover::pen_owed`).
    pub(super) pen_empty_at: HashMap<String, u64>,
}

/// One peer's lease as this node watches it.
pub(super) struct Seen {
    revision: u64,
    unmoved_since: Instant,
    read_at: Instant,
}

impl Fleet {
    /// The value of `key` and its revision as any replica of the bucket
    /// has it (a direct get): for views, which a leader election should
    /// not blind, never for a decision of the protocol (see [`Fleet::read`]).
    pub(super) async fn read_any<T: serde::de::DeserializeOwned>(
        &self,
        key: &str,
    ) -> Result<Option<(T, u64)>, FleetError> {
        let entry =
            self.connection.bucket.entry(key).await.map_err(|e| FleetError::Nats(format!("reading {key}: {e}")))?;
        let Some(entry) = entry.filter(|e| e.operation == async_nats::jetstream::kv::Operation::Put) else {
            return Ok(None);
        };
        match serde_json::from_slice(&entry.value) {
            Ok(value) => Ok(Some((value, entry.revision))),
            Err(e) => Err(FleetError::Nats(format!("{key} does not parse: {e}"))),
        }
    }

    /// The value of `key` and its revision, as the bucket's leader has it:
    /// a write this node or a peer made is read back (a direct get, which
    /// any replica may answer, can return a value older than one already
    /// written, and a lease judged on it is judged on the past).
    pub(super) async fn read<T: serde::de::DeserializeOwned>(&self, key: &str) -> Result<Option<(T, u64)>, FleetError> {
        let bucket = &self.connection.bucket;
        let subject = format!("{}{key}", bucket.prefix);
        let message = match bucket.stream.get_last_raw_message_by_subject(&subject).await {
            Ok(message) => message,
            Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => return Ok(None),
            Err(e) => return Err(FleetError::Nats(format!("reading {key}: {e}"))),
        };
        // A delete or purge leaves a marker, not a value.
        if message.headers.get(KV_OPERATION).is_some_and(|op| op.as_str() != "PUT") {
            return Ok(None);
        }
        match serde_json::from_slice(&message.payload) {
            Ok(value) => Ok(Some((value, message.sequence))),
            Err(e) => Err(FleetError::Nats(format!("{key} does not parse: {e}"))),
        }
    }

    /// Take this node's lease up as it starts (see the module): made if
    /// there is none, renewed at once if it is this store's, watched until
    /// it lapses if another store's (refused if that one keeps renewing),
    /// left alone if a peer claimed it.
    pub async fn take_up_lease(&self) -> Result<AtBoot, FleetError> {
        let ttl = self.settings.lease_ttl;
        let deadline = Instant::now() + ttl * 3;
        let mut watched: Option<(u64, Instant)> = None;
        let mut tries = 0u32;
        loop {
            // A write that lost a race reads again; one that keeps failing
            // (NATS not answering) gives up with the rest of the start.
            tries += 1;
            if tries > 1 {
                if Instant::now() >= deadline {
                    return Err(FleetError::Nats("this node's lease could not be written".into()));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let found = self.read::<Lease>(&lease_key(self.node())).await?;
            let Some((lease, revision)) = found else {
                if self.write_lease(None).await? {
                    return Ok(AtBoot::Held);
                }
                continue;
            };
            if let Some(by) = lease.claimed_by {
                return Ok(AtBoot::Claimed { by });
            }
            if lease.store == self.store_hex() {
                // This store's own lease, left by the run before: no other
                // process can hold this store, so it is taken up at once.
                if self.write_lease(Some(revision)).await? {
                    tracing::info!(node = self.node(), revision, "took up this node's lease again: no takeover");
                    return Ok(AtBoot::Held);
                }
                continue;
            }
            // Another store's lease under this node id: a process elsewhere,
            // or this node's lost disk. Watched until it has not moved for a
            // whole lease (or its stamp is many leases old), then written at
            // the revision watched, so a peer's claim meanwhile wins.
            let moved_at = match watched {
                Some((seen, at)) if seen == revision => at,
                Some(_) => {
                    return Err(FleetError::NodeIdInUse {
                        node: self.node().to_string(),
                        ago_ms: now_ms().saturating_sub(lease.at_ms),
                    });
                }
                None => watched.insert((revision, Instant::now())).1,
            };
            let age = Duration::from_millis(now_ms().saturating_sub(lease.at_ms));
            if age >= ttl * STAMP_TRUSTED_PAST || moved_at.elapsed() >= ttl {
                if self.write_lease(Some(revision)).await? {
                    return Ok(AtBoot::Held);
                }
                watched = None;
                continue;
            }
            if Instant::now() >= deadline {
                return Err(FleetError::NodeIdInUse { node: self.node().to_string(), ago_ms: age.as_millis() as u64 });
            }
            tracing::info!(node = self.node(), "waiting for this node id's lease from another store to lapse");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Take this node's lease back once a peer's takeover of it is settled
    /// (its claim stays in the lease until then).
    pub async fn take_back_lease(&self) -> Result<(), FleetError> {
        for _ in 0..20 {
            let found = self.read::<Lease>(&lease_key(self.node())).await?;
            let revision = found.map(|(_, revision)| revision);
            if self.write_lease(revision).await? {
                return Ok(());
            }
        }
        Err(FleetError::Nats("this node's lease keeps moving: another process renews it".into()))
    }

    /// This node's lease now, as it writes it.
    fn lease_now(&self, handover: Option<&Handover>) -> Lease {
        let (pending, dead) = handover.and_then(|h| h.node_levels().ok()).unwrap_or((0, 0));
        Lease {
            node: self.node().to_string(),
            at_ms: now_ms(),
            started_ms: self.started_ms,
            pending,
            dead,
            quarantined_bytes: handover.and_then(|h| h.pen_bytes().ok()).unwrap_or(0),
            store: self.store_hex(),
            claimed_by: None,
            released: false,
        }
    }

    /// At a graceful stop, once nothing delivers here any more and the
    /// outcomes are published: the lease is written released (a CAS on
    /// the revision this node last wrote), with the rows left undelivered,
    /// so no peer waits it out. A restart on this store takes it up again
    /// as after any stop; a peer's claim meanwhile wins, as ever.
    pub async fn release_lease(&self, handover: &Handover) {
        let mut lease = self.lease_now(Some(handover));
        lease.released = true;
        let Ok(value) = serde_json::to_vec(&lease) else { return };
        let expected = self.lease_revision.load(std::sync::atomic::Ordering::Acquire);
        let write = self.connection.bucket.update(lease_key(self.node()), value.into(), expected);
        match tokio::time::timeout(self.turn(), write).await {
            Ok(Ok(_)) => tracing::info!(pending = lease.pending, "the lease is released"),
            Ok(Err(e)) => tracing::warn!("the lease was not released ({e}): peers wait it out"),
            Err(_) => tracing::warn!("the lease was not released (no answer): peers wait it out"),
        }
    }

    /// Write this node's lease where it stood at `revision` (`None`: where
    /// there is none): `false` if it moved meanwhile.
    async fn write_lease(&self, revision: Option<u64>) -> Result<bool, FleetError> {
        let value = serde_json::to_vec(&self.lease_now(None)).map_err(|e| FleetError::Nats(e.to_string()))?;
        let key = lease_key(self.node());
        let bucket = &self.connection.bucket;
        let written = match revision {
            None => bucket.create(&key, value.into()).await.map_err(|e| e.to_string()),
            Some(revision) => bucket.update(&key, value.into(), revision).await.map_err(|e| e.to_string()),
        };
        match written {
            Ok(revision) => {
                self.lease_revision.store(revision, std::sync::atomic::Ordering::Release);
                Ok(true)
            }
            Err(e) => {
                tracing::debug!("writing this node's lease: {e}");
                Ok(false)
            }
        }
    }

    /// Renew at the revision this node last wrote. A lease that moved
    /// otherwise is read: a peer's claim in it is returned (this node was
    /// taken over); this node's own lease (a renewal whose answer was lost)
    /// is adopted.
    async fn renew(&self, handover: &Handover) -> Result<Option<String>, FleetError> {
        let value = serde_json::to_vec(&self.lease_now(Some(handover))).map_err(|e| FleetError::Nats(e.to_string()))?;
        let expected = self.lease_revision.load(std::sync::atomic::Ordering::Acquire);
        let renewed = self.connection.bucket.update(lease_key(self.node()), value.into(), expected).await;
        match renewed {
            Ok(revision) => {
                self.lease_revision.store(revision, std::sync::atomic::Ordering::Release);
                Ok(None)
            }
            Err(e) if e.kind() == async_nats::jetstream::kv::UpdateErrorKind::WrongLastRevision => {
                match self.read::<Lease>(&lease_key(self.node())).await? {
                    Some((lease, _)) if lease.claimed_by.is_some() => Ok(lease.claimed_by),
                    Some((lease, revision)) if lease.store == self.store_hex() => {
                        self.lease_revision.store(revision, std::sync::atomic::Ordering::Release);
                        Err(FleetError::Nats("the lease had moved by this node's own renewal; renewing again".into()))
                    }
                    Some((lease, _)) => Ok(Some(format!("a process on store {}", lease.store))),
                    None => Err(FleetError::Nats("this node's lease is gone from the bucket".into())),
                }
            }
            Err(e) => Err(FleetError::Nats(format!("renewing the lease: {e}"))),
        }
    }

    /// Claim `node`, whose lease this node judged lapsed at `revision`:
    /// the lease is written with this node's claim at that revision, so a
    /// renewal meanwhile (the node is alive) wins. `true`: this node holds
    /// the claim (made now, or earlier and still standing).
    pub(super) async fn claim_lease(&self, node: &str, revision: u64) -> Result<bool, FleetError> {
        let Some((mut lease, now)) = self.read::<Lease>(&lease_key(node)).await? else { return Ok(false) };
        match lease.claimed_by.as_deref() {
            Some(by) if by == self.node() => return Ok(true),
            // Another peer's claim stands while that peer lives.
            Some(by) if self.seen_alive(by) => return Ok(false),
            Some(_) => {}
            None if now != revision => return Ok(false),
            None => {}
        }
        lease.claimed_by = Some(self.node().to_string());
        let value = serde_json::to_vec(&lease).map_err(|e| FleetError::Nats(e.to_string()))?;
        let write = self.connection.bucket.update(lease_key(node), value.into(), now);
        match tokio::time::timeout(self.turn(), write).await {
            Ok(Ok(claimed)) => {
                tracing::info!(node, judged = revision, claimed, "claimed the lease of a lapsed node");
                Ok(true)
            }
            Ok(Err(e)) if e.kind() == async_nats::jetstream::kv::UpdateErrorKind::WrongLastRevision => Ok(false),
            // Not answered (a leader election): the claim is tried again
            // (a claim that went through is this node's at the next try).
            Ok(Err(e)) => Err(FleetError::Nats(format!("claiming the lease of {node}: {e}"))),
            Err(_) => Err(FleetError::Nats(format!("claiming the lease of {node}: no answer in {:?}", self.turn()))),
        }
    }

    pub(super) fn store_hex(&self) -> String {
        format!("{:016x}", self.store_id)
    }

    /// A peer took this node over while it ran (a record of a takeover that
    /// took something, newer than what this node settled with): it must
    /// stop. (A claim is also written into the lease, which a renewal finds
    /// first; a record closed having taken nothing is no takeover.)
    async fn fenced(&self) -> Result<Option<Taken>, FleetError> {
        let Some((taken, revision)) = self.read::<Taken>(&taken_key(self.node())).await? else { return Ok(None) };
        let ours = taken.by == self.node();
        // A running record may yet be closed having taken nothing (its
        // taker then loses the lease to this node's renewal).
        let took = taken.state == TakenState::Done && taken.through >= taken.from && !taken.restored;
        let newer = revision > self.reconciled.load(std::sync::atomic::Ordering::Acquire);
        Ok((!ours && took && newer).then_some(taken))
    }

    /// Peers whose leases have lapsed, by this node's observation, each
    /// with the revision judged.
    async fn lapsed_peers(&self) -> Result<Vec<(String, u64)>, FleetError> {
        let mut keys =
            self.connection.bucket.keys().await.map_err(|e| FleetError::Nats(format!("listing leases: {e}")))?;
        let mut peers = Vec::new();
        while let Some(key) = keys.next().await {
            let key = key.map_err(|e| FleetError::Nats(e.to_string()))?;
            if let Some(node) = key.strip_prefix("lease.").filter(|n| *n != self.node()) {
                peers.push(node.to_string());
            }
        }
        let mut lapsed = Vec::new();
        for node in peers {
            let Some((lease, revision)) = self.read::<Lease>(&lease_key(&node)).await? else { continue };
            if self.observe(&node, revision) || lease.owed_now() {
                lapsed.push((node, revision));
            }
        }
        Ok(lapsed)
    }

    /// Note `node`'s lease at `revision`: whether it has now been seen
    /// unmoved for a whole lease.
    ///
    /// Watched means read at every turn of the lease loop. After a blind
    /// spot of more than half a lease (this node's own NATS or KV outage,
    /// a leader election) the peer may have been as cut off and be
    /// reconnecting now: it is given three quarters of a lease from this
    /// node's next read to renew (it reconnects within an eighth and
    /// renews within a quarter), and is judged lapsed no sooner. (Judged
    /// by the time it last moved, the first node back from a quorum loss
    /// took live peers over.)
    pub(super) fn observe(&self, node: &str, revision: u64) -> bool {
        let (now, ttl) = (Instant::now(), self.settings.lease_ttl);
        let mut watch = self.watch.lock().unwrap_or_else(|e| e.into_inner());
        let seen = watch.seen.entry(node.to_string()).or_insert(Seen { revision, unmoved_since: now, read_at: now });
        if seen.revision != revision {
            (seen.revision, seen.unmoved_since) = (revision, now);
        } else if now.duration_since(seen.read_at) > ttl / 2 {
            seen.unmoved_since = now.checked_sub(ttl / 4).map_or(now, |grace| seen.unmoved_since.max(grace));
        }
        seen.read_at = now;
        seen.unmoved_since.elapsed() >= ttl
    }

    /// Whether `node` may be alive as this node sees it: anything but a
    /// lease watched unmoved for a whole lease and read lately (a node not
    /// watched yet, as every node at boot, may be alive).
    pub(super) fn seen_alive(&self, node: &str) -> bool {
        if node == self.node() {
            return true;
        }
        let watch = self.watch.lock().unwrap_or_else(|e| e.into_inner());
        let ttl = self.settings.lease_ttl;
        watch.seen.get(node).is_none_or(|seen| seen.read_at.elapsed() > ttl / 2 || seen.unmoved_since.elapsed() < ttl)
    }

    /// A turn of the lease loop: a quarter of the lease. No write the loop
    /// or a takeover's claim makes waits longer for its answer.
    pub(super) fn turn(&self) -> Duration {
        (self.settings.lease_ttl / 4).max(Duration::from_millis(50))
    }

    /// Renew this node's lease, stop if taken over, and take over lapsed
    /// peers, every quarter of the lease, until the task is stopped.
    pub fn run(self: &Arc<Self>, handover: Handover) -> tokio::task::JoinHandle<()> {
        let fleet = self.clone();
        tokio::spawn(async move {
            let period = fleet.turn();
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut renewed = Instant::now();
            let mut bucket_checked: Option<Instant> = None;
            let mut paused = false;
            loop {
                let waiting_from = tokio::time::Instant::now();
                let due = tick.tick().await;
                // A tick a whole period past both its time and the end of
                // the turn before: the process stalled.
                note_stall(due.max(waiting_from).elapsed(), period);
                let sent = Instant::now();
                // What follows the renewal ends with the turn, so a slow
                // read of peers never puts the next renewal off (the lease's
                // proof lasts two turns from a renewal's sending).
                let turn_ends = sent + period;
                let renewal = bounded(period, "renewing the lease", fleet.renew(&handover)).await;
                // Bounded by a period, a renewal that took two ended late
                // because the process stalled while it waited.
                note_stall(sent.elapsed().saturating_sub(period), period);
                let claimed = match renewal {
                    Ok(None) => None,
                    Ok(Some(by)) => Some(by),
                    Err(e) => {
                        tracing::warn!("{e}");
                        // Renewals failing for a whole lease may mean the
                        // bucket was lost (a leader election is over sooner):
                        // made again, the lease is written anew there and
                        // proven at the next turn. Looked at once a lease.
                        let ttl = fleet.settings.lease_ttl;
                        if renewed.elapsed() >= ttl && bucket_checked.is_none_or(|at| at.elapsed() >= ttl) {
                            bucket_checked = Some(Instant::now());
                            if let Ok(true) = bounded(period, "checking the leases bucket", fleet.check_bucket()).await
                            {
                                let _ = bounded(period, "writing the lease anew", fleet.write_lease(None)).await;
                            }
                        }
                        // Peers wait a whole lease before they take over; this
                        // node stops delivering after half of one.
                        if !paused && renewed.elapsed() >= fleet.settings.lease_ttl / 2 {
                            tracing::error!("the lease cannot be renewed: delivery paused until NATS answers again");
                            handover.pause_claims(true);
                            paused = true;
                        }
                        continue;
                    }
                };
                // A peer claimed this node (its lease lapsed) or took it over
                // by an older record: it stops, so the two never deliver the
                // same hooks.
                let taken = match claimed {
                    Some(by) => Some(by),
                    None => {
                        match bounded(left_of(turn_ends, period), "reading this node's takeover record", fleet.fenced())
                            .await
                        {
                            Ok(taken) => taken.map(|t| t.by),
                            Err(e) => {
                                tracing::warn!("{e}");
                                None
                            }
                        }
                    }
                };
                if let Some(by) = taken {
                    tracing::error!(
                        by,
                        "this node was taken over while it ran (its lease lapsed); it stops so the two do not \
                         deliver the same hooks. Restart it to rejoin the fleet."
                    );
                    std::process::exit(75);
                }
                renewed = sent;
                // The lease is proven from when the renewal left: no peer
                // can have seen it unmoved for a whole lease before
                // `sent + ttl`. Claims stop half a lease on; an attempt
                // (at most half a lease long) is dropped an eighth of a
                // lease short of that.
                let ttl = fleet.settings.lease_ttl;
                handover.prove_lease(sent + ttl / 2, sent + ttl - ttl / 8);
                if paused {
                    tracing::warn!("the lease is renewed again: delivery resumes");
                    handover.pause_claims(false);
                    paused = false;
                }
                let watch = bounded(left_of(turn_ends, period), "watching the peers' leases", fleet.lapsed_peers());
                let lapsed = match watch.await {
                    Ok(lapsed) => lapsed,
                    Err(e) => {
                        tracing::warn!("{e}");
                        continue;
                    }
                };
                for (node, revision) in lapsed {
                    let mut watch = fleet.watch.lock().unwrap_or_else(|e| e.into_inner());
                    if !watch.taking.insert(node.clone()) {
                        continue;
                    }
                    drop(watch);
                    let (fleet, handover) = (fleet.clone(), handover.clone());
                    tokio::spawn(async move {
                        if let Err(e) = fleet.take_over(&handover, &node, revision).await {
                            tracing::warn!(node, "takeover failed (tried again): {e}");
                        }
                        fleet.watch.lock().unwrap_or_else(|e| e.into_inner()).taking.remove(&node);
                    });
                }
            }
        })
    }
}

/// Log a stall of this process (a pause, a disk that held a write) that
/// kept the lease loop `late` by a whole `period` or more: attempts in
/// flight past the lease's proof are withdrawn and delivered again.
fn note_stall(late: Duration, period: Duration) {
    if late >= period {
        let late_ms = u64::try_from(late.as_millis()).unwrap_or(u64::MAX);
        tracing::warn!(late_ms, "the lease loop ran late: this process or its host stalled");
    }
}

/// What is left of a turn ending at `turn_ends`, and at least a quarter of
/// the `period`: a renewal that took the whole turn still leaves the rest
/// a moment.
fn left_of(turn_ends: Instant, period: Duration) -> Duration {
    turn_ends.saturating_duration_since(Instant::now()).max(period / 4)
}

/// `call`, or an error once `period` passes without an answer: no NATS call
/// holds the lease loop past a renewal period.
async fn bounded<T>(
    period: Duration,
    what: &str,
    call: impl std::future::Future<Output = Result<T, FleetError>>,
) -> Result<T, FleetError> {
    tokio::time::timeout(period, call)
        .await
        .unwrap_or_else(|_| Err(FleetError::Nats(format!("{what}: no answer within {period:?}"))))
}
