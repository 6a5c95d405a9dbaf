//! How a fresh store is made for one sink: the capabilities set each new
//! instance up in turn. A fresh one holds no authority (no arguments,
//! environment, stdin, directories or sockets); each capability grants only
//! what its sink is configured for.

use std::sync::Arc;
use std::time::Instant;

use wasmtime::component::ResourceTable;
use wasmtime::{Store, StoreContextMut, UpdateDeadline};

use super::capability::{InstanceBuilder, SinkCapability};
use super::log::LogChannel;
use super::state::{InstanceState, MemoryCap};

/// Everything needed to make fresh stores for one sink.
pub struct StoreFactory {
    pub engine: wasmtime::Engine,
    /// Each capability's state for this sink, in set-up order.
    pub capabilities: Vec<Arc<dyn SinkCapability>>,
    /// The sink's log channel (the pool reports suppressed lines to it).
    pub log: Arc<LogChannel>,
    pub memory_bytes: usize,
}

impl StoreFactory {
    /// A fresh store; fails only if a capability cannot set it up (the
    /// sink's directory cannot be opened).
    pub fn new_store(&self) -> wasmtime::Result<Store<InstanceState>> {
        let mut builder = InstanceBuilder::new();
        for capability in &self.capabilities {
            capability.prepare(&mut builder)?;
        }
        let InstanceBuilder { mut wasi, extensions, denials, trace } = builder;
        let state = InstanceState {
            wasi: wasi.build(),
            table: ResourceTable::new(),
            extensions,
            denials,
            trace,
            memory: MemoryCap { max_bytes: self.memory_bytes, hit: false },
            deadline: Instant::now(),
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|state| &mut state.memory);
        // Yield to the executor on every epoch tick, so a spinning guest
        // shares the thread; trap once the attempt's deadline has passed.
        store.epoch_deadline_callback(|ctx: StoreContextMut<'_, InstanceState>| {
            if Instant::now() >= ctx.data().deadline {
                Ok(UpdateDeadline::Interrupt)
            } else {
                Ok(UpdateDeadline::Yield(1))
            }
        });
        store.set_epoch_deadline(1);
        Ok(store)
    }
}
