//! The running node: its parts started from a [`Config`] in the order that
//! keeps the core invariant (the store and its recovery before anything
//! that reads or writes rows), and stopped in the reverse order.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use thiserror::Error;
use tokio::task::JoinHandle;

use crate::config::{Config, Problem, Role};
use crate::dispatch::Dispatcher;
use crate::edge::Edge;
use crate::fleet::{Fleet, FleetError};
use crate::queue::{Engines, Queue, QueueError, WalMode};
use crate::replay::{ReplayError, Replays};
use crate::runtime::{ComponentSource, Runtime, RuntimeError};
use crate::source::{LiveDirectory, Origin, ReloadReport, Specs};
use crate::tenant::{Erasures, SourceRecords};

/// A stop's drain ends once this passes with no row delivered.
const DRAIN_STALLED: Duration = Duration::from_secs(1);

#[derive(Debug, Error)]
pub enum StartError {
    /// The configuration cannot run: every problem found, by key.
    #[error("{} configuration problem(s):\n{}", .0.len(), .0.iter().map(|p| format!("  - {p}")).collect::<Vec<_>>().join("\n"))]
    Config(Vec<Problem>),
    #[error("cannot create {path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("the sink runtime: {0}")]
    Runtime(#[from] RuntimeError),
    #[error("cannot start dispatch: {0}")]
    Dispatch(std::io::Error),
    #[error("the store at {path}: {source}")]
    Store { path: String, source: QueueError },
    #[error("replay jobs: {0}")]
    Replay(#[from] ReplayError),
    #[error("wal.mode fleet: {0}")]
    Fleet(FleetError),
}

impl From<FleetError> for StartError {
    fn from(e: FleetError) -> StartError {
        StartError::Fleet(e)
    }
}

/// What the boot found, for the banner.
#[derive(Clone, Debug, Default)]
pub struct BootReport {
    /// Rows a previous run left inflight, due again now.
    pub recovered: u64,
    pub next_seq: u64,
    pub disk_bytes: u64,
    /// Replay jobs resumed.
    pub resumed_replays: usize,
    /// Tenant erasures resumed.
    pub resumed_erasures: usize,
    /// Sources created through the admin API, loaded from the store.
    pub runtime_sources: usize,
}

pub struct Node {
    pub config: Config,
    pub runtime: Arc<Runtime>,
    pub sources: Arc<LiveDirectory>,
    /// `None` under `wal.mode: none`.
    pub queue: Option<Arc<Queue>>,
    /// `wal.mode: fleet`: this node's place in the fleet.
    pub fleet: Option<Arc<Fleet>>,
    pub dispatcher: Option<Dispatcher>,
    /// Replay jobs (with a queue and the dispatch role).
    pub replays: Option<Replays>,
    /// Tenant erase jobs (with a queue).
    pub erasures: Option<Erasures>,
    /// Where sources created through the admin API are kept.
    pub source_records: SourceRecords,
    pub edge: Option<Arc<Edge>>,
    pub boot: BootReport,
    /// Serialises changes to sources (admin writes, sink reloads).
    pub source_writes: tokio::sync::Mutex<()>,
    /// Per sink, the components uploaded for it, newest last: the running
    /// one and the one before are kept, older ones forgotten.
    uploads: Mutex<HashMap<String, VecDeque<String>>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Node {
    /// Start everything but the listeners: load and check every sink, open
    /// the store and recover it, then start dispatch, replays and the edge
    /// as the roles say.
    pub async fn start(config: Config) -> Result<Node, StartError> {
        let data_dir = &config.node.data_dir;
        std::fs::create_dir_all(data_dir)
            .map_err(|source| StartError::Io { path: data_dir.display().to_string(), source })?;
        let runtime = Arc::new(Runtime::new(config.engine_config(), Some(config.component_cache_dir()))?);
        let settings = config.sources_settings().map_err(StartError::Config)?;
        let loaded =
            crate::source::load_all(settings, &runtime, config.wal_mode()).await.map_err(StartError::Config)?;
        let sources = Arc::new(LiveDirectory::default());
        for source in loaded {
            sources.insert(source, Origin::Config);
        }

        let mut boot = BootReport::default();
        let mut tasks = Vec::new();
        let mut fleet = None;
        let mut queue = match config.wal_mode() {
            WalMode::None => None,
            WalMode::Disk | WalMode::Dual => {
                let path = config.store_dir();
                let store_error = |source| StartError::Store { path: path.display().to_string(), source };
                let queue = Queue::open(&path, config.queue_config()).map_err(store_error)?;
                boot.recovered = queue.recover_inflight(crate::queue::now_ms()).map_err(store_error)? as u64;
                let stats = queue.stats().map_err(store_error)?;
                (boot.next_seq, boot.disk_bytes) = (stats.next_seq, stats.disk_bytes);
                Some(Arc::new(queue))
            }
            WalMode::Fleet => {
                let (queue, joined) = Self::join_fleet(&config, &mut boot).await?;
                tasks.push(joined.run(queue.handover()));
                tasks.push(joined.tidy_pen_in_background(queue.handover()));
                fleet = Some(joined);
                Some(queue)
            }
        };
        let source_records = match &queue {
            Some(q) => SourceRecords::Store(q.records()),
            None => SourceRecords::File(config.node.data_dir.join("sources.json")),
        };
        boot.runtime_sources = source_records.load_into(&config, &runtime, &sources).await;
        let dispatching = config.node.roles.contains(&Role::Dispatch);
        let (dispatcher, replays) = match &queue {
            Some(queue) if dispatching => {
                let dispatcher = Dispatcher::start(queue.deliveries(), sources.clone(), config.dispatch_config())
                    .map_err(StartError::Dispatch)?;
                let replays = Replays::new(queue.clone(), sources.clone());
                boot.resumed_replays = replays.resume_all()?;
                tasks.push(Queue::sweep_in_background(queue.clone(), Duration::from_secs(60)));
                (Some(dispatcher), Some(replays))
            }
            _ => (None, None),
        };
        let erasures = queue.as_ref().map(|q| {
            // Deliveries of an erasing tenant get this long to finish.
            let grace = config.dispatch.attempt_timeout + Duration::from_secs(1);
            Erasures::new(q.clone(), sources.clone(), grace)
        });
        if let Some(erasures) = &erasures {
            boot.resumed_erasures = erasures
                .resume_all()
                .map_err(|source| StartError::Store { path: config.store_dir().display().to_string(), source })?;
        }
        let edge = config.node.roles.contains(&Role::Ingest).then(|| {
            let edge = Edge::new(config.edge_config(), sources.clone(), queue.as_deref());
            Arc::new(match &fleet {
                Some(fleet) => edge.with_pen_copies(fleet.pen_copies()),
                None => edge,
            })
        });
        if let (Some(edge), Some(q)) = (&edge, &mut queue) {
            for (tenant, rate) in crate::tenant::stored_limits(&q.records()).unwrap_or_default() {
                edge.tenant_limits
                    .set_rate(&tenant, Some(crate::edge::rate::Rate { per_second: rate.rate, burst: rate.burst }));
            }
        }
        Ok(Node {
            config,
            runtime,
            sources,
            queue,
            fleet,
            dispatcher,
            replays,
            erasures,
            source_records,
            edge,
            boot,
            source_writes: tokio::sync::Mutex::new(()),
            uploads: Default::default(),
            tasks: Mutex::new(tasks),
        })
    }

    /// `fleet`: reach the JetStream cluster, open the store with JetStream
    /// as its intake log, and settle with the fleet (drop what a peer took
    /// over, take back what a lost store held) before anything delivers.
    async fn join_fleet(config: &Config, boot: &mut BootReport) -> Result<(Arc<Queue>, Arc<Fleet>), StartError> {
        let path = config.store_dir();
        let store_error = |source| StartError::Store { path: path.display().to_string(), source };
        let queue_config = config.queue_config();
        let engines = Engines::embedded(&path, &queue_config).map_err(store_error)?;
        let (store, fresh) = (engines.store.clone(), engines.store.created());
        let fleet = Fleet::connect(config.fleet_settings(), store.clone()).await?;
        let lease = fleet.take_up_lease().await?;
        let intake = crate::intake::Intake::Hooks(Box::new(fleet.intake_log()));
        let engines = Engines { store: engines.store, intake: Some(intake) };
        let queue = Queue::start(engines, queue_config).map_err(store_error)?;
        boot.recovered = queue.recover_inflight(crate::queue::now_ms()).map_err(store_error)? as u64;
        let handover = queue.handover();
        fleet.rejoin(&handover, store.as_ref(), fresh).await?;
        if let crate::fleet::AtBoot::Claimed { by } = lease {
            // Settled with the takeover: the lease is this node's again.
            fleet.take_back_lease().await?;
            tracing::warn!(by, "this node's lease was claimed by a peer while it was away; taken back after settling");
            // The peer, still holding its claim until now, may have begun
            // another takeover since the record was read: every takeover
            // that found the claim standing wrote its record first, so it
            // is read, and settled with, once more.
            fleet.rejoin(&handover, store.as_ref(), fresh).await?;
        }
        let (dropped, held) = fleet.settle_pen(&handover, fresh).await?;
        if dropped + held > 0 {
            tracing::warn!(dropped, held, "the quarantine pen settled with its copies in the fleet");
        }
        // Hooks this store logged and lacks (a crash before a write was
        // synced, a round that failed after the log took them) are
        // committed before the edge or dispatch start.
        let floor = fleet.taken_through().await?;
        let settled = handover.settle_from_log(floor).await.map_err(FleetError::from)?;
        if settled > 0 {
            tracing::warn!(hooks = settled, "committed hooks this node had logged but not stored");
        }
        fleet.drop_abandoned_imports(&handover, store.as_ref()).await?;
        handover.set_outcome_log(fleet.outcome_log());
        fleet.settle_delivered_by_taker(&queue.deliveries())?;
        // No row is claimed before the lease loop first proves the lease.
        let now = std::time::Instant::now();
        handover.prove_lease(now, now);
        let stats = queue.stats().map_err(store_error)?;
        (boot.next_seq, boot.disk_bytes) = (stats.next_seq, stats.disk_bytes);
        Ok((Arc::new(queue), fleet))
    }

    /// Load every sink whose component file changed since it was loaded,
    /// and swap it in (see [`crate::source::reload_sinks`]); serialised with
    /// the admin API's source writes.
    pub async fn reload_sinks(&self) -> ReloadReport {
        let _writing = self.source_writes.lock().await;
        let specs = Specs {
            sink: |source: &str, sink: &str| self.config.sink_spec(source, sink),
            transform: |name: &str| self.config.transform_spec(name),
        };
        let report = crate::source::reload_sinks(&self.sources, &self.runtime, specs).await;
        self.tell_dispatch(&report);
        report
    }

    /// Dispatch hears of each swapped component (see
    /// [`Dispatcher::component_swapped`]).
    fn tell_dispatch(&self, report: &ReloadReport) {
        if let Some(dispatcher) = &self.dispatcher {
            for swapped in &report.swapped {
                dispatcher.component_swapped(&swapped.source, &swapped.sink);
            }
        }
    }

    /// Swap `component` in for the configured sink (or transform) `name`
    /// wherever a source delivers through it (`ankusa sink dev`'s upload).
    /// It lasts until it is reloaded from its file or the node restarts.
    /// `None`: no such sink or transform.
    pub async fn replace_sink_component(&self, name: &str, component: Arc<Vec<u8>>) -> Option<ReloadReport> {
        let is_transform = self.config.transforms.contains_key(name);
        if !is_transform {
            self.config.sinks.get(name)?;
        }
        let _writing = self.source_writes.lock().await;
        let uploaded = ComponentSource::Bytes { origin: format!("upload of {name}"), bytes: component.clone() };
        let specs = Specs {
            sink: |source: &str, sink: &str| {
                let mut spec = self.config.sink_spec(source, sink).filter(|_| !is_transform && sink == name)?;
                spec.component = uploaded.clone();
                Some(spec)
            },
            transform: |transform: &str| {
                let mut spec = self.config.transform_spec(transform).filter(|_| is_transform && transform == name)?;
                spec.component = uploaded.clone();
                Some(spec)
            },
        };
        let report = crate::source::reload_sinks(&self.sources, &self.runtime, specs).await;
        self.tell_dispatch(&report);
        self.keep_two_uploads(name, &report);
        Some(report)
    }

    /// After an upload for `sink`: of the components uploaded for it, the
    /// running one and the previous one are kept; older ones are forgotten
    /// (compiled files in the cache, checked components in memory), unless
    /// some source still runs them. An hour of `sink dev` edits would keep
    /// every build otherwise.
    fn keep_two_uploads(&self, sink: &str, report: &ReloadReport) {
        let named = |s: &&crate::source::Swapped| s.transform.as_deref().unwrap_or(&s.sink) == sink;
        let Some(new) = report.swapped.iter().find(named).map(|s| s.to.clone()) else { return };
        let evicted: Vec<String> = {
            let mut uploads = self.uploads.lock().unwrap_or_else(|e| e.into_inner());
            let kept = uploads.entry(sink.to_string()).or_default();
            kept.retain(|sha| *sha != new);
            kept.push_back(new);
            let over = kept.len().saturating_sub(2);
            kept.drain(..over).collect()
        };
        let running: HashSet<String> = self
            .sources
            .all()
            .iter()
            .flat_map(|(source, _)| {
                let bindings = source.sinks.iter();
                bindings
                    .flat_map(|b| b.transforms.iter().map(|t| t.sha256()).chain([b.sink.sha256()]))
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .collect();
        for sha in evicted.iter().filter(|sha| !running.contains(*sha)) {
            self.runtime.forget(sha);
        }
    }

    /// The first step of a graceful stop: every hook from now on is
    /// refused `503` with `Retry-After` (see [`Edge::stop_taking_hooks`]).
    pub fn stop_taking_hooks(&self) {
        if let Some(edge) = &self.edge {
            edge.stop_taking_hooks();
        }
    }

    /// `fleet`, at a graceful stop, hooks refused already: deliver what
    /// this node holds while deliveries go on draining it, for at most
    /// `fleet.stop_drain_ms`, so that what a restart or a peer finds is
    /// as little as the sinks allow. Ends early once nothing is left
    /// undelivered, or once a whole second passes without a delivery (a
    /// sink that is down, rows waiting out a retry). What is left: the
    /// rows a stopped node holds.
    pub async fn drain(&self) -> i64 {
        let (Some(fleet), Some(queue), Some(_)) = (&self.fleet, &self.queue, &self.dispatcher) else { return 0 };
        let handover = queue.handover();
        let left = || handover.node_levels().map_or(0, |(pending, _)| pending);
        let deadline = std::time::Instant::now() + fleet.settings().stop_drain;
        let (mut last, mut moved_at) = (left(), std::time::Instant::now());
        while last > 0 && std::time::Instant::now() < deadline && moved_at.elapsed() < DRAIN_STALLED {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let now = left();
            if now < last {
                moved_at = std::time::Instant::now();
            }
            last = now;
        }
        if last > 0 {
            tracing::info!(undelivered = last, "stopping with rows undelivered");
        }
        last
    }

    /// Keep a background task of the node, stopped at shutdown.
    pub fn adopt(&self, task: JoinHandle<()>) {
        self.tasks.lock().unwrap_or_else(|e| e.into_inner()).push(task);
    }

    /// Stop dispatch and background work, then close the store once
    /// nothing else holds it (the edge's connections let go as they end).
    pub async fn shutdown(self) {
        let Node { dispatcher, tasks, queue, fleet, edge, sources, replays, erasures, source_records, .. } = self;
        if let Some(replays) = &replays {
            replays.stop().await;
        }
        if let Some(erasures) = &erasures {
            erasures.stop().await;
        }
        drop((replays, erasures));
        if let Some(dispatcher) = dispatcher {
            dispatcher.stop().await;
        }
        if let Some(fleet) = &fleet {
            fleet.flush_outcomes().await;
        }
        for task in tasks.into_inner().unwrap_or_else(|e| e.into_inner()) {
            task.abort();
            let _ = task.await;
        }
        // The lease loop is stopped and nothing delivers here any more.
        if let (Some(fleet), Some(queue)) = (&fleet, &queue) {
            fleet.release_lease(&queue.handover()).await;
        }
        drop((edge, sources, source_records));
        let Some(mut queue) = queue else { return };
        for _ in 0..50 {
            // The edge's connections and batcher hold handles, not the
            // queue: wait for them as for the queue itself.
            if queue.handles_held() {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            match Arc::try_unwrap(queue) {
                Ok(alone) => {
                    alone.close().await;
                    return;
                }
                Err(shared) => {
                    queue = shared;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        tracing::warn!("the store is still in use after 5 s; leaving its last writes to recovery");
    }
}
