//! The one wasmtime [`Engine`] of a node, its epoch ticker, and the linker
//! every sink is instantiated against.
//!
//! Instances come from the pooling allocator, sized from [`EngineConfig`]:
//! slots are reserved up front, so a fresh instance costs tens of
//! microseconds and the node's worst case is known at boot. Epoch
//! interruption bounds guest CPU time (see `budget`); one thread per
//! engine advances the epoch every `epoch_tick`, and stops when the
//! engine is dropped.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use wasmtime::component::Linker;
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::budget::EpochClock;
use super::capability;
use super::error::RuntimeError;
use super::state::InstanceState;
use crate::problem::Checker;

/// `runtime`: the engine every sink of the node shares.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct EngineConfig {
    /// Instances of sinks and transforms, busy or idle, that may exist at
    /// once across the node: each holds its own linear memory (up to its
    /// memory cap), so this bounds what guests may take. Every source bound
    /// to one sink shares its instances, so sources cost none. At the
    /// limit a new instance takes the place of the one idle longest, or
    /// waits for one (`transient` if none comes within the call's deadline).
    pub max_instances: u32,
    /// The largest linear memory any instance may have (per-sink caps are
    /// at most this).
    #[serde(rename = "max_memory_mib", with = "crate::settings::mebibytes")]
    #[schema(value_type = u32)]
    pub max_memory_bytes: usize,
    /// How often the epoch advances: the granularity of CPU deadlines.
    #[serde(rename = "epoch_tick_ms", with = "crate::settings::millis")]
    #[schema(value_type = u64)]
    pub epoch_tick: Duration,
    /// Compiled components (default `<data_dir>/components`).
    #[schema(value_type = Option<String>)]
    pub cache_dir: Option<PathBuf>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_instances: 256,
            max_memory_bytes: 64 << 20,
            epoch_tick: Duration::from_millis(10),
            cache_dir: None,
        }
    }
}

impl EngineConfig {
    /// The memory cap in MiB, as `runtime.max_memory_mib` says it.
    pub fn max_memory_mib(&self) -> u64 {
        (self.max_memory_bytes >> 20) as u64
    }

    pub fn check(&self, c: &mut Checker) {
        c.within("max_instances", u64::from(self.max_instances), 1, 100_000);
        c.within("max_memory_mib", self.max_memory_mib(), 1, 4_096);
        c.within_ms("epoch_tick_ms", self.epoch_tick, 1, 1_000);
    }
}

/// The node's engine, and the clock its ticker advances.
pub fn build_engine(config: &EngineConfig) -> Result<(Engine, EpochClock), RuntimeError> {
    let instances = config.max_instances.max(1);
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(instances)
        .total_core_instances(instances.saturating_mul(8))
        .total_memories(instances.saturating_mul(2))
        .total_tables(instances.saturating_mul(4))
        .total_stacks(instances)
        .max_memory_size(config.max_memory_bytes)
        .max_memories_per_component(8)
        .max_core_instances_per_component(32)
        // Keep the top of each fiber stack mapped between calls instead of
        // faulting fresh zeroed pages in on every delivery.
        .async_stack_keep_resident(64 << 10);

    let mut wasm = Config::new();
    wasm.wasm_component_model(true)
        .epoch_interruption(true)
        // Sinks do not use component-model async; it costs ~2 µs a call.
        .concurrency_support(false)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    let engine = Engine::new(&wasm).map_err(|e| RuntimeError::Engine(format!("{e:#}")))?;
    let clock = EpochClock::new(config.epoch_tick);
    spawn_epoch_ticker(&engine, clock.clone(), config.epoch_tick)?;
    Ok((engine, clock))
}

fn spawn_epoch_ticker(engine: &Engine, clock: EpochClock, tick: Duration) -> Result<(), RuntimeError> {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("ankusa-epoch".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                clock.advance();
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(tick);
            }
        })
        .map(|_| ())
        .map_err(|e| RuntimeError::Engine(format!("cannot start the epoch ticker: {e}")))
}

/// The linker every sink is checked and instantiated against: the imports
/// of every capability.
pub fn build_linker(engine: &Engine) -> Result<Linker<InstanceState>, RuntimeError> {
    let mut linker = Linker::new(engine);
    for capability in capability::ALL {
        capability.link(&mut linker).map_err(|e| RuntimeError::Engine(format!("linking host interfaces: {e:#}")))?;
    }
    Ok(linker)
}
