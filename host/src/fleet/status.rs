//! What `/v1/fleet` and `ankusa fleet status` show: every node's lease and
//! lag, the takeovers on record, and this node's JetStream publishing.

use std::sync::atomic::Ordering;

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};

use super::lease::{Lease, Taken, lease_key, taken_key};
use super::{Fleet, FleetError};
use crate::queue::now_ms;

#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FleetStatus {
    pub node_id: String,
    pub stream: String,
    pub replicas: usize,
    /// What an ack survives.
    pub ack_survives: String,
    pub connected: bool,
    pub lease_ttl_ms: u64,
    pub nodes: Vec<NodeStatus>,
    /// The bucket could not be listed or read whole (a leader election,
    /// say): `nodes` may be only this node and the peers it watches, and a
    /// lease or record not read is missing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub partial: bool,
    /// Takeovers this node ran since it started.
    pub takeovers_run: Vec<Taken>,
    pub publish: PublishFigures,
}

#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NodeStatus {
    pub node: String,
    /// The lease was renewed within `lease_ttl`, and not released by a stop.
    pub alive: bool,
    pub heartbeat_age_ms: Option<u64>,
    pub lease: Option<Lease>,
    /// The last takeover of this node on record.
    pub taken: Option<Taken>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PublishFigures {
    pub rounds: u64,
    pub hooks: u64,
    pub duplicates: u64,
    pub failures: u64,
    /// Hooks per publish round, on average.
    pub hooks_per_round: f64,
    pub mean_round_us: f64,
    pub last_round_us: u64,
}

impl Fleet {
    pub async fn status(&self) -> Result<FleetStatus, FleetError> {
        // Listing needs the bucket's leader; reading a key does not, so a
        // leader election leaves the view of the nodes this one knows.
        let listed = tokio::time::timeout(self.turn(), self.listed_nodes()).await;
        let (mut nodes, mut partial) = match listed {
            Ok(Ok(nodes)) => (nodes, false),
            failed => {
                tracing::debug!("listing the fleet's bucket: {failed:?}");
                let watch = self.watch.lock().unwrap_or_else(|e| e.into_inner());
                let mut known: Vec<String> = watch.seen.keys().cloned().collect();
                known.push(self.node().to_string());
                (known, true)
            }
        };
        nodes.sort();
        nodes.dedup();
        let ttl_ms = self.settings.lease_ttl.as_millis() as u64;
        let mut out = Vec::with_capacity(nodes.len());
        for node in nodes {
            let (lease, taken) = match (
                self.read_any::<Lease>(&lease_key(&node)).await,
                self.read_any::<Taken>(&taken_key(&node)).await,
            ) {
                (Ok(lease), Ok(taken)) => (lease.map(|(lease, _)| lease), taken.map(|(taken, _)| taken)),
                (lease, taken) => {
                    partial = true;
                    (lease.ok().flatten().map(|(lease, _)| lease), taken.ok().flatten().map(|(taken, _)| taken))
                }
            };
            let age = lease.as_ref().map(|l| now_ms().saturating_sub(l.at_ms));
            let released = lease.as_ref().is_some_and(|l| l.released);
            let alive = age.is_some_and(|a| a < ttl_ms) && !released;
            out.push(NodeStatus { alive, heartbeat_age_ms: age, node, lease, taken });
        }
        let p = &self.publish;
        let (rounds, hooks, micros) =
            (p.rounds.load(Ordering::Relaxed), p.hooks.load(Ordering::Relaxed), p.micros.load(Ordering::Relaxed));
        Ok(FleetStatus {
            node_id: self.node().to_string(),
            stream: self.settings.stream.clone(),
            replicas: self.settings.replicas,
            ack_survives: self.ack_survives(),
            connected: self.connection.client.connection_state() == async_nats::connection::State::Connected,
            lease_ttl_ms: ttl_ms,
            nodes: out,
            partial,
            takeovers_run: self.ran.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            publish: PublishFigures {
                rounds,
                hooks,
                duplicates: p.duplicates.load(Ordering::Relaxed),
                failures: p.failures.load(Ordering::Relaxed),
                hooks_per_round: if rounds == 0 { 0.0 } else { hooks as f64 / rounds as f64 },
                mean_round_us: if rounds == 0 { 0.0 } else { micros as f64 / rounds as f64 },
                last_round_us: p.last_micros.load(Ordering::Relaxed),
            },
        })
    }

    /// Every node with a lease or a takeover record in the bucket.
    async fn listed_nodes(&self) -> Result<Vec<String>, FleetError> {
        let mut keys =
            self.connection.bucket.keys().await.map_err(|e| FleetError::Nats(format!("listing leases: {e}")))?;
        let mut nodes: Vec<String> = Vec::new();
        while let Some(key) = keys.next().await {
            let key = key.map_err(|e| FleetError::Nats(e.to_string()))?;
            if let Some(node) = key.strip_prefix("lease.").or_else(|| key.strip_prefix("taken.")) {
                nodes.push(node.to_string());
            }
        }
        Ok(nodes)
    }
}
