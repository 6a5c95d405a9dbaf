//! Takeovers abandoned mid-import: the taker died while it committed a
//! node's hooks, and the node came back on its own store first.
//!
//! The node still holds every hook the takeover was to move, so it takes
//! nothing back: it closes the record as done having taken nothing, and
//! names the abandoned run in it (`Abandoned`). What the dead taker had
//! committed by then is in the taker's store and logged on its subject
//! under the message ids `import.<node>.<position>`; those hooks are the
//! node's, so
//! - the taker, back on its store, drops them before it delivers
//!   (`drop_abandoned_imports`), and
//! - a peer that takes the taker over passes them by (`void_imports`);
//! - the node settles as delivered the rows the taker delivered of its
//!   imports before it died (its published outcomes say which), so they
//!   are not delivered again (`delivered_by_taker`).
//!
//! Without this, the node would import its own hooks into the store that
//! still held them, and the taker would deliver its part again: each
//! undelivered hook twice. (The state "abandoned" of the lease protocol in
//! `docs/src/fleet/workings.md`.)

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

use super::lease::{Taken, TakenState, taken_key};
use super::{Fleet, FleetError};
use crate::intake::{Read, logged_by};
use crate::queue::{Handover, now_ms};
use crate::store::Store;

/// How many abandoned runs a record keeps naming (carried from record to
/// record until the taker is back or taken over).
const KEPT: usize = 32;

/// The message id header a logged import carries.
const MSG_ID: &str = "Nats-Msg-Id";

/// A takeover run whose taker died mid-import and whose node came back
/// holding the hooks.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct Abandoned {
    /// The taker that died.
    pub by: String,
    /// Positions of the node's subject that run was to take.
    pub from: u64,
    pub through: u64,
    /// The first position of the taker's own subject its imports could be
    /// logged at.
    pub logged_from: u64,
}

impl Abandoned {
    /// Whether the import logged as `msg_id` (`import.<node>.<position>`)
    /// was of this run of `node`.
    fn voids(&self, node: &str, msg_id: &str) -> bool {
        imported_position(node, msg_id).is_some_and(|p| (self.from..=self.through).contains(&p))
    }
}

/// The position of `node`'s subject an import logged as `msg_id`
/// (`import.<node>.<position>`) was of.
fn imported_position(node: &str, msg_id: &str) -> Option<u64> {
    let position = msg_id.strip_prefix("import.").and_then(|rest| rest.strip_prefix(node)?.strip_prefix('.'))?;
    position.parse().ok()
}

/// Add `runs` to those `into` names, oldest dropped past `KEPT`.
pub(super) fn carry_abandoned(into: &mut Vec<Abandoned>, runs: &[Abandoned]) {
    for run in runs {
        if !into.contains(run) {
            into.push(run.clone());
        }
    }
    let excess = into.len().saturating_sub(KEPT);
    into.drain(..excess);
}

impl Fleet {
    /// This node is back on its own store and its takeover's taker died
    /// mid-import (`taken` at `revision`, running): drop what any finished
    /// takeover before it read (carried in the record), and close the
    /// record as done having taken nothing, naming the abandoned run.
    /// `false`: the record moved meanwhile (read it again).
    pub(super) async fn close_abandoned(
        &self,
        handover: &Handover,
        store: &dyn Store,
        taken: &Taken,
        revision: u64,
    ) -> Result<bool, FleetError> {
        if let Some(ranges) = taken.read_seqs.get(&self.store_hex()) {
            handover.purge_ranges(ranges)?;
        }
        let run = Abandoned {
            by: taken.by.clone(),
            from: taken.from,
            through: taken.through,
            logged_from: taken.logged_from,
        };
        let mut closed = Taken {
            by: self.node().to_string(),
            through: taken.from.saturating_sub(1),
            state: TakenState::Done,
            at_ms: now_ms(),
            done_ms: Some(now_ms()),
            imported: 0,
            delivered: 0,
            dead_letters: 0,
            ..taken.clone()
        };
        carry_abandoned(&mut closed.abandoned, &[run]);
        let delivered = self.delivered_by_taker(taken).await?;
        match self.update_record(&closed, revision).await? {
            Some(revision) => {
                tracing::warn!(
                    by = taken.by,
                    from = taken.from,
                    through = taken.through,
                    "a peer's takeover of this node died mid-import; this node keeps its hooks, and that peer drops \
                     what it had imported of them"
                );
                self.set_reconciled(store, revision)?;
                self.delivered_by_dead_taker.lock().unwrap_or_else(|e| e.into_inner()).extend(delivered);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// The rows of this node's hooks that the taker of `taken`, which died
    /// mid-import, delivered before it died: its imports (logged on its own
    /// subject from `logged_from` under `import.<this node>.<position>`)
    /// whose outcomes it published delivered, as this store's (seq, sink).
    async fn delivered_by_taker(&self, taken: &Taken) -> Result<Vec<(u64, u16)>, FleetError> {
        let taker_subject = self.settings.subjects().hooks(&taken.by);
        let last =
            crate::intake::last_position(&self.connection.stream, &taker_subject).await.map_err(FleetError::Nats)?;
        if taken.logged_from == 0 || taken.logged_from > last {
            return Ok(Vec::new());
        }
        let outcomes = self.read_outcomes(&taken.by).await?;
        let mut sinks_at: std::collections::BTreeMap<u64, Vec<u16>> = std::collections::BTreeMap::new();
        let mut reader = self.reader(Read::Exact, &taker_subject, taken.logged_from, last).await?;
        while let Some(message) = reader.next().await.map_err(FleetError::Nats)? {
            let msg_id = message.headers.get(MSG_ID).map(|v| v.as_str().to_string()).unwrap_or_default();
            let Some(position) = imported_position(self.node(), &msg_id) else { continue };
            let (store, seq) = logged_by(&message.headers);
            let Some(settled) = seq.and_then(|seq| outcomes.get(&(store, seq))) else { continue };
            let delivered: Vec<u16> = settled
                .iter()
                .filter(|(_, outcome)| matches!(outcome, crate::queue::FinalOutcome::Delivered))
                .map(|(sink, _)| *sink)
                .collect();
            if !delivered.is_empty() && (taken.from..=taken.through).contains(&position) {
                sinks_at.insert(position, delivered);
            }
        }
        let (Some(&first), Some(&through)) = (sinks_at.keys().next(), sinks_at.keys().last()) else {
            return Ok(Vec::new());
        };
        let own = self.store_hex();
        let mut rows = Vec::new();
        let own_subject = self.settings.subjects().hooks(self.node());
        let mut reader = self.reader(Read::Exact, &own_subject, first, through).await?;
        while let Some(message) = reader.next().await.map_err(FleetError::Nats)? {
            let Some(sinks) = sinks_at.get(&message.position) else { continue };
            if let (store, Some(seq)) = logged_by(&message.headers)
                && store == own
            {
                rows.extend(sinks.iter().map(|sink| (seq, *sink)));
            }
        }
        Ok(rows)
    }

    /// Once this node publishes its outcomes: the rows a dead taker
    /// delivered of its hooks (see `close_abandoned`) are settled delivered
    /// here, so neither this node nor a later takeover of it delivers them
    /// again.
    pub fn settle_delivered_by_taker(&self, deliveries: &crate::queue::Deliveries) -> Result<usize, FleetError> {
        let rows = std::mem::take(&mut *self.delivered_by_dead_taker.lock().unwrap_or_else(|e| e.into_inner()));
        if rows.is_empty() {
            return Ok(0);
        }
        let settled: Vec<_> =
            rows.iter().map(|(seq, sink)| (*seq, *sink, crate::queue::Settlement::Complete)).collect();
        deliveries.settle(&settled)?;
        tracing::warn!(
            rows = rows.len(),
            "rows a peer delivered before it died mid-takeover are settled delivered here"
        );
        Ok(rows.len())
    }

    /// Every abandoned run named in the bucket, by the node it was of.
    async fn abandoned_runs(&self) -> Result<Vec<(String, Abandoned)>, FleetError> {
        let mut keys =
            self.connection.bucket.keys().await.map_err(|e| FleetError::Nats(format!("listing takeovers: {e}")))?;
        let mut nodes = Vec::new();
        while let Some(key) = futures_util::StreamExt::next(&mut keys).await {
            let key = key.map_err(|e| FleetError::Nats(e.to_string()))?;
            if let Some(node) = key.strip_prefix("taken.") {
                nodes.push(node.to_string());
            }
        }
        let mut runs = Vec::new();
        for node in nodes {
            if let Some((taken, _)) = self.read::<Taken>(&taken_key(&node)).await? {
                runs.extend(taken.abandoned.into_iter().map(|run| (node.clone(), run)));
            }
        }
        Ok(runs)
    }

    /// Whether a message logged by `taker` is an import of a run of
    /// `taker`'s that was abandoned (see the module): its hook is its own
    /// node's, never the taker's to pass on.
    pub(super) async fn void_imports(
        &self,
        taker: &str,
    ) -> Result<impl Fn(&async_nats::HeaderMap) -> bool, FleetError> {
        let runs: Vec<(String, Abandoned)> =
            self.abandoned_runs().await?.into_iter().filter(|(_, run)| run.by == taker).collect();
        Ok(move |headers: &async_nats::HeaderMap| {
            let Some(msg_id) = headers.get(MSG_ID).map(|v| v.as_str().to_string()) else { return false };
            runs.iter().any(|(node, run)| run.voids(node, &msg_id))
        })
    }

    /// This node is back on its store: drop the hooks it imported in runs
    /// that were abandoned (their nodes came back holding them), each run
    /// once. Runs after the store's log is settled, before anything
    /// delivers.
    pub async fn drop_abandoned_imports(&self, handover: &Handover, store: &dyn Store) -> Result<u64, FleetError> {
        let own = self.store_hex();
        let subject = self.settings.subjects().hooks(self.node());
        let mut dropped = 0;
        let mut by_start: HashMap<u64, Vec<(String, Abandoned)>> = HashMap::new();
        for (node, run) in self.abandoned_runs().await?.into_iter().filter(|(_, run)| run.by == self.node()) {
            by_start.entry(run.logged_from).or_default().push((node, run));
        }
        for (logged_from, runs) in by_start {
            let done_key = format!("fleet_abandoned.{logged_from}").into_bytes();
            if super::read_meta(store, &done_key)?.is_some() {
                continue;
            }
            let last =
                crate::intake::last_position(&self.connection.stream, &subject).await.map_err(FleetError::Nats)?;
            let mut seqs = HashSet::new();
            let mut reader = self.reader(Read::Exact, &subject, logged_from.max(1), last).await?;
            while let Some(message) = reader.next().await.map_err(FleetError::Nats)? {
                let Some(msg_id) = message.headers.get(MSG_ID).map(|v| v.as_str().to_string()) else { continue };
                if let (store, Some(seq)) = logged_by(&message.headers)
                    && store == own
                    && runs.iter().any(|(node, run)| run.voids(node, &msg_id))
                {
                    seqs.insert(seq);
                }
            }
            let removed = handover.purge_ranges(&super::takeover::ranges(seqs.into_iter().collect()))?;
            tracing::warn!(
                hooks = removed,
                "this node died mid-import of a takeover whose node came back holding its hooks; what it had imported \
                 is dropped here"
            );
            dropped += removed;
            super::write_meta(store, &done_key, &1u64.to_be_bytes())?;
        }
        Ok(dropped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_voids_only_its_nodes_imports_within_its_range() {
        let run = Abandoned { by: "b".into(), from: 10, through: 20, logged_from: 1 };
        assert!(run.voids("a", "import.a.10"));
        assert!(run.voids("a", "import.a.20"));
        assert!(!run.voids("a", "import.a.21"));
        assert!(!run.voids("a", "import.a.9"));
        assert!(!run.voids("ab", "import.a.15"), "another node whose name a prefix of");
        assert!(!run.voids("a", "import.ab.15"));
        assert!(!run.voids("a", "provider-key"));
    }

    #[test]
    fn carried_runs_are_kept_once_and_the_oldest_dropped() {
        let run = |n| Abandoned { by: "b".into(), from: n, through: n, logged_from: 1 };
        let mut into = vec![run(1)];
        carry_abandoned(&mut into, &[run(1), run(2)]);
        assert_eq!(into, [run(1), run(2)]);
        let many: Vec<_> = (0..40).map(run).collect();
        carry_abandoned(&mut into, &many);
        assert_eq!(into.len(), KEPT);
        assert_eq!(into.last(), Some(&run(39)));
    }
}
