//! The running node: its parts started from a [`Config`] in the order that
//! keeps the core invariant (the store and its recovery before anything
//! that reads or writes rows), and stopped in the reverse order.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use thiserror::Error;
use tokio::task::JoinHandle;

use crate::config::{Config, Problem, Role};
use crate::dispatch::Dispatcher;
use crate::edge::Edge;
use crate::queue::{Queue, QueueError, SinkDurability, SourceDurability, WalMode, check_durable};
use crate::replay::{ReplayError, Replays};
use crate::runtime::{LoadError, Runtime, RuntimeError};
use crate::source::{LiveDirectory, Origin, SinkBinding, Source};
use crate::tenant::{Erasures, SourceRecords};

#[derive(Debug, Error)]
pub enum StartError {
    /// The configuration cannot run: every problem found, by key.
    #[error("{} configuration problem(s):\n{}", .0.len(), .0.iter().map(|p| format!("  - {p}")).collect::<Vec<_>>().join("\n"))]
    Config(Vec<Problem>),
    #[error("cannot create {path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("the sink runtime: {0}")]
    Runtime(#[from] RuntimeError),
    #[error("the store at {path}: {source}")]
    Store { path: String, source: QueueError },
    #[error("replay jobs: {0}")]
    Replay(#[from] ReplayError),
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
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

/// What a sink reload did.
#[derive(Clone, Debug, Default, serde::Serialize, utoipa::ToSchema)]
pub struct ReloadReport {
    /// Sinks now running a new component: (source, sink, old sha256, new sha256).
    pub swapped: Vec<Swapped>,
    /// Sinks whose component had not changed.
    pub unchanged: usize,
    /// Sinks whose new component failed to load (the old one keeps running).
    pub failed: Vec<ReloadFailure>,
}

#[derive(Clone, Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Swapped {
    pub source: String,
    pub sink: String,
    pub from: String,
    pub to: String,
}

#[derive(Clone, Debug, serde::Serialize, utoipa::ToSchema)]
pub struct ReloadFailure {
    pub source: String,
    pub sink: String,
    pub reason: String,
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
        let loaded = load_sources(&config, &runtime).await.map_err(StartError::Config)?;
        let sources = Arc::new(LiveDirectory::default());
        for source in loaded {
            sources.insert(source, Origin::Config);
        }

        let mut boot = BootReport::default();
        let mut tasks = Vec::new();
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
        };
        let source_records = match &queue {
            Some(q) => SourceRecords::Store(q.clone()),
            None => SourceRecords::File(config.node.data_dir.join("sources.json")),
        };
        boot.runtime_sources = load_runtime_sources(&config, &runtime, &source_records, &sources).await;
        let dispatching = config.node.roles.contains(&Role::Dispatch);
        let (dispatcher, replays) = match &queue {
            Some(queue) if dispatching => {
                let dispatcher = Dispatcher::start(queue.clone(), sources.clone(), config.dispatch_config());
                let replays = Replays::new(queue.clone(), sources.clone());
                boot.resumed_replays = replays.resume_all()?;
                tasks.push(Queue::sweep_in_background(queue.clone(), Duration::from_secs(60)));
                (Some(dispatcher), Some(replays))
            }
            _ => (None, None),
        };
        let erasures = queue.as_ref().map(|q| {
            // Deliveries of an erasing tenant get this long to finish.
            let grace = Duration::from_millis(config.dispatch.attempt_timeout_ms) + Duration::from_secs(1);
            Erasures::new(q.clone(), sources.clone(), grace)
        });
        if let Some(erasures) = &erasures {
            boot.resumed_erasures = erasures
                .resume_all()
                .map_err(|source| StartError::Store { path: config.store_dir().display().to_string(), source })?;
        }
        let edge = config
            .node
            .roles
            .contains(&Role::Ingest)
            .then(|| Arc::new(Edge::new(config.edge_config(), sources.clone(), queue.clone())));
        if let (Some(edge), Some(q)) = (&edge, &mut queue) {
            for (tenant, rate) in crate::tenant::stored_limits(q).unwrap_or_default() {
                edge.tenant_limits
                    .set_rate(&tenant, Some(crate::edge::rate::Rate { per_second: rate.rate, burst: rate.burst }));
            }
        }
        Ok(Node {
            config,
            runtime,
            sources,
            queue,
            dispatcher,
            replays,
            erasures,
            source_records,
            edge,
            boot,
            source_writes: tokio::sync::Mutex::new(()),
            tasks: Mutex::new(tasks),
        })
    }

    /// Load every sink whose component file changed since it was loaded,
    /// and swap it in: deliveries already running finish on the old
    /// instance; the next ones use the new. A component that fails to
    /// load leaves the old one running.
    pub async fn reload_sinks(&self) -> ReloadReport {
        let _writing = self.source_writes.lock().await;
        let mut report = ReloadReport::default();
        for (source, origin) in self.sources.all() {
            let mut bindings = Vec::with_capacity(source.sinks.len());
            let mut changed = false;
            for binding in &source.sinks {
                let name = binding.sink.label().sink.clone();
                let Some(spec) = self.config.sink_spec(&source.name, &name) else {
                    bindings.push(binding.clone());
                    continue;
                };
                let current = match &spec.component {
                    crate::runtime::ComponentSource::Path(path) => {
                        std::fs::read(path).map(|b| crate::digest::sha256_hex(&b))
                    }
                    _ => Ok(binding.sink.sha256().to_string()),
                };
                let fresh = match current {
                    Ok(sha) if sha == binding.sink.sha256() => None,
                    Ok(_) => Some(self.runtime.load(spec).await.map_err(|e| e.to_string())),
                    Err(e) => Some(Err(format!("cannot read the component: {e}"))),
                };
                match fresh {
                    None => {
                        report.unchanged += 1;
                        bindings.push(binding.clone());
                    }
                    Some(Ok(sink)) => {
                        report.swapped.push(Swapped {
                            source: source.name.clone(),
                            sink: name,
                            from: binding.sink.sha256().to_string(),
                            to: sink.sha256().to_string(),
                        });
                        bindings.push(SinkBinding { index: binding.index, sink: Arc::new(sink) });
                        changed = true;
                    }
                    Some(Err(reason)) => {
                        tracing::error!(source = %source.name, sink = %name, "reload failed, keeping the loaded component: {reason}");
                        report.failed.push(ReloadFailure { source: source.name.clone(), sink: name, reason });
                        bindings.push(binding.clone());
                    }
                }
            }
            if changed {
                let mut swapped = (*source).clone();
                swapped.sinks = bindings;
                self.sources.insert(swapped, origin);
            }
        }
        for s in &report.swapped {
            tracing::info!(source = %s.source, sink = %s.sink, from = %&s.from[..12], to = %&s.to[..12], "sink reloaded");
        }
        report
    }

    /// Keep a background task of the node, stopped at shutdown.
    pub fn adopt(&self, task: JoinHandle<()>) {
        self.tasks.lock().unwrap_or_else(|e| e.into_inner()).push(task);
    }

    /// Stop dispatch and background work, then close the store once
    /// nothing else holds it (the edge's connections let go as they end).
    pub async fn shutdown(self) {
        let Node { dispatcher, tasks, queue, edge, sources, replays, erasures, source_records, .. } = self;
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
        for task in tasks.into_inner().unwrap_or_else(|e| e.into_inner()) {
            task.abort();
            let _ = task.await;
        }
        drop((edge, sources, source_records));
        let Some(mut queue) = queue else { return };
        for _ in 0..50 {
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

/// Load every configured source with its sinks, and check that each can
/// run: the component loads, takes its options, and (under `wal.mode:
/// none`) some sink of each source is durable. Every failure is a problem
/// naming its key.
pub async fn load_sources(config: &Config, runtime: &Runtime) -> Result<Vec<Source>, Vec<Problem>> {
    let mut problems = Vec::new();
    let mut sources = Vec::new();
    for (name, section) in &config.sources {
        match load_source(config, runtime, name, section).await {
            Ok(source) => sources.push(source),
            Err(mut more) => problems.append(&mut more),
        }
    }
    if problems.is_empty() { Ok(sources) } else { Err(problems) }
}

/// One source, from its section: its verifier, dedupe rule and loaded
/// sinks. The admin API builds runtime sources with this too.
pub async fn load_source(
    config: &Config,
    runtime: &Runtime,
    name: &str,
    section: &crate::config::SourceSection,
) -> Result<Source, Vec<Problem>> {
    let key = format!("sources.{name}");
    let mut problems = Vec::new();
    let verifier = match &section.verify {
        Some(verify) => crate::config::verifier(&format!("{key}.verify"), verify).map_err(|p| problems.push(p)).ok(),
        None => None,
    };
    let dedupe = match &section.dedupe {
        Some(rule) => crate::config::dedupe_rule(&format!("{key}.dedupe"), rule).map_err(|p| problems.push(p)).ok(),
        None => None,
    };
    let mut sinks = Vec::new();
    for (index, sink_name) in section.sinks.iter().enumerate() {
        let Some(spec) = config.sink_spec(name, sink_name) else {
            problems.push(Problem::new(format!("{key}.sinks[{index}]"), format!("no sink named `{sink_name}`")));
            continue;
        };
        match runtime.load(spec).await {
            Ok(sink) => sinks.push(SinkBinding { index: index as u16, sink: Arc::new(sink) }),
            Err(e) => problems.push(Problem::new(load_error_key(sink_name, &e), e.to_string())),
        }
    }
    if problems.is_empty() {
        let durability = SourceDurability {
            source: name.to_string(),
            sinks: sinks
                .iter()
                .map(|b| SinkDurability { name: b.sink.label().sink.clone(), durable: b.sink.durable() })
                .collect(),
        };
        if let Err(e) = check_durable(config.wal_mode(), &durability) {
            problems.push(Problem::new(format!("{key}.sinks"), e.to_string()));
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(Source {
        name: name.to_string(),
        tenant: section.tenant.clone(),
        verifier,
        on_verify_failure: crate::config::on_verify_failure(section.on_verify_failure),
        dedupe,
        sinks,
        forward_headers: Arc::new(match &section.forward_headers {
            Some(names) => crate::source::ForwardHeaders::Only(names.iter().map(|n| n.to_ascii_lowercase()).collect()),
            None => crate::source::ForwardHeaders::Safe,
        }),
    })
}

/// Load the sources the admin API created. One that no longer loads (its
/// sink was removed from the config, say) is reported and left out: its
/// hooks are refused and its rows dead-lettered as `gone`.
async fn load_runtime_sources(
    config: &Config,
    runtime: &Runtime,
    records: &SourceRecords,
    sources: &LiveDirectory,
) -> usize {
    let stored = match records.all() {
        Ok(stored) => stored,
        Err(e) => {
            tracing::error!("cannot read the stored sources: {e}");
            return 0;
        }
    };
    let mut loaded = 0;
    for (name, section) in stored {
        if sources.get(&name).is_some() {
            tracing::error!(source = %name, "a stored source has the name of a config source; the config's wins");
            continue;
        }
        match load_source(config, runtime, &name, &section).await {
            Ok(source) => {
                sources.insert(source, Origin::Runtime);
                loaded += 1;
            }
            Err(problems) => {
                for problem in problems {
                    tracing::error!(source = %name, "stored source not loaded: {problem}");
                }
            }
        }
    }
    loaded
}

/// The key a sink's load failure is about.
fn load_error_key(sink: &str, error: &LoadError) -> String {
    match error {
        LoadError::Options { .. } | LoadError::OptionsJson { .. } | LoadError::Init { .. } => {
            format!("sinks.{sink}.options")
        }
        LoadError::Policy { .. } => format!("sinks.{sink}.allow"),
        LoadError::Limits { .. } => format!("sinks.{sink}.memory_mib"),
        LoadError::Directory { .. } => format!("sinks.{sink}.directory"),
        LoadError::Read { .. } | LoadError::Component { .. } | LoadError::UnknownBuiltin { .. } => {
            format!("sinks.{sink}.component")
        }
    }
}

/// What a `201` promises under this configuration, without flattery.
pub fn durability_line(config: &Config) -> String {
    match config.wal_mode() {
        WalMode::Disk => "an acked hook is fsynced to this host's disk: durable to power loss on THIS host only".into(),
        WalMode::Dual => format!(
            "an acked hook is fsynced to the store and to the intake log at {}: it survives losing either copy, \
             still on THIS host only",
            config.intake_dir().display()
        ),
        WalMode::None => "an acked hook was confirmed by every sink of its source; nothing is kept here, so a \
                          failed sink means a 503 and the provider's retry"
            .into(),
    }
}
