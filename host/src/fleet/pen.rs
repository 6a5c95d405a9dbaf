//! The quarantine pen across the fleet. Each hook a node holds in its pen
//! is also an object `<node>/<hex of its pen key>` in the bucket
//! `<stream>-pen` (the stream's replicas, kept until removed: a pen never
//! ages out), put before the edge answers `202`.
//!
//! - **A takeover carries the pen**: each object of the lapsed node is held
//!   in the taker's pen, put under the taker's name, then removed under the
//!   lapsed node's ([`Fleet::carry_pen`]).
//! - **While a node runs, its store is the truth**: objects of hooks it no
//!   longer holds (released, purged, erased) are removed once its pen
//!   changed ([`Fleet::tidy_pen`], at most a tidy period late: a hook
//!   released or purged that close before its node's takeover is held
//!   again by the taker).
//! - **Back after a takeover that carried its pen**, the node drops the
//!   hooks whose objects a peer took; on a new store it holds again the
//!   objects under its name ([`Fleet::settle_pen`]).

use std::collections::BTreeSet;
use std::time::Duration;

use async_nats::jetstream::object_store::ObjectStore;
use futures_util::StreamExt;
use tokio::io::AsyncReadExt;

use super::{Fleet, FleetError};
use crate::queue::{Handover, PenCopies};

/// How often a running node looks whether its pen changed, and removes the
/// objects of hooks it no longer holds.
pub const TIDY_PERIOD: Duration = Duration::from_secs(1);

/// The bucket, with the bound on each call to it.
#[derive(Clone)]
pub struct PenBucket {
    bucket: ObjectStore,
    timeout: Duration,
}

fn object_name(node: &str, key: &[u8]) -> String {
    format!("{node}/{}", hex::encode(key))
}

impl PenBucket {
    pub fn new(bucket: ObjectStore, timeout: Duration) -> PenBucket {
        PenBucket { bucket, timeout }
    }

    async fn bounded<T, E: std::fmt::Display>(
        &self,
        what: &str,
        call: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, FleetError> {
        let wait = self.timeout * 4;
        match tokio::time::timeout(wait, call).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(FleetError::Nats(format!("the pen bucket, {what}: {e}"))),
            Err(_) => Err(FleetError::Nats(format!("the pen bucket, {what}: no answer within {wait:?}"))),
        }
    }

    async fn put(&self, node: &str, key: &[u8], value: &[u8]) -> Result<(), FleetError> {
        let name = object_name(node, key);
        let mut reader = value;
        self.bounded(&format!("putting {name}"), self.bucket.put(name.as_str(), &mut reader)).await.map(drop)
    }

    async fn get(&self, node: &str, key: &[u8]) -> Result<Vec<u8>, FleetError> {
        let name = object_name(node, key);
        self.bounded(&format!("reading {name}"), async {
            let mut object = self.bucket.get(name.as_str()).await.map_err(|e| e.to_string())?;
            let mut bytes = Vec::new();
            object.read_to_end(&mut bytes).await.map_err(|e| e.to_string())?;
            Ok::<_, String>(bytes)
        })
        .await
    }

    async fn remove(&self, node: &str, key: &[u8]) -> Result<(), FleetError> {
        let name = object_name(node, key);
        self.bounded(&format!("removing {name}"), self.bucket.delete(name.as_str())).await
    }

    /// The pen keys of the objects under `node`'s name.
    async fn keys(&self, node: &str) -> Result<BTreeSet<Vec<u8>>, FleetError> {
        let prefix = format!("{node}/");
        self.bounded("listing", async {
            let mut list = self.bucket.list().await.map_err(|e| e.to_string())?;
            let mut keys = BTreeSet::new();
            while let Some(info) = list.next().await {
                let info = info.map_err(|e| e.to_string())?;
                if let Some(key) = info.name.strip_prefix(&prefix).and_then(|hex| hex::decode(hex).ok()) {
                    keys.insert(key);
                }
            }
            Ok::<_, String>(keys)
        })
        .await
    }
}

/// The edge's copy of a quarantined hook, under this node's name.
pub struct NodePen {
    bucket: PenBucket,
    node: String,
}

impl PenCopies for NodePen {
    fn copy<'a>(
        &'a self,
        key: &'a [u8],
        value: &'a [u8],
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send + 'a>> {
        Box::pin(async move { self.bucket.put(&self.node, key, value).await.map_err(|e| e.to_string()) })
    }
}

impl Fleet {
    /// Where the edge copies each quarantined hook before it answers `202`.
    pub fn pen_copies(&self) -> std::sync::Arc<dyn PenCopies> {
        std::sync::Arc::new(NodePen { bucket: self.connection.pen.clone(), node: self.node().to_string() })
    }

    /// Whether the pen bucket holds a copy under `node`'s name.
    pub(super) async fn holds_pen_copies(&self, node: &str) -> Result<bool, FleetError> {
        Ok(!self.connection.pen.keys(node).await?.is_empty())
    }

    /// Hold `node`'s quarantined hooks in this node's pen, each put under
    /// this node's name before it leaves `node`'s: a taker that dies
    /// midway leaves every hook under one name at least. How many moved.
    pub(super) async fn carry_pen(&self, handover: &Handover, node: &str) -> Result<u64, FleetError> {
        let pen = &self.connection.pen;
        let mut moved = 0;
        for key in pen.keys(node).await? {
            let value = pen.get(node, &key).await?;
            pen.put(self.node(), &key, &value).await?;
            match handover.hold_taken(&key, &value) {
                Ok(_) => moved += 1,
                // A copy that does not decode is left where it is, named.
                Err(e) if e.is_damage() => {
                    tracing::error!(node, object = object_name(node, &key), "a quarantined hook's copy: {e}");
                    pen.remove(self.node(), &key).await?;
                    continue;
                }
                Err(e) => return Err(e.into()),
            }
            pen.remove(node, &key).await?;
        }
        Ok(moved)
    }

    /// Settle this node's pen with its copies at its start. Copies under
    /// this node's name that no hook held here matches are held when the
    /// store is new (they are all that is left), else removed (the edge
    /// copied a hook it then failed to hold, and answered `503`). Held
    /// hooks without a copy were taken by a peer when a takeover settled
    /// at this start says it carried a pen, and are dropped; else they are
    /// copied (held before the bucket kept copies). How many held hooks
    /// were dropped and added.
    pub async fn settle_pen(&self, handover: &Handover, fresh_store: bool) -> Result<(u64, u64), FleetError> {
        let pen = &self.connection.pen;
        let objects = pen.keys(self.node()).await?;
        let held = handover.held_keys()?;
        let mut added = 0;
        for key in objects.difference(&held) {
            if fresh_store {
                let value = pen.get(self.node(), key).await?;
                added += u64::from(handover.hold_taken(key, &value)?);
            } else {
                pen.remove(self.node(), key).await?;
            }
        }
        let uncopied: Vec<Vec<u8>> = held.difference(&objects).cloned().collect();
        if self.pen_carried_away.load(std::sync::atomic::Ordering::Acquire) {
            return Ok((handover.drop_held(&uncopied)?, added));
        }
        for key in &uncopied {
            if let Some(value) = handover.held_value(key)? {
                pen.put(self.node(), key, &value).await?;
            }
        }
        Ok((0, added))
    }

    /// Remove, every [`TIDY_PERIOD`], the objects of hooks this node no
    /// longer holds (released, purged, erased), until the task is stopped.
    pub fn tidy_pen_in_background(self: &std::sync::Arc<Self>, handover: Handover) -> tokio::task::JoinHandle<()> {
        let fleet = self.clone();
        tokio::spawn(async move {
            let mut tidy = Tidy::default();
            loop {
                tokio::time::sleep(TIDY_PERIOD).await;
                if let Err(e) = fleet.tidy_pen(&handover, &mut tidy).await {
                    tracing::debug!("tidying the pen's copies: {e}");
                }
            }
        })
    }

    /// One turn of [`Fleet::tidy_pen_in_background`]. An object is removed
    /// only when two turns in a row found no hook held under its key: the
    /// edge copies a hook before it holds it, and a turn may fall between.
    async fn tidy_pen(&self, handover: &Handover, tidy: &mut Tidy) -> Result<(), FleetError> {
        let changes = handover.pen_changes();
        if tidy.changes == Some(changes) && tidy.unheld.is_empty() {
            return Ok(());
        }
        let pen = &self.connection.pen;
        let objects = pen.keys(self.node()).await?;
        let held = handover.held_keys()?;
        let unheld: BTreeSet<Vec<u8>> = objects.difference(&held).cloned().collect();
        let stale: Vec<&Vec<u8>> = unheld.intersection(&tidy.unheld).collect();
        for key in &stale {
            pen.remove(self.node(), key).await?;
        }
        if !stale.is_empty() {
            tracing::debug!(removed = stale.len(), "copies of hooks no longer held here removed from the pen bucket");
        }
        tidy.unheld = unheld.difference(&tidy.unheld).cloned().collect();
        tidy.changes = Some(changes);
        Ok(())
    }
}

/// What the last turn of tidying found.
#[derive(Default)]
struct Tidy {
    /// The pen's count of writes then.
    changes: Option<u64>,
    /// Objects then under no held hook.
    unheld: BTreeSet<Vec<u8>>,
}
