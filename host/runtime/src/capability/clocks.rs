//! The clocks capability, and a controllable clock for plugin tests.
//!
//! Production instances read the host's real clocks. The test harness gives
//! instances a [`ManualClock`] instead, so signatures, `Retry-After` dates and
//! anything else a sink derives from "now" are reproducible.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use wasmtime::component::Linker;
use wasmtime_wasi::{HostMonotonicClock, HostWallClock};

use super::{Capability, InstanceBuilder, SinkCapability, SinkContext};
use crate::error::LoadError;
use crate::state::InstanceState;

#[derive(Debug)]
pub struct ManualClock {
    wall_nanos: AtomicU64,
    mono_nanos: AtomicU64,
}

impl ManualClock {
    /// A clock standing at `unix_secs` on the wall and 0 on the monotonic clock.
    pub fn at_unix_secs(unix_secs: u64) -> Arc<ManualClock> {
        Arc::new(ManualClock {
            wall_nanos: AtomicU64::new(unix_secs.saturating_mul(1_000_000_000)),
            mono_nanos: AtomicU64::new(0),
        })
    }

    /// Move both clocks forward.
    pub fn advance(&self, by: Duration) {
        let nanos = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        self.wall_nanos.fetch_add(nanos, Ordering::SeqCst);
        self.mono_nanos.fetch_add(nanos, Ordering::SeqCst);
    }

    pub fn unix_secs(&self) -> u64 {
        self.wall_nanos.load(Ordering::SeqCst) / 1_000_000_000
    }

    pub(crate) fn wall(self: &Arc<Self>) -> impl HostWallClock + 'static {
        Wall(self.clone())
    }

    pub(crate) fn monotonic(self: &Arc<Self>) -> impl HostMonotonicClock + 'static {
        Monotonic(self.clone())
    }
}

struct Wall(Arc<ManualClock>);
struct Monotonic(Arc<ManualClock>);

impl HostWallClock for Wall {
    fn resolution(&self) -> Duration {
        Duration::from_nanos(1)
    }
    fn now(&self) -> Duration {
        Duration::from_nanos(self.0.wall_nanos.load(Ordering::SeqCst))
    }
}

impl HostMonotonicClock for Monotonic {
    fn resolution(&self) -> u64 {
        1
    }
    fn now(&self) -> u64 {
        self.0.mono_nanos.load(Ordering::SeqCst)
    }
}

/// The clocks capability: `wasi:clocks` reads the host's clocks, or a
/// sink's [`ManualClock`] when its spec gives one (plugin tests).
pub struct Clocks;

/// One sink's clock, when it is not the host's.
struct SinkClock(Option<Arc<ManualClock>>);

impl Capability for Clocks {
    /// `wasi:clocks` is part of the WASI base the sandbox links.
    fn link(&self, _linker: &mut Linker<InstanceState>) -> wasmtime::Result<()> {
        Ok(())
    }

    fn for_sink(&self, sink: &SinkContext) -> Result<Arc<dyn SinkCapability>, LoadError> {
        Ok(Arc::new(SinkClock(sink.clock.clone())))
    }
}

impl SinkCapability for SinkClock {
    fn prepare(&self, instance: &mut InstanceBuilder) -> wasmtime::Result<()> {
        if let Some(clock) = &self.0 {
            instance.wasi.wall_clock(clock.wall());
            instance.wasi.monotonic_clock(clock.monotonic());
        }
        Ok(())
    }
}
