//! The one wasmtime [`Engine`] of a node, its epoch ticker, and the linker
//! every sink is instantiated against.
//!
//! Instances come from the pooling allocator, sized from [`EngineConfig`]:
//! slots are reserved up front, so a fresh instance costs tens of
//! microseconds and the node's worst case is known at boot. Epoch
//! interruption bounds guest CPU time; one thread per engine advances the
//! epoch every `epoch_tick`, and stops when the engine is dropped.

use std::time::Duration;

use wasmtime::component::Linker;
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::capability;
use super::error::RuntimeError;
use super::state::InstanceState;

#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Instances that may exist at once, across every sink of the node.
    pub max_instances: u32,
    /// The largest linear memory any instance may have (per-sink caps are
    /// at most this).
    pub max_memory_bytes: usize,
    /// How often the epoch advances: the granularity of CPU deadlines.
    pub epoch_tick: Duration,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig { max_instances: 256, max_memory_bytes: 64 << 20, epoch_tick: Duration::from_millis(10) }
    }
}

pub fn build_engine(config: &EngineConfig) -> Result<Engine, RuntimeError> {
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
    spawn_epoch_ticker(&engine, config.epoch_tick)?;
    Ok(engine)
}

fn spawn_epoch_ticker(engine: &Engine, tick: Duration) -> Result<(), RuntimeError> {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("ankusa-epoch".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
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
