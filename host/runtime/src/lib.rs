//! The sink runtime: loads WebAssembly sink components and runs deliveries
//! through them, sandboxed.
//!
//! Shape (one module per job):
//! - `engine`: the node's one wasmtime engine (pooling allocator, epoch
//!   ticker) and the linker every sink is checked against;
//! - `cache`: compile once, `.cwasm` on disk keyed by engine and sha256;
//! - `component`: the world check and the `InstancePre` of a component;
//! - `pool`: warm instances per configured sink, retired on trouble;
//! - `instance`: what a store carries, and how a fresh one is set up;
//! - [`capability`]: what a sink may use, one module each with the same
//!   three steps (link, per-sink state, per-instance state): the WASI
//!   sandbox, `log`, `clocks`, `filesystem`, `http` egress, `sockets`;
//! - `egress`: the allow-list and address policy the network capabilities
//!   consume;
//! - `outcome`: what an attempt came to, in the host's error classes.
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
mod state;
pub mod tls;
pub mod traceparent;

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
pub use section::{SinkDefaults, SinkSettings};
pub use sink::{BatchLimits, ComponentSource, Sink, SinkLimits, SinkSpec};

use self::cache::{Compiled, ComponentCache};
use self::capability::SinkContext;
use self::component::SinkComponent;
use self::egress::EgressCounter;
use self::instance::StoreFactory;
use self::log::LogChannel;
use self::pool::{InstancePool, StartError};
use self::state::InstanceState;

/// A component compiled and checked against the sink world, with the
/// `InstancePre` its instances start from.
struct CheckedComponent {
    compiled: Compiled,
    component: SinkComponent,
}

/// The node's sink runtime. Cheap to share behind an `Arc`.
pub struct Runtime {
    engine: Engine,
    linker: Linker<InstanceState>,
    cache: ComponentCache,
    /// Components compiled and checked, by sha256: each gets its
    /// `InstancePre` once, however many sinks use it.
    checked: Mutex<HashMap<String, Arc<CheckedComponent>>>,
    tls: Arc<rustls::ClientConfig>,
    config: EngineConfig,
}

impl Runtime {
    /// `cache_dir: None` keeps compiled components in memory only.
    pub fn new(config: EngineConfig, cache_dir: Option<PathBuf>) -> Result<Self, RuntimeError> {
        let engine = engine::build_engine(&config)?;
        let linker = engine::build_linker(&engine)?;
        let cache = ComponentCache::new(&engine, cache_dir);
        Ok(Runtime {
            engine,
            linker,
            cache,
            checked: Mutex::new(HashMap::new()),
            tls: http::default_tls_config()?,
            config,
        })
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    fn prepare(&self, bytes: &[u8]) -> Result<Arc<CheckedComponent>, ComponentError> {
        let sha256 = ComponentCache::digest(bytes);
        if let Some(hit) = self.checked.lock().unwrap_or_else(|e| e.into_inner()).get(&sha256) {
            return Ok(hit.clone());
        }
        let compiled = self.cache.load_or_compile(&self.engine, bytes, sha256.clone())?;
        let component = component::prepare(&self.engine, &self.linker, &compiled)?;
        let prepared = Arc::new(CheckedComponent { compiled, component });
        self.checked.lock().unwrap_or_else(|e| e.into_inner()).insert(sha256, prepared.clone());
        Ok(prepared)
    }

    /// Drop what is kept of the component `sha256` (checked, and compiled on
    /// disk): no sink runs it any more. Sinks still running it keep their
    /// instances; a later load compiles it again.
    pub fn forget(&self, sha256: &str) {
        self.checked.lock().unwrap_or_else(|e| e.into_inner()).remove(sha256);
        self.cache.forget(sha256);
    }

    /// What a component imports and exports, and whether it is a sink this
    /// host can run (`Ok` only if it passes the same checks as a load).
    pub fn inspect(&self, bytes: &[u8]) -> Result<ComponentInfo, ComponentError> {
        let prepared = self.prepare(bytes)?;
        Ok(component::describe(&self.engine, &prepared.compiled))
    }

    /// Load a configured sink: compile (or fetch from cache), check it
    /// against the world, start one instance with the options (validating
    /// them) and ask it for durability. Every error names the sink.
    pub async fn load(&self, spec: SinkSpec) -> Result<Sink, LoadError> {
        let label = spec.label.clone();
        let (origin, bytes): (String, std::borrow::Cow<'_, [u8]>) = match &spec.component {
            ComponentSource::Builtin(name) => match builtin::builtin(name) {
                Some(bytes) => (format!("built-in `{name}`"), bytes.into()),
                None => {
                    let available = builtin::names().collect::<Vec<_>>().join(", ");
                    return Err(LoadError::UnknownBuiltin { label, name: name.clone(), available });
                }
            },
            ComponentSource::Path(path) => match std::fs::read(path) {
                Ok(bytes) => (path.display().to_string(), bytes.into()),
                Err(source) => return Err(LoadError::Read { label, path: path.clone(), source }),
            },
            ComponentSource::Bytes { origin, bytes } => (origin.clone(), bytes.as_slice().into()),
        };
        let component_error = |source| LoadError::Component { label: label.clone(), origin: origin.clone(), source };
        let prepared = self.prepare(&bytes).map_err(component_error)?;

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
        let options = serde_json::to_string(&spec.options)
            .map_err(|source| LoadError::OptionsJson { label: label.clone(), source })?;
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
            capabilities,
            log: log.clone(),
            memory_bytes: limits.memory_bytes,
        };
        let pool = InstancePool::new(prepared.component.clone(), factory, options, limits.concurrency, limits.max_uses);
        let durable = match pool.start_first(limits.attempt_timeout).await {
            Ok(durable) => durable,
            Err(StartError::Options(e)) => {
                return Err(LoadError::Options { label, field: e.field, message: e.message });
            }
            Err(StartError::Runtime(failure)) => return Err(LoadError::Init { label, reason: failure.to_string() }),
        };
        Ok(Sink {
            label,
            sha256: prepared.compiled.sha256.clone(),
            durable,
            batch: prepared.component.batch.is_some().then_some(limits.batch),
            attempt_timeout: limits.attempt_timeout,
            memory_bytes: limits.memory_bytes,
            pool,
            log,
            egress,
        })
    }
}
