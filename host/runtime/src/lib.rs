//! The sink runtime: loads WebAssembly sink components and runs deliveries
//! through them, sandboxed; and the transforms a binding passes its hooks
//! through first.
//!
//! Shape (one module per job):
//! - `engine`: the node's one wasmtime engine (pooling allocator, epoch
//!   ticker) and the linker every sink is checked against;
//! - `budget`: a call's CPU deadline, counted in epoch ticks the guest
//!   itself ran through;
//! - `cache`: compile once, `.cwasm` on disk keyed by engine and sha256;
//! - `component`: the world check and the `InstancePre` of a component;
//! - `pool`: warm instances per configured sink, retired on trouble;
//! - `instance`: what a store carries, and how a fresh one is set up;
//! - [`capability`]: what a sink may use, one module each with the same
//!   three steps (link, per-sink state, per-instance state): the WASI
//!   sandbox, `log`, `clocks`, `filesystem`, `http` egress, `sockets`;
//! - `egress`: the allow-list and address policy the network capabilities
//!   consume;
//! - `outcome`: what an attempt came to, in the host's error classes;
//! - `transform`: a transform component (`transform-world`) and what its
//!   verdict makes of a hook.
//!
//! Invariant: a guest can never take the node down. Traps, deadlines, memory
//! caps and bad returns end that attempt with `fault` or `timeout`, and the
//! instance involved is dropped; the next delivery gets a fresh one.
//!
//! Callers: dispatch (deliveries), edge in direct mode, the CLI (`sink
//! inspect`, `sink test`) and the plugin test harness.
//!
//! A crate of its own, so that a sink author's tests (`ankusa-harness`)
//! build the component host and nothing of the node: no store, no broker
//! client, no web server. Beside the runtime it holds the scripted peers
//! and JSON cases sink tests use ([`sinktest`]).

mod bindings;
mod budget;
pub mod builtin;
mod cache;
pub mod capability;
mod component;
pub mod egress;
mod engine;
mod error;
mod instance;
pub mod labels;
pub mod outcome;
mod pool;
mod section;
mod sink;
pub mod sinktest;
mod slots;
mod state;
pub mod tls;
pub mod traceparent;
mod transform;

pub use ankusa_common::{digest, error_class, problem, rate, settings};

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use wasmtime::Engine;
use wasmtime::component::Linker;

pub use bindings::{Hook, Level as LogLevel, WIT_VERSION};
pub use capability::{clocks as clock, http, log};
pub use component::ComponentInfo;
pub use engine::EngineConfig;
pub use error::{ComponentError, LoadError, RuntimeError};
pub use labels::SinkLabel;
pub use outcome::{Failure, Outcome};
pub use pool::PoolSnapshot;
pub use section::{SinkDefaults, SinkSettings, TransformSettings};
pub use sink::{BatchLimits, ComponentSource, Sink, SinkLimits, SinkSpec};
use transform::TransformExports;
pub use transform::{Applied, Transform, TransformSpec};

use self::cache::{Compiled, ComponentCache};
use self::capability::SinkContext;
use self::component::{SinkComponent, TransformComponent};
use self::egress::EgressCounter;
use self::instance::StoreFactory;
use self::log::LogChannel;
use self::pool::{Exports, InstancePool, SinkExports};
use self::state::InstanceState;

/// A component compiled and checked against one world (`C`: the sink's
/// or the transform's), with the `InstancePre` its instances start from.
struct Checked<C> {
    compiled: Compiled,
    component: C,
}

/// Components checked, by sha256: each gets its `InstancePre` once,
/// however many sinks (or bindings) use it.
type CheckedMap<C> = Mutex<HashMap<String, Arc<Checked<C>>>>;

/// A component's bytes, and where they came from (for its errors).
struct ComponentBytes<'a> {
    origin: String,
    bytes: std::borrow::Cow<'a, [u8]>,
    /// Their digest, where it is known already (a shipped component's).
    sha256: Option<String>,
}

/// A component checked, its pool made (no instance started yet), and the
/// count of its connections.
type Pooled<E> = (Arc<Checked<<E as Exports>::Component>>, Arc<InstancePool<E>>, Arc<EgressCounter>);

/// A load's component read and checked, and its options as JSON text.
struct Read<C> {
    checked: Arc<Checked<C>>,
    options: String,
}

/// Loaded sinks and transforms others load alike may share, by
/// [`share_key`]; an entry no binding uses any more goes at the next load.
#[derive(Default)]
struct Shelf {
    sinks: HashMap<String, Sink>,
    transforms: HashMap<String, Transform>,
}

impl Shelf {
    /// Forget what only the shelf still holds.
    fn prune(&mut self) {
        self.sinks.retain(|_, sink| Arc::strong_count(&sink.pool) > 1);
        self.transforms.retain(|_, transform| transform.in_use());
    }
}

/// What makes two loads share instances: the same component, options and
/// settings, and the same name (their log lines carry it). `None` for a
/// load under test (a scripted upstream, a manual clock, a fixed resolver,
/// captured logs), which keeps instances of its own.
fn share_key(kind: &str, spec: &SinkSpec, sha256: &str, options: &str) -> Option<String> {
    let private = spec.clock.is_some()
        || spec.capture_logs
        || !matches!(spec.upstream, http::Upstream::Network)
        || !matches!(spec.resolver, egress::Resolver::System);
    if private {
        return None;
    }
    let limits = &spec.limits;
    let settings = format!(
        "{kind}\n{}\n{sha256}\n{options}\n{:?}\n{:?}\n{:?}\n{} {} {:?} {:?} {:?}",
        spec.label.sink,
        spec.egress,
        spec.filesystem,
        spec.tls,
        limits.memory_bytes,
        limits.max_uses,
        limits.http,
        limits.log_rate,
        limits.batch,
    );
    Some(crate::digest::sha256_hex(settings.as_bytes()))
}

/// The node's sink runtime. Cheap to share behind an `Arc`.
pub struct Runtime {
    engine: Engine,
    epochs: budget::EpochClock,
    /// The node's `max_instances`, shared by every pool.
    slots: Arc<slots::InstanceSlots>,
    shelf: Mutex<Shelf>,
    /// Digests of the shipped components loaded so far, by name.
    shipped_digests: Mutex<HashMap<String, String>>,
    linker: Linker<InstanceState>,
    cache: ComponentCache,
    checked: CheckedMap<SinkComponent>,
    checked_transforms: CheckedMap<TransformComponent>,
    tls: Arc<rustls::ClientConfig>,
    config: EngineConfig,
}

impl Runtime {
    /// `cache_dir: None` keeps compiled components in memory only.
    pub fn new(config: EngineConfig, cache_dir: Option<PathBuf>) -> Result<Self, RuntimeError> {
        let (engine, epochs) = engine::build_engine(&config)?;
        let linker = engine::build_linker(&engine)?;
        let cache = ComponentCache::new(&engine, cache_dir);
        Ok(Runtime {
            engine,
            epochs,
            slots: slots::InstanceSlots::new(config.max_instances as usize),
            shelf: Mutex::new(Shelf::default()),
            shipped_digests: Mutex::new(HashMap::new()),
            linker,
            cache,
            checked: Mutex::new(HashMap::new()),
            checked_transforms: Mutex::new(HashMap::new()),
            tls: http::default_tls_config()?,
            config,
        })
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    fn check<C>(
        &self,
        checked: &CheckedMap<C>,
        (bytes, known): (&[u8], Option<String>),
        check: impl FnOnce(&Engine, &Linker<InstanceState>, &Compiled) -> Result<C, ComponentError>,
    ) -> Result<Arc<Checked<C>>, ComponentError> {
        let sha256 = known.unwrap_or_else(|| ComponentCache::digest(bytes));
        if let Some(hit) = checked.lock().unwrap_or_else(|e| e.into_inner()).get(&sha256) {
            return Ok(hit.clone());
        }
        let compiled = self.cache.load_or_compile(&self.engine, bytes, sha256.clone())?;
        let component = check(&self.engine, &self.linker, &compiled)?;
        let prepared = Arc::new(Checked { compiled, component });
        checked.lock().unwrap_or_else(|e| e.into_inner()).insert(sha256, prepared.clone());
        Ok(prepared)
    }

    /// `bytes` checked as a sink (`known`: their digest, if it is).
    fn prepare(&self, bytes: &[u8], known: Option<String>) -> Result<Arc<Checked<SinkComponent>>, ComponentError> {
        self.check(&self.checked, (bytes, known), component::prepare)
    }

    fn prepare_transform(
        &self,
        bytes: &[u8],
        known: Option<String>,
    ) -> Result<Arc<Checked<TransformComponent>>, ComponentError> {
        self.check(&self.checked_transforms, (bytes, known), component::prepare_transform)
    }

    /// Drop what is kept of the component `sha256` (checked, and compiled on
    /// disk): nothing runs it any more. Sinks still running it keep their
    /// instances; a later load compiles it again.
    pub fn forget(&self, sha256: &str) {
        {
            let mut shelf = self.shelf.lock().unwrap_or_else(|e| e.into_inner());
            shelf.sinks.retain(|_, sink| sink.sha256 != sha256);
            shelf.transforms.retain(|_, transform| transform.sha256() != sha256);
        }
        self.checked.lock().unwrap_or_else(|e| e.into_inner()).remove(sha256);
        self.checked_transforms.lock().unwrap_or_else(|e| e.into_inner()).remove(sha256);
        self.cache.forget(sha256);
    }

    /// What a component imports and exports, and whether it is a sink (or
    /// a transform) this host can run (`Ok` only if it passes the same
    /// checks as a load).
    pub fn inspect(&self, bytes: &[u8]) -> Result<ComponentInfo, ComponentError> {
        match self.prepare(bytes, None) {
            Ok(prepared) => Ok(component::describe(&self.engine, &prepared.compiled)),
            Err(ComponentError::NotASink { exports, speaks }) => match self.prepare_transform(bytes, None) {
                Ok(prepared) => Ok(component::describe(&self.engine, &prepared.compiled)),
                Err(ComponentError::NotATransform { .. }) => Err(ComponentError::NotASink { exports, speaks }),
                Err(other) => Err(other),
            },
            Err(other) => Err(other),
        }
    }

    /// The bytes of `spec`'s component; `shipped` finds a built-in one.
    fn read<'a>(
        &self,
        spec: &'a SinkSpec,
        shipped: impl Fn(&str) -> Option<&'static [u8]>,
        available: impl Fn() -> String,
    ) -> Result<ComponentBytes<'a>, LoadError> {
        let label = spec.label.clone();
        let (origin, bytes): (String, std::borrow::Cow<'_, [u8]>) = match &spec.component {
            ComponentSource::Builtin(name) => match shipped(name) {
                Some(bytes) => (format!("built-in `{name}`"), bytes.into()),
                None => return Err(LoadError::UnknownBuiltin { label, name: name.clone(), available: available() }),
            },
            ComponentSource::Path(path) => match std::fs::read(path) {
                Ok(bytes) => (path.display().to_string(), bytes.into()),
                Err(source) => return Err(LoadError::Read { label, path: path.clone(), source }),
            },
            ComponentSource::Bytes { origin, bytes } => (origin.clone(), bytes.as_slice().into()),
        };
        // A shipped component never changes: its digest is taken once,
        // not at every load of every source bound to it.
        let sha256 = match &spec.component {
            ComponentSource::Builtin(name) => {
                let mut digests = self.shipped_digests.lock().unwrap_or_else(|e| e.into_inner());
                Some(digests.entry(name.clone()).or_insert_with(|| ComponentCache::digest(&bytes)).clone())
            }
            _ => None,
        };
        Ok(ComponentBytes { origin, bytes, sha256 })
    }

    /// The instance factory of `spec`: its limits checked against the
    /// runtime's, each capability's state for it built.
    fn factory(&self, spec: &SinkSpec) -> Result<(StoreFactory, Arc<EgressCounter>), LoadError> {
        let label = spec.label.clone();
        let limits = &spec.limits;
        if limits.memory_bytes > self.config.max_memory_bytes {
            return Err(LoadError::Limits {
                label,
                reason: format!(
                    "memory cap of {} bytes is above the runtime's maximum of {} bytes",
                    limits.memory_bytes, self.config.max_memory_bytes
                ),
            });
        }
        let policy =
            spec.egress.policy().map(Arc::new).map_err(|source| LoadError::Policy { label: label.clone(), source })?;
        let tls = tls::TlsSettings::build(spec.tls.as_ref(), self.tls.clone())
            .map(Arc::new)
            .map_err(|source| LoadError::Tls { label: label.clone(), source })?;
        let log = LogChannel::new(label.clone(), limits.log_rate, spec.capture_logs);
        let egress = Arc::new(EgressCounter::default());
        let context = SinkContext {
            label: label.clone(),
            filesystem: spec.filesystem.clone(),
            clock: spec.clock.clone(),
            http_limits: limits.http,
            upstream: spec.upstream.clone(),
            egress: egress::Egress { policy, resolver: spec.resolver.clone(), counter: egress.clone() },
            log: log.clone(),
            tls,
        };
        let capabilities = capability::ALL.iter().map(|c| c.for_sink(&context)).collect::<Result<Vec<_>, _>>()?;
        let factory = StoreFactory {
            engine: self.engine.clone(),
            epochs: self.epochs.clone(),
            capabilities,
            log,
            memory_bytes: limits.memory_bytes,
        };
        Ok((factory, egress))
    }

    /// What every load does first: read the component (`shipped` finds a
    /// built-in one, `available` lists them), `check` it against its
    /// world, and write its options as JSON.
    fn read_checked<C>(
        &self,
        spec: &SinkSpec,
        shipped: impl Fn(&str) -> Option<&'static [u8]>,
        available: impl Fn() -> String,
        check: impl FnOnce(&[u8], Option<String>) -> Result<Arc<Checked<C>>, ComponentError>,
    ) -> Result<Read<C>, LoadError> {
        let label = spec.label.clone();
        let ComponentBytes { origin, bytes, sha256 } = self.read(spec, shipped, available)?;
        let checked =
            check(&bytes, sha256).map_err(|source| LoadError::Component { label: label.clone(), origin, source })?;
        let options =
            serde_json::to_string(&spec.options).map_err(|source| LoadError::OptionsJson { label, source })?;
        Ok(Read { checked, options })
    }

    /// A pool for what `read` holds, its instances made as `spec` says (no
    /// instance started yet).
    fn pool_of<E: Exports>(&self, spec: &SinkSpec, read: Read<E::Component>) -> Result<Pooled<E>, LoadError> {
        let (factory, egress) = self.factory(spec)?;
        let limits = &spec.limits;
        let keep = (limits.concurrency, limits.max_uses);
        let pool = InstancePool::new(read.checked.component.clone(), factory, read.options, keep, self.slots.clone());
        Ok((read.checked, pool, egress))
    }

    /// The shelf, pruned of what no binding uses.
    fn shelf(&self) -> std::sync::MutexGuard<'_, Shelf> {
        let mut shelf = self.shelf.lock().unwrap_or_else(|e| e.into_inner());
        shelf.prune();
        shelf
    }

    /// Load a configured sink: compile (or fetch from cache), check it
    /// against the world, start one instance with the options (validating
    /// them) and ask it for durability. Every error names the sink. A sink
    /// loaded before alike (the same component, options and settings, as
    /// every source bound to one configured sink loads it) shares that
    /// one's instances and starts none.
    pub async fn load(&self, spec: SinkSpec) -> Result<Sink, LoadError> {
        let available = || builtin::names().collect::<Vec<_>>().join(", ");
        let read = self.read_checked(&spec, builtin::builtin, available, |b, sha| self.prepare(b, sha))?;
        let key = share_key("sink", &spec, &read.checked.compiled.sha256, &read.options);
        if let Some(loaded) = key
            .as_ref()
            .and_then(|key| self.shelf().sinks.get(key).map(|s| s.bound_as(spec.label.clone(), &spec.limits)))
        {
            return Ok(loaded);
        }
        let (checked, pool, egress) = self.pool_of::<SinkExports>(&spec, read)?;
        let limits = &spec.limits;
        let durable =
            pool.start_sink(limits.attempt_timeout).await.map_err(|e| e.into_load_error(spec.label.clone()))?;
        let sink = Sink {
            log: pool.log().clone(),
            label: spec.label,
            sha256: checked.compiled.sha256.clone(),
            durable,
            batch: checked.component.batch.is_some().then_some(limits.batch),
            attempt_timeout: limits.attempt_timeout,
            memory_bytes: limits.memory_bytes,
            pool,
            permits: tokio::sync::Semaphore::new(limits.concurrency.max(1)),
            egress,
        };
        if let Some(key) = key {
            self.shelf().sinks.insert(key, sink.bound_as(sink.label.clone(), limits));
        }
        Ok(sink)
    }

    /// Load a transform: as a sink loads, against the transform world,
    /// with no network and no directory whatever its spec says; shared
    /// alike by every binding that chains it.
    pub async fn load_transform(&self, spec: TransformSpec) -> Result<Transform, LoadError> {
        let spec = spec.into_sink_spec();
        let available = || builtin::transform_names().collect::<Vec<_>>().join(", ");
        let read = self.read_checked(&spec, builtin::transform, available, |b, sha| self.prepare_transform(b, sha))?;
        let timeout = spec.limits.attempt_timeout;
        let key = share_key("transform", &spec, &read.checked.compiled.sha256, &read.options);
        if let Some(loaded) =
            key.as_ref().and_then(|key| self.shelf().transforms.get(key).map(|t| t.with_timeout(timeout)))
        {
            return Ok(loaded);
        }
        let (checked, pool, _) = self.pool_of::<TransformExports>(&spec, read)?;
        pool.start_first(timeout).await.map_err(|e| e.into_load_error(spec.label.clone()))?;
        let transform = Transform::new(spec.label, checked.compiled.sha256.clone(), timeout, pool);
        if let Some(key) = key {
            self.shelf().transforms.insert(key, transform.with_timeout(timeout));
        }
        Ok(transform)
    }

    /// Instance slots of the node not held by an instance now.
    pub fn free_instance_slots(&self) -> usize {
        self.slots.free()
    }
}
