//! How a fresh store is made for one sink: the capabilities set each new
//! instance up in turn. A fresh one holds no authority (no arguments,
//! environment, stdin, directories or sockets); each capability grants only
//! what its sink is configured for.

use std::sync::Arc;

use wasmtime::component::ResourceTable;
use wasmtime::{Store, StoreContextMut, UpdateDeadline};

use super::budget::{CpuBudget, EpochClock};
use super::capability::{InstanceBuilder, SinkCapability};
use super::log::LogChannel;
use super::state::{InstanceState, MemoryCap};

/// Everything needed to make fresh stores for one sink.
pub struct StoreFactory {
    pub engine: wasmtime::Engine,
    /// The engine's epoch, as calls' CPU budgets count it.
    pub epochs: EpochClock,
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
        let InstanceBuilder { mut wasi, extensions, denials, trace, caller } = builder;
        let state = InstanceState {
            wasi: wasi.build(),
            table: ResourceTable::new(),
            extensions,
            denials,
            trace,
            caller,
            memory: MemoryCap { max_bytes: self.memory_bytes, hit: false },
            budget: CpuBudget::new(self.epochs.clone()),
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|state| &mut state.memory);
        // Yield to the executor on every epoch tick, so a spinning guest
        // shares the thread; trap once the call has run through its CPU
        // budget (see `budget`). tokio's own yield puts the task behind
        // every other runnable one; a plain wake would run it again next.
        store.epoch_deadline_callback(|mut ctx: StoreContextMut<'_, InstanceState>| {
            if ctx.data_mut().budget.ran() {
                return Ok(UpdateDeadline::Interrupt);
            }
            Ok(UpdateDeadline::YieldCustom(1, Box::pin(tokio::task::yield_now())))
        });
        store.set_epoch_deadline(1);
        Ok(store)
    }
}
