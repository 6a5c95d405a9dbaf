//! The fleet (`wal.mode: fleet`): nodes that share one NATS JetStream, so an
//! acked hook survives the loss of the node that took it.
//!
//! - **Intake**: every hook is published to this node's subject of a stream
//!   replicated to a quorum (`intake::JetStreamLog`), then written to the
//!   node's own store; only then is it acked.
//! - **The invariant**: a `2xx`, accepted or duplicate, is given only for a
//!   hook that a live node has committed or will deliver. A round that
//!   fails after the stream took some of its hooks leaves them *unsettled*:
//!   the writer publishes them again under the same message ids until the
//!   stream vouches for them and commits them, and answers a retry whose
//!   duplicate is unsettled with `503` meanwhile; after a restart it
//!   commits what it logged and lacks before serving (`queue::settle`). A
//!   node that dies with hooks unsettled is taken over like any other.
//! - **Dedupe** across nodes: the stream's duplicate window, keyed by the
//!   provider's dedupe key (see `intake::jetstream`).
//! - **Outcomes** (`outcomes`): delivered rows and dead letters are
//!   published on the node's outcome subject, so a taker skips what was
//!   delivered and keeps the dead letters.
//! - **Leases** (`lease`): each node renews `lease.<node>` in a KV bucket;
//!   peers watch them.
//! - **Takeover** (`takeover`): when a lease lapses, one live peer claims
//!   `taken.<node>` (create or compare-and-set: one winner) and commits the
//!   lapsed node's undelivered hooks into its own store and subject. A node
//!   that comes back drops what was taken (`rejoin`); a node that finds
//!   itself taken while running stops; a takeover whose taker died
//!   mid-import is closed by its node, back on its store (`abandoned`).
//!
//! - **The quarantine pen** (`pen`): each held hook is copied to the
//!   object store, so a takeover carries it.
//!
//! Subjects: `<stream>.hook.<node>` and `<stream>.outcome.<node>` (the
//! stream's name in lower case); bucket `<stream>-fleet`; hooks over the
//! servers' message limit in the object store `<stream>-bodies`; the pens'
//! copies in the object store `<stream>-pen`.

mod abandoned;
mod bucket;
mod lease;
pub mod outcomes;
mod pen;
mod settings;
mod setup;
mod status;
mod takeover;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use thiserror::Error;

use crate::intake::{JetStreamLog, PublishStats, Streams};
use crate::store::keys::meta;
use crate::store::{Batch, Cf, Durability, Store};

pub use lease::{AtBoot, Lease, Taken, TakenState};
pub use settings::{FleetSettings, TlsFiles};
pub use status::{FleetStatus, NodeStatus, PublishFigures};

/// The names a fleet uses, from its stream's name.
#[derive(Clone, Debug)]
pub struct Subjects {
    prefix: String,
    stream: String,
}

impl Subjects {
    pub fn new(stream: &str) -> Subjects {
        Subjects { prefix: stream.to_ascii_lowercase(), stream: stream.to_string() }
    }
    pub fn hooks(&self, node: &str) -> String {
        format!("{}.hook.{node}", self.prefix)
    }
    pub fn outcomes(&self, node: &str) -> String {
        format!("{}.outcome.{node}", self.prefix)
    }
    pub fn all_hooks(&self) -> String {
        format!("{}.hook.*", self.prefix)
    }
    pub fn all_outcomes(&self) -> String {
        format!("{}.outcome.*", self.prefix)
    }
    pub fn bucket(&self) -> String {
        format!("{}-fleet", self.stream)
    }
    /// The object store bucket of hooks over the servers' message limit.
    pub fn bodies(&self) -> String {
        format!("{}-bodies", self.stream)
    }
    /// The object store bucket of the quarantine pens' copies.
    pub fn pen(&self) -> String {
        format!("{}-pen", self.stream)
    }
}

#[derive(Debug, Error)]
pub enum FleetError {
    #[error("cannot reach NATS at {servers}: {reason}")]
    Unreachable { servers: String, reason: String },
    #[error("fleet.credentials {path}: {reason}")]
    Credentials { path: String, reason: String },
    #[error(
        "cannot create JetStream stream {stream} with {replicas} replicas: {reason} \
         (fleet.replicas needs at least that many JetStream servers in the cluster)"
    )]
    CreateStream { stream: String, replicas: usize, reason: String },
    #[error(
        "JetStream stream {stream} exists with other settings: {}; every node of a fleet must agree, \
         so it is not changed (fix ankusa.yml, or remove the stream if it holds nothing you need)",
        differences.join("; ")
    )]
    StreamMismatch { stream: String, differences: Vec<String> },
    #[error("node id {node} is in use: its lease was renewed {ago_ms} ms ago by another process")]
    NodeIdInUse { node: String, ago_ms: u64 },
    #[error(
        "this store holds undelivered hooks from before wal.mode fleet; drain them in disk mode first \
         (they are not in the replicated log, and a takeover could not find them)"
    )]
    UnloggedHooks,
    #[error("NATS: {0}")]
    Nats(String),
    #[error("the store: {0}")]
    Store(String),
    #[error("the queue: {0}")]
    Queue(#[from] crate::queue::QueueError),
}

/// A node of the fleet.
pub struct Fleet {
    settings: FleetSettings,
    connection: setup::Connected,
    publish: Arc<PublishStats>,
    /// This node's store, and its id as its hooks' headers name it.
    store: Arc<dyn Store>,
    store_id: u64,
    /// The revision of `taken.<this node>` this node has settled with.
    reconciled: AtomicU64,
    /// The revision of `lease.<this node>` this node last wrote: its next
    /// renewal is a compare-and-set on it.
    lease_revision: AtomicU64,
    started_ms: u64,
    watch: std::sync::Mutex<lease::Watch>,
    /// Takeovers this node ran since it started.
    ran: std::sync::Mutex<Vec<Taken>>,
    outcomes: std::sync::OnceLock<Arc<outcomes::Publisher>>,
    /// Rows of this node's hooks a taker delivered before it died
    /// mid-import, to be settled delivered once outcomes publish.
    delivered_by_dead_taker: std::sync::Mutex<Vec<(u64, u16)>>,
    /// A takeover this node settled with at its start carried its pen.
    pen_carried_away: std::sync::atomic::AtomicBool,
}

impl Fleet {
    /// Connect, check (or make) the stream and bucket, and name this
    /// node's store. Refuses rather than runs half-configured.
    pub async fn connect(settings: FleetSettings, store: Arc<dyn Store>) -> Result<Arc<Fleet>, FleetError> {
        let connection = setup::connect(&settings).await?;
        let store_id = store_id(store.as_ref())?;
        if store.created() {
            mark_logged(store.as_ref())?;
        } else if read_u64(store.as_ref(), meta::FLEET_LOGGED)?.is_none() {
            if crate::queue::has_rows(store.as_ref()).map_err(|e| FleetError::Store(e.to_string()))? {
                return Err(FleetError::UnloggedHooks);
            }
            mark_logged(store.as_ref())?;
        }
        let fleet = Fleet {
            settings,
            connection,
            publish: Arc::default(),
            store,
            store_id,
            reconciled: AtomicU64::new(0),
            lease_revision: AtomicU64::new(0),
            started_ms: crate::queue::now_ms(),
            watch: Default::default(),
            ran: Default::default(),
            outcomes: Default::default(),
            delivered_by_dead_taker: Default::default(),
            pen_carried_away: Default::default(),
        };
        // A bucket made again since this store last ran is settled with
        // anew before the settled revision is read.
        fleet.check_bucket().await?;
        let reconciled = read_u64(fleet.store.as_ref(), meta::FLEET_RECONCILED)?.unwrap_or(0);
        fleet.reconciled.store(reconciled, Ordering::Release);
        Ok(Arc::new(fleet))
    }

    /// The intake log the writer publishes through.
    pub fn intake_log(&self) -> JetStreamLog {
        let streams = Streams {
            context: self.connection.context.clone(),
            stream: self.connection.stream.clone(),
            bodies: self.connection.bodies.clone(),
        };
        JetStreamLog::new(
            streams,
            tokio::runtime::Handle::current(),
            self.settings.subjects().hooks(&self.settings.node_id),
            self.store_id,
            self.settings.publish_timeout,
            self.publish.clone(),
        )
    }

    pub fn settings(&self) -> &FleetSettings {
        &self.settings
    }

    /// What a `201` survives in this mode, for the banner and status.
    pub fn ack_survives(&self) -> String {
        format!(
            "the loss of this host; quorum of {} JetStream servers ({} of {} may fail)",
            self.settings.replicas,
            self.settings.replicas.saturating_sub(1) / 2,
            self.settings.replicas
        )
    }

    fn node(&self) -> &str {
        &self.settings.node_id
    }

    fn set_reconciled(&self, store: &dyn Store, revision: u64) -> Result<(), FleetError> {
        write_meta(store, meta::FLEET_RECONCILED, &revision.to_be_bytes())?;
        self.reconciled.store(revision, Ordering::Release);
        Ok(())
    }
}

/// This store's id: made once, kept in its meta family.
fn store_id(store: &dyn Store) -> Result<u64, FleetError> {
    if let Some(id) = read_u64(store, meta::FLEET_STORE)? {
        return Ok(id);
    }
    let mut bytes = [0u8; 8];
    getrandom::getrandom(&mut bytes).map_err(|e| FleetError::Store(format!("no randomness for a store id: {e}")))?;
    let id = u64::from_be_bytes(bytes);
    write_meta(store, meta::FLEET_STORE, &id.to_be_bytes())?;
    Ok(id)
}

fn mark_logged(store: &dyn Store) -> Result<(), FleetError> {
    write_meta(store, meta::FLEET_LOGGED, &1u64.to_be_bytes())
}

fn read_u64(store: &dyn Store, key: &[u8]) -> Result<Option<u64>, FleetError> {
    let value = read_meta(store, key)?;
    Ok(value.and_then(|v| <[u8; 8]>::try_from(v.as_slice()).ok()).map(u64::from_be_bytes))
}

/// A value of the store's meta family.
fn read_meta(store: &dyn Store, key: &[u8]) -> Result<Option<Vec<u8>>, FleetError> {
    store.get(Cf::Meta, key).map_err(|e| FleetError::Store(e.to_string()))
}

/// Write one value of the store's meta family, synced: what the fleet
/// keeps of itself must survive a crash right after.
fn write_meta(store: &dyn Store, key: &[u8], value: &[u8]) -> Result<(), FleetError> {
    let mut batch = Batch::new();
    batch.put(Cf::Meta, key.to_vec(), value.to_vec());
    store.write(&batch, Durability::Synced).map_err(|e| FleetError::Store(e.to_string()))
}
