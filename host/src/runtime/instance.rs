//! The state one sink instance's store carries, and how a store is made.
//!
//! No ambient authority: the WASI context has no arguments, environment or
//! stdin, no directory unless the sink is given one, and sockets are refused
//! unless the sink's policy names the address. Stdout and stderr become the
//! sink's log lines. Memory growth past the sink's cap fails, and the cap
//! being hit is remembered so the attempt is reported as a memory fault.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, Store, StoreContextMut, UpdateDeadline};
use wasmtime_wasi::sockets::SocketAddrUse;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::bindings::{Level, ankusa};
use super::clock::ManualClock;
use super::egress::EgressPolicy;
use super::http::{DenialRecord, EgressHooks, HttpEgress};
use super::log::{GuestOutput, LogChannel};

/// Caps linear memory growth of one instance.
pub struct MemoryCap {
    pub max_bytes: usize,
    pub hit: bool,
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.max_bytes {
            self.hit = true;
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}

pub struct InstanceState {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    table: ResourceTable,
    hooks: EgressHooks,
    pub(crate) denials: DenialRecord,
    pub(crate) memory: MemoryCap,
    log: Arc<LogChannel>,
    /// When the current attempt must end; checked on every epoch tick.
    pub(crate) deadline: Instant,
}

impl WasiView for InstanceState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl WasiHttpView for InstanceState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView { ctx: &mut self.http, table: &mut self.table, hooks: &mut self.hooks }
    }
}

impl ankusa::sink::delivery::Host for InstanceState {}

impl ankusa::sink::log::Host for InstanceState {
    fn log(&mut self, level: Level, message: String) -> wasmtime::Result<()> {
        self.log.emit(level, &message);
        Ok(())
    }
}

/// Everything needed to make fresh stores for one sink.
pub struct StoreFactory {
    pub engine: wasmtime::Engine,
    pub policy: Arc<EgressPolicy>,
    pub egress: Arc<HttpEgress>,
    pub log: Arc<LogChannel>,
    pub memory_bytes: usize,
    pub clock: Option<Arc<ManualClock>>,
    /// Preopened as `/`, read-write.
    pub directory: Option<PathBuf>,
}

impl StoreFactory {
    /// A fresh store; fails only if the sink's directory cannot be opened.
    pub fn new_store(&self) -> wasmtime::Result<Store<InstanceState>> {
        let mut wasi = WasiCtxBuilder::new();
        if let Some(directory) = &self.directory {
            wasi.preopened_dir(directory, "/", FsPerms::ReadWrite)?;
        }
        wasi.stdout(GuestOutput::new(self.log.clone(), Level::Info));
        wasi.stderr(GuestOutput::new(self.log.clone(), Level::Warn));
        if let Some(clock) = &self.clock {
            wasi.wall_clock(clock.wall());
            wasi.monotonic_clock(clock.monotonic());
        }
        // TCP is on so that every connect reaches the gate below, which
        // admits only `tcp://` allow entries and records each refusal (a
        // connect refused earlier would not be classed `denied`). Binds
        // other than a connect's implicit one, listens and UDP are refused.
        wasi.allow_tcp(true);
        let policy = self.policy.clone();
        let denials = DenialRecord::default();
        let socket_denials = denials.clone();
        wasi.socket_addr_check(move |addr, usage| {
            let allowed = match usage {
                // A refused connect is recorded, so the attempt is classed
                // `denied` whatever the guest makes of the error.
                SocketAddrUse::TcpConnect => match policy.check_socket(addr.ip(), addr.port()) {
                    Ok(()) => true,
                    Err(denied) => {
                        tracing::warn!(%denied, "socket egress denied");
                        socket_denials.record(denied);
                        false
                    }
                },
                // The implicit bind before a connect uses the wildcard address.
                SocketAddrUse::TcpBind => addr.ip().is_unspecified() && addr.port() == 0,
                _ => false,
            };
            Box::pin(async move { allowed })
        });
        let state = InstanceState {
            wasi: wasi.build(),
            http: WasiHttpCtx::new(),
            table: ResourceTable::new(),
            hooks: EgressHooks::new(self.egress.clone(), denials.clone()),
            denials,
            memory: MemoryCap { max_bytes: self.memory_bytes, hit: false },
            log: self.log.clone(),
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
