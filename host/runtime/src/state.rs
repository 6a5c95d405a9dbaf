//! What one sink instance's store carries: the WASI context and resource
//! table, what each capability keeps for the instance ([`Extensions`]),
//! its memory cap (growth past it fails, and the cap being hit is
//! remembered so the attempt is reported as a memory fault), its call's
//! CPU budget, and a record of refused connections (the attempt is then
//! classed `denied`).

use std::any::Any;
use std::sync::{Arc, Mutex};

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::egress::Denied;

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

/// Records the first refused connection during an attempt, for
/// classification.
#[derive(Clone, Default)]
pub struct DenialRecord(Arc<Mutex<Option<Denied>>>);

impl DenialRecord {
    pub fn take(&self) -> Option<Denied> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// The refusal recorded, left in place for the attempt's classification.
    pub fn peek(&self) -> Option<Denied> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn record(&self, denied: Denied) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(denied);
    }
}

/// The running attempt's W3C `traceparent`, when traces are on: set by the
/// pool before each call (on the dispatch task, which knows the attempt)
/// and put on every HTTP request the sink makes during it.
#[derive(Clone, Default)]
pub struct AttemptTrace(Arc<Mutex<Option<http::HeaderValue>>>);

impl AttemptTrace {
    pub fn set(&self, traceparent: Option<String>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = traceparent.and_then(|v| v.parse().ok());
    }

    pub fn get(&self) -> Option<http::HeaderValue> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// The source whose hook the running call is for. A sink's instances
/// serve every source bound to it, so its log lines name the caller: set
/// by the pool before each call, read by the log capability.
#[derive(Clone, Default)]
pub struct Caller(Arc<Mutex<String>>);

impl Caller {
    pub fn set(&self, source: &str) {
        let mut caller = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if *caller != source {
            caller.clear();
            caller.push_str(source);
        }
    }

    pub fn get(&self) -> String {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

pub struct InstanceState {
    pub(super) wasi: WasiCtx,
    pub(super) table: ResourceTable,
    /// What the capabilities keep per instance.
    pub(super) extensions: Extensions,
    pub(crate) denials: DenialRecord,
    pub(crate) trace: AttemptTrace,
    pub(crate) caller: Caller,
    pub(crate) memory: MemoryCap,
    /// The CPU time the current call may still use; checked on every
    /// epoch tick the guest sees.
    pub(crate) budget: super::budget::CpuBudget,
}

impl WasiView for InstanceState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

/// Per-instance state of the capabilities, one value per type: a
/// capability adds its own when an instance is set up and finds it again
/// in its host calls.
#[derive(Default)]
pub struct Extensions(Vec<Box<dyn Any + Send>>);

impl Extensions {
    pub fn insert<T: Any + Send>(&mut self, value: T) {
        self.0.retain(|held| !held.is::<T>());
        self.0.push(Box::new(value));
    }

    pub fn get<T: Any + Send>(&self) -> Option<&T> {
        self.0.iter().find_map(|held| held.downcast_ref::<T>())
    }

    pub fn get_mut<T: Any + Send>(&mut self) -> Option<&mut T> {
        self.0.iter_mut().find_map(|held| held.downcast_mut::<T>())
    }

    /// The value of type `T`, made by `make` if there is none yet.
    pub fn get_or_insert_with<T: Any + Send>(&mut self, make: impl FnOnce() -> T) -> &mut T {
        let at = match self.0.iter().position(|held| held.is::<T>()) {
            Some(at) => at,
            None => {
                self.0.push(Box::new(make()));
                self.0.len() - 1
            }
        };
        match self.0[at].downcast_mut::<T>() {
            Some(value) => value,
            // The entry at `at` was found, or just made, as a `T`.
            None => unreachable!("an extension that is not the type it was found as"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extensions_hold_one_value_per_type() {
        let mut ext = Extensions::default();
        ext.insert(5u32);
        ext.insert(String::from("a"));
        ext.insert(7u32);
        assert_eq!(ext.get_mut::<u32>(), Some(&mut 7));
        assert_eq!(ext.get_mut::<u64>(), None);
        *ext.get_or_insert_with(|| 1u64) += 1;
        assert_eq!(ext.get_or_insert_with(|| 100u64), &mut 2);
        assert_eq!(ext.get_mut::<String>().map(|s| s.as_str()), Some("a"));
    }
}
