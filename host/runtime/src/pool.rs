//! Warm instances of one configured sink (or transform).
//!
//! Instances keep their state between calls (parsed options, open
//! connections), up to the pool's concurrency. An instance is retired —
//! dropped, never reused — after a trap, a timeout, or `max_uses`
//! calls; the next call gets a fresh one from the `InstancePre`.
//! Every call is bounded twice: its CPU budget (epoch ticks the guest ran
//! through, see `budget`) traps guest code that spins, and an async
//! timeout bounds its wall-clock time, a guest blocked in a host call
//! included.
//!
//! The pool is generic over what the component exports ([`Exports`]):
//! a sink's `deliver` calls live here, a transform's in `transform.rs`.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use wasmtime::Store;
use wasmtime::component::{Instance, InstancePre};

use super::bindings::{self, BatchExport, Hook, SinkExport};
use super::capability::log::GuestError;
use super::component::SinkComponent;
use super::egress::Denied;
use super::error::LoadError;
use super::instance::StoreFactory;
use super::labels::SinkLabel;
use super::outcome::{Failure, Outcome};
use super::slots::{Evict, InstanceSlots, Slot};
use super::state::InstanceState;
use crate::error_class::ErrorClass;

/// What one kind of component exports, as a warm instance holds it.
pub trait Exports: Sized + Send + 'static {
    /// The checked component instances are made from.
    type Component: Clone + Send + Sync + 'static;

    fn pre(component: &Self::Component) -> &InstancePre<InstanceState>;

    /// Find the exports in a new instance.
    fn load(
        component: &Self::Component,
        store: &mut Store<InstanceState>,
        instance: &Instance,
    ) -> wasmtime::Result<Self>;

    /// Hand the instance its options.
    fn configure(
        &self,
        store: &mut Store<InstanceState>,
        options: &str,
    ) -> impl Future<Output = wasmtime::Result<Result<(), bindings::ConfigError>>> + Send;
}

/// A sink's exports: `sink`, and `batch` if it takes batches.
pub struct SinkExports {
    sink: SinkExport,
    batch: Option<BatchExport>,
}

impl Exports for SinkExports {
    type Component = SinkComponent;

    fn pre(component: &SinkComponent) -> &InstancePre<InstanceState> {
        &component.pre
    }

    fn load(
        component: &SinkComponent,
        store: &mut Store<InstanceState>,
        instance: &Instance,
    ) -> wasmtime::Result<Self> {
        let sink = component.sink.load(&mut *store, instance)?;
        let batch = component.batch.as_ref().map(|batch| batch.load(&mut *store, instance)).transpose()?;
        Ok(SinkExports { sink, batch })
    }

    fn configure(
        &self,
        store: &mut Store<InstanceState>,
        options: &str,
    ) -> impl Future<Output = wasmtime::Result<Result<(), bindings::ConfigError>>> + Send {
        self.sink.call_configure(store, options)
    }
}

/// Counters of one pool, for metrics and tests.
#[derive(Debug, Default)]
pub struct PoolStats {
    pub created: AtomicU64,
    pub retired: AtomicU64,
    pub traps: AtomicU64,
    pub timeouts: AtomicU64,
    pub memory_faults: AtomicU64,
}

/// A snapshot of [`PoolStats`] plus the instances idle right now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PoolSnapshot {
    pub created: u64,
    pub retired: u64,
    pub idle: usize,
    pub traps: u64,
    pub timeouts: u64,
    pub memory_faults: u64,
}

pub(crate) struct Warm<E> {
    pub store: Store<InstanceState>,
    pub exports: E,
    uses: u64,
    /// Its slot among the node's `max_instances`, given back when dropped.
    _slot: Slot,
}

/// Warm instances of one component with one set of options and settings.
/// Every binding loaded with the same ones shares the pool (see
/// `Runtime::load`): how many run at once is each binding's own limit.
pub struct InstancePool<E: Exports> {
    component: E::Component,
    factory: StoreFactory,
    options: String,
    /// Idle instances, each with when it went idle, oldest first.
    idle: Mutex<VecDeque<(Warm<E>, Instant)>>,
    /// Idle instances kept at most; more are dropped as they finish.
    keep_idle: usize,
    max_uses: u64,
    stats: PoolStats,
    slots: Arc<InstanceSlots>,
}

/// Why a fresh instance could not be made ready.
pub enum StartError {
    /// The sink refused its options.
    Options(bindings::ConfigError),
    /// Instantiation or `configure` failed in the runtime.
    Runtime(Failure),
}

impl StartError {
    /// The load error of the component `label` names.
    pub fn into_load_error(self, label: SinkLabel) -> LoadError {
        match self {
            StartError::Options(e) => LoadError::Options { label, field: e.field, message: e.message },
            StartError::Runtime(failure) => LoadError::Init { label, reason: failure.to_string() },
        }
    }
}

impl<E: Exports> InstancePool<E> {
    /// A pool keeping up to `keep_idle` idle instances, each retired after
    /// `max_uses` calls, registered with `slots` for eviction.
    pub fn new(
        component: E::Component,
        factory: StoreFactory,
        options: String,
        (keep_idle, max_uses): (usize, u64),
        slots: Arc<InstanceSlots>,
    ) -> Arc<Self> {
        let pool = Arc::new(InstancePool {
            component,
            factory,
            options,
            idle: Mutex::new(VecDeque::new()),
            keep_idle: keep_idle.max(1),
            max_uses: max_uses.max(1),
            stats: PoolStats::default(),
            slots: slots.clone(),
        });
        slots.register(Arc::downgrade(&pool) as Weak<dyn Evict>);
        pool
    }

    /// The log channel its instances write to.
    pub fn log(&self) -> &std::sync::Arc<super::log::LogChannel> {
        &self.factory.log
    }

    pub fn snapshot(&self) -> PoolSnapshot {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        PoolSnapshot {
            created: load(&self.stats.created),
            retired: load(&self.stats.retired),
            idle: self.idle(),
            traps: load(&self.stats.traps),
            timeouts: load(&self.stats.timeouts),
            memory_faults: load(&self.stats.memory_faults),
        }
    }

    /// Idle instances now.
    fn idle(&self) -> usize {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Make a fresh instance and configure it. Used at load (to validate the
    /// options and ask for durability) and whenever no warm instance is idle.
    async fn start(&self, timeout: Duration) -> Result<Warm<E>, StartError> {
        let slot = self.slots.take(timeout).await.map_err(StartError::Runtime)?;
        let mut store = self.factory.new_store().map_err(|e| {
            // The directory was there at load; it may be back soon (a remount).
            StartError::Runtime(Failure::new(
                ErrorClass::Transient,
                format!("the sink's directory cannot be opened: {e}"),
            ))
        })?;
        store.data_mut().budget.start(timeout);
        store.set_epoch_deadline(1);
        let component = &self.component;
        let started = tokio::time::timeout(timeout, async {
            let instance = E::pre(component).instantiate_async(&mut store).await?;
            let exports = E::load(component, &mut store, &instance)?;
            let configured = exports.configure(&mut store, &self.options).await?;
            wasmtime::Result::Ok((exports, configured))
        })
        .await;
        self.stats.created.fetch_add(1, Ordering::Relaxed);
        match started {
            Ok(Ok((exports, Ok(())))) => Ok(Warm { store, exports, uses: 0, _slot: slot }),
            Ok(Ok((_, Err(config)))) => {
                self.stats.retired.fetch_add(1, Ordering::Relaxed);
                Err(StartError::Options(config))
            }
            Ok(Err(err)) => {
                self.stats.retired.fetch_add(1, Ordering::Relaxed);
                Err(StartError::Runtime(self.classify_error(&store, &err)))
            }
            Err(_) => {
                self.stats.retired.fetch_add(1, Ordering::Relaxed);
                self.stats.timeouts.fetch_add(1, Ordering::Relaxed);
                Err(StartError::Runtime(Failure::new(
                    ErrorClass::Timeout,
                    format!("instance start exceeded {timeout:?}"),
                )))
            }
        }
    }

    /// Start one instance (so its options are checked at load) and keep
    /// it warm.
    pub async fn start_first(&self, timeout: Duration) -> Result<(), StartError> {
        let warm = self.start(timeout).await?;
        self.keep(warm);
        Ok(())
    }

    /// A warm instance, or a fresh one; a failure to start is every
    /// waiting hook's outcome.
    pub(crate) async fn checkout(&self, timeout: Duration) -> Result<Warm<E>, Failure> {
        // The one idle least long: the others may be evicted first.
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop_back();
        match idle {
            Some((warm, _)) => Ok(warm),
            None => match self.start(timeout).await {
                Ok(warm) => Ok(warm),
                Err(StartError::Runtime(failure)) => Err(failure),
                Err(StartError::Options(config)) => Err(Failure::new(
                    ErrorClass::Fault,
                    format!("a fresh instance rejected the options it accepted at load: {}", config.message),
                )),
            },
        }
    }

    /// After a call: keep the instance (or retire it once used up) if the
    /// call returned; retire it and name the failure if it trapped or ran
    /// out of time.
    pub(crate) fn settle_call<R>(
        &self,
        warm: Warm<E>,
        result: Result<wasmtime::Result<R>, tokio::time::error::Elapsed>,
        timeout: Duration,
    ) -> Result<R, Failure> {
        match result {
            Err(_) => {
                self.stats.timeouts.fetch_add(1, Ordering::Relaxed);
                self.retire(warm);
                Err(Failure::new(ErrorClass::Timeout, format!("attempt exceeded its deadline of {timeout:?}")))
            }
            Ok(Err(err)) => {
                let failure = self.classify_error(&warm.store, &err);
                self.retire(warm);
                Err(failure)
            }
            Ok(Ok(reported)) => {
                if warm.uses >= self.max_uses {
                    self.retire(warm);
                } else {
                    self.keep(warm);
                }
                Ok(reported)
            }
        }
    }

    pub(crate) fn report_suppressed(&self) {
        // Nearly every delivery has nothing suppressed: skip the lock then.
        if self.factory.log.suppressed_total() > 0 {
            self.factory.log.report_suppressed();
        }
    }

    /// Keep an instance idle, unless the pool keeps enough or a start
    /// elsewhere waits for its slot.
    fn keep(&self, warm: Warm<E>) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < self.keep_idle && !self.slots.wanted() {
            idle.push_back((warm, Instant::now()));
            return;
        }
        drop(idle);
        self.retire(warm);
    }

    fn retire(&self, warm: Warm<E>) {
        self.stats.retired.fetch_add(1, Ordering::Relaxed);
        drop(warm);
    }

    /// Turn a runtime error from a guest call into the host's classes.
    fn classify_error(&self, store: &Store<InstanceState>, err: &wasmtime::Error) -> Failure {
        if store.data().memory.hit {
            self.stats.memory_faults.fetch_add(1, Ordering::Relaxed);
            let mib = store.data().memory.max_bytes >> 20;
            return Failure::new(ErrorClass::Fault, format!("memory limit of {mib} MiB exceeded"));
        }
        match err.downcast_ref::<wasmtime::Trap>() {
            Some(wasmtime::Trap::Interrupt) => {
                self.stats.timeouts.fetch_add(1, Ordering::Relaxed);
                Failure::new(ErrorClass::Timeout, "attempt exceeded its CPU deadline")
            }
            Some(trap) => {
                self.stats.traps.fetch_add(1, Ordering::Relaxed);
                // A guest that said why before trapping (an uncaught Python
                // exception) is reported in its own words.
                match store.data().extensions.get::<GuestError>().and_then(GuestError::take) {
                    Some(said) => Failure::new(ErrorClass::Fault, said),
                    None => Failure::new(ErrorClass::Fault, format!("trap: {trap}")),
                }
            }
            // The pooling allocator out of core instances, memories or
            // tables (components that need many each): the node is full,
            // the sink is not at fault.
            None if format!("{err:#}").contains("maximum concurrent") => Failure::new(
                ErrorClass::Transient,
                format!("the node has no room for another instance (runtime.max_instances): {err}"),
            ),
            None => {
                self.stats.traps.fetch_add(1, Ordering::Relaxed);
                let first_line = format!("{err:#}");
                let first_line = first_line.lines().next().unwrap_or("unknown runtime error");
                Failure::new(ErrorClass::Fault, first_line.to_string())
            }
        }
    }
}

impl<E: Exports> Evict for InstancePool<E> {
    fn idle_since(&self) -> Option<Instant> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).front().map(|(_, since)| *since)
    }

    fn evict_oldest(&self) -> bool {
        let oldest = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
        oldest.map(|(warm, _)| self.retire(warm)).is_some()
    }
}

impl InstancePool<SinkExports> {
    /// Start one instance, ask it whether it is durable, and keep it warm.
    pub async fn start_sink(&self, timeout: Duration) -> Result<bool, StartError> {
        let mut warm = self.start(timeout).await?;
        warm.store.data_mut().budget.start(timeout);
        warm.store.set_epoch_deadline(1);
        let durable = tokio::time::timeout(timeout, warm.exports.sink.call_durable(&mut warm.store)).await;
        match durable {
            Ok(Ok(durable)) => {
                self.keep(warm);
                Ok(durable)
            }
            Ok(Err(err)) => Err(StartError::Runtime(self.classify_error(&warm.store, &err))),
            Err(_) => Err(StartError::Runtime(Failure::new(ErrorClass::Timeout, "durable() did not return"))),
        }
    }

    pub async fn deliver(&self, hook: &Hook, attempt: u32, timeout: Duration) -> Outcome {
        let mut warm = match self.checkout(timeout).await {
            Ok(warm) => warm,
            Err(failure) => return Outcome::Failed(failure),
        };
        arm(&mut warm, timeout, &hook.source);
        let call = warm.exports.sink.call_deliver(&mut warm.store, hook, attempt);
        let result = tokio::time::timeout(timeout, call).await;
        let denied = warm.store.data().denials.take();
        let outcome = match self.settle_call(warm, result, timeout) {
            Ok(reported) => judge(reported, denied.as_ref()),
            Err(failure) => Outcome::Failed(failure),
        };
        self.report_suppressed();
        outcome
    }

    /// Deliver `hooks` in one `deliver-batch` call, one outcome per hook.
    /// A sink that does not export `batch` gets one `deliver` call each.
    /// A trap, a timeout or a list of the wrong length fails every hook of
    /// the batch alike.
    pub async fn deliver_batch(&self, hooks: &[Hook], attempts: &[u32], timeout: Duration) -> Vec<Outcome> {
        let mut warm = match self.checkout(timeout).await {
            Ok(warm) => warm,
            Err(failure) => return vec![Outcome::Failed(failure); hooks.len()],
        };
        arm(&mut warm, timeout, hooks.first().map_or("", |hook| hook.source.as_str()));
        let Warm { store, exports: SinkExports { sink, batch }, .. } = &mut warm;
        let result = match batch {
            Some(batch) => tokio::time::timeout(timeout, batch.call_deliver_batch(&mut *store, hooks, attempts)).await,
            None => {
                tokio::time::timeout(timeout, async {
                    let mut reported = Vec::with_capacity(hooks.len());
                    for (hook, attempt) in hooks.iter().zip(attempts) {
                        reported.push(sink.call_deliver(&mut *store, hook, *attempt).await?);
                    }
                    wasmtime::Result::Ok(reported)
                })
                .await
            }
        };
        let denied = warm.store.data().denials.take();
        let outcomes = match self.settle_call(warm, result, timeout) {
            Ok(reported) if reported.len() == hooks.len() => {
                reported.into_iter().map(|one| judge(one, denied.as_ref())).collect()
            }
            Ok(reported) => {
                let failure = Failure::new(
                    ErrorClass::Fault,
                    format!("deliver-batch returned {} results for {} hooks", reported.len(), hooks.len()),
                );
                vec![Outcome::Failed(failure); hooks.len()]
            }
            Err(failure) => vec![Outcome::Failed(failure); hooks.len()],
        };
        self.report_suppressed();
        outcomes
    }
}

/// Ready an instance for one call on a hook of `source`: its CPU budget,
/// a clean memory-fault flag and denial record, the caller its log lines
/// name, one more use.
pub(crate) fn arm<E>(warm: &mut Warm<E>, timeout: Duration, source: &str) {
    let state = warm.store.data_mut();
    state.budget.start(timeout);
    state.caller.set(source);
    state.memory.hit = false;
    state.denials.take();
    if let Some(said) = state.extensions.get::<GuestError>() {
        said.take();
    }
    // Read here, on the attempt's own task, for the sink's HTTP requests.
    state.trace.set(crate::traceparent::current());
    warm.store.set_epoch_deadline(1);
    warm.uses += 1;
}

/// What the guest reported for one hook. A refused connection during the
/// call makes a failure `denied`, whatever the guest called it.
fn judge(reported: Result<(), bindings::Failure>, denied: Option<&Denied>) -> Outcome {
    match (reported, denied) {
        (Ok(()), _) => Outcome::Delivered,
        (Err(_), Some(denied)) => Outcome::Failed(Failure::new(ErrorClass::Denied, denied.0.clone())),
        (Err(failure), None) => Outcome::Failed(from_guest(failure)),
    }
}

pub(crate) fn from_guest(failure: bindings::Failure) -> Failure {
    match failure.class {
        bindings::ErrorClass::Transient => Failure::new(ErrorClass::Transient, failure.reason),
        bindings::ErrorClass::Permanent => Failure::new(ErrorClass::Permanent, failure.reason),
        bindings::ErrorClass::RetryAfter(ms) => {
            Failure { retry_after_ms: Some(ms), ..Failure::new(ErrorClass::RetryAfter, failure.reason) }
        }
    }
}
