//! Leases: each node renews `lease.<node>` every quarter of `lease_ttl`;
//! peers judge a lease lapsed only when they have watched its revision not
//! move for `lease_ttl` by their own monotonic clock. No wall clock enters
//! it (hosts' clocks may disagree, or jump), and a peer not yet watched
//! for a whole lease, as every peer is at boot, counts as alive.
//!
//! Every call the loop makes to NATS is bounded by the renewal period, so
//! a stalled bucket (a leader election) cannot hold the loop past a lease.
//! A node measures its own lease from when it sent the last renewal that
//! succeeded: peers cannot have seen it earlier.
//!
//! The same loop watches `taken.<this node>`: a node that finds a peer has
//! taken it over while it ran (it was cut off for longer than the lease)
//! stops at once, since the peer now delivers what it holds. A restart
//! settles with the takeover (`takeover::rejoin`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};

use super::{Fleet, FleetError};
use crate::queue::{Handover, now_ms};

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
    /// Per store of the node (hex id): the highest seq taken, so a node
    /// that comes back with that store drops those hooks.
    pub through_seqs: std::collections::BTreeMap<String, u64>,
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
    /// Per peer: the last revision seen and when it last moved.
    seen: HashMap<String, (u64, Instant)>,
    /// Peers with a takeover running from here.
    taking: std::collections::HashSet<String>,
}

impl Fleet {
    pub(super) async fn read<T: serde::de::DeserializeOwned>(&self, key: &str) -> Result<Option<(T, u64)>, FleetError> {
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

    /// Wait for a lease this node id left behind (a restart within the
    /// lease) to lapse; refuse if something keeps renewing it. The lease's
    /// own stamp (another host's clock) only shortens the wait when it is
    /// many leases old; otherwise the lease is watched unmoved for a whole
    /// lease.
    pub async fn wait_for_own_lease(&self) -> Result<(), FleetError> {
        let ttl = self.settings.lease_ttl;
        let deadline = Instant::now() + ttl * 3;
        let mut last_revision = None;
        let mut moved_at = Instant::now();
        loop {
            let Some((lease, revision)) = self.read::<Lease>(&lease_key(self.node())).await? else { return Ok(()) };
            if last_revision != Some(revision) {
                if last_revision.is_some() {
                    return Err(FleetError::NodeIdInUse {
                        node: self.node().to_string(),
                        ago_ms: now_ms().saturating_sub(lease.at_ms),
                    });
                }
                last_revision = Some(revision);
                moved_at = Instant::now();
            }
            let age = Duration::from_millis(now_ms().saturating_sub(lease.at_ms));
            if age >= ttl * STAMP_TRUSTED_PAST || moved_at.elapsed() >= ttl {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(FleetError::NodeIdInUse { node: self.node().to_string(), ago_ms: age.as_millis() as u64 });
            }
            tracing::info!(node = self.node(), "waiting for this node id's previous lease to lapse");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    async fn renew(&self, handover: &Handover) -> Result<(), FleetError> {
        let (pending, dead) = handover.node_levels().unwrap_or((0, 0));
        let lease =
            Lease { node: self.node().to_string(), at_ms: now_ms(), started_ms: self.started_ms, pending, dead };
        let value = serde_json::to_vec(&lease).map_err(|e| FleetError::Nats(e.to_string()))?;
        self.connection
            .bucket
            .put(lease_key(self.node()), value.into())
            .await
            .map_err(|e| FleetError::Nats(format!("renewing the lease: {e}")))?;
        Ok(())
    }

    /// A peer took this node over while it ran: it must stop.
    async fn fenced(&self) -> Result<Option<Taken>, FleetError> {
        let Some((taken, revision)) = self.read::<Taken>(&taken_key(self.node())).await? else { return Ok(None) };
        let ours = taken.by == self.node();
        Ok((!ours && revision > self.reconciled.load(std::sync::atomic::Ordering::Acquire)).then_some(taken))
    }

    /// Peers whose leases have lapsed, by this node's observation.
    async fn lapsed_peers(&self) -> Result<Vec<String>, FleetError> {
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
            let Some((_, revision)) = self.read::<Lease>(&lease_key(&node)).await? else { continue };
            if self.observe(&node, revision) {
                lapsed.push(node);
            }
        }
        Ok(lapsed)
    }

    /// Note `node`'s lease at `revision`: whether it has now been seen
    /// unmoved for a whole lease.
    pub(super) fn observe(&self, node: &str, revision: u64) -> bool {
        let mut watch = self.watch.lock().unwrap_or_else(|e| e.into_inner());
        let seen = watch.seen.entry(node.to_string()).or_insert((revision, Instant::now()));
        if seen.0 != revision {
            *seen = (revision, Instant::now());
        }
        seen.1.elapsed() >= self.settings.lease_ttl
    }

    /// Whether `node` may be alive as this node sees it: anything but a
    /// lease watched unmoved for a whole lease (a node not watched yet, as
    /// every node at boot, may be alive).
    pub(super) fn seen_alive(&self, node: &str) -> bool {
        if node == self.node() {
            return true;
        }
        let watch = self.watch.lock().unwrap_or_else(|e| e.into_inner());
        watch.seen.get(node).is_none_or(|(_, moved)| moved.elapsed() < self.settings.lease_ttl)
    }

    /// Renew this node's lease, stop if taken over, and take over lapsed
    /// peers, every quarter of the lease, until the task is stopped.
    pub fn run(self: &Arc<Self>, handover: Handover) -> tokio::task::JoinHandle<()> {
        let fleet = self.clone();
        tokio::spawn(async move {
            let period = (fleet.settings.lease_ttl / 4).max(Duration::from_millis(50));
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut renewed = Instant::now();
            let mut paused = false;
            loop {
                tick.tick().await;
                let sent = Instant::now();
                let renewal = bounded(period, "renewing the lease", fleet.renew(&handover)).await;
                if let Err(e) = renewal {
                    tracing::warn!("{e}");
                    // Peers wait a whole lease before they take over; this
                    // node stops delivering after half of one.
                    if !paused && renewed.elapsed() >= fleet.settings.lease_ttl / 2 {
                        tracing::error!("the lease cannot be renewed: delivery paused until NATS answers again");
                        handover.pause_claims(true);
                        paused = true;
                    }
                    continue;
                }
                renewed = sent;
                match bounded(period, "reading this node's takeover record", fleet.fenced()).await {
                    Ok(Some(taken)) => {
                        tracing::error!(
                            by = taken.by,
                            through = taken.through,
                            "this node was taken over while it ran (its lease lapsed); it stops so the two do not \
                             deliver the same hooks. Restart it to rejoin the fleet."
                        );
                        std::process::exit(75);
                    }
                    Ok(None) => {
                        // The lease is proven from when the renewal left.
                        handover.prove_claims_until(sent + fleet.settings.lease_ttl / 2);
                        if paused {
                            tracing::warn!("the lease is renewed again: delivery resumes");
                            handover.pause_claims(false);
                            paused = false;
                        }
                    }
                    Err(e) => tracing::warn!("{e}"),
                }
                let lapsed = match bounded(period, "watching the peers' leases", fleet.lapsed_peers()).await {
                    Ok(lapsed) => lapsed,
                    Err(e) => {
                        tracing::warn!("{e}");
                        continue;
                    }
                };
                for node in lapsed {
                    let mut watch = fleet.watch.lock().unwrap_or_else(|e| e.into_inner());
                    if !watch.taking.insert(node.clone()) {
                        continue;
                    }
                    drop(watch);
                    let (fleet, handover) = (fleet.clone(), handover.clone());
                    tokio::spawn(async move {
                        if let Err(e) = fleet.take_over(&handover, &node).await {
                            tracing::warn!(node, "takeover failed (tried again): {e}");
                        }
                        fleet.watch.lock().unwrap_or_else(|e| e.into_inner()).taking.remove(&node);
                    });
                }
            }
        })
    }
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
