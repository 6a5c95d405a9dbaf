//! Warm instances of one configured sink.
//!
//! Instances keep their state between deliveries (parsed options, open
//! connections), up to the sink's concurrency. An instance is retired —
//! dropped, never reused — after a trap, a timeout, or `max_uses`
//! deliveries; the next delivery gets a fresh one from the `InstancePre`.
//! Every attempt is bounded twice: an epoch deadline traps guest code that
//! spins, and an async timeout abandons a guest blocked in a host call.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;
use wasmtime::Store;

use super::bindings::{self, Hook, SinkWorld, SinkWorldPre};
use super::instance::StoreFactory;
use super::outcome::{Failure, Outcome};
use super::state::InstanceState;
use crate::error_class::ErrorClass;

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

struct Warm {
    store: Store<InstanceState>,
    bindings: SinkWorld,
    uses: u64,
}

pub struct InstancePool {
    pre: SinkWorldPre<InstanceState>,
    factory: StoreFactory,
    options: String,
    idle: Mutex<Vec<Warm>>,
    permits: Semaphore,
    max_uses: u64,
    stats: PoolStats,
}

/// Why a fresh instance could not be made ready.
pub enum StartError {
    /// The sink refused its options.
    Options(bindings::ConfigError),
    /// Instantiation or `configure` failed in the runtime.
    Runtime(Failure),
}

impl InstancePool {
    pub fn new(
        pre: SinkWorldPre<InstanceState>,
        factory: StoreFactory,
        options: String,
        concurrency: usize,
        max_uses: u64,
    ) -> Self {
        InstancePool {
            pre,
            factory,
            options,
            idle: Mutex::new(Vec::new()),
            permits: Semaphore::new(concurrency.max(1)),
            max_uses: max_uses.max(1),
            stats: PoolStats::default(),
        }
    }

    pub fn snapshot(&self) -> PoolSnapshot {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        PoolSnapshot {
            created: load(&self.stats.created),
            retired: load(&self.stats.retired),
            idle: self.idle.lock().unwrap_or_else(|e| e.into_inner()).len(),
            traps: load(&self.stats.traps),
            timeouts: load(&self.stats.timeouts),
            memory_faults: load(&self.stats.memory_faults),
        }
    }

    /// Make a fresh instance and configure it. Used at load (to validate the
    /// options and ask for durability) and whenever no warm instance is idle.
    async fn start(&self, timeout: Duration) -> Result<Warm, StartError> {
        let mut store = self.factory.new_store().map_err(|e| {
            // The directory was there at load; it may be back soon (a remount).
            StartError::Runtime(Failure::new(
                ErrorClass::Transient,
                format!("the sink's directory cannot be opened: {e}"),
            ))
        })?;
        store.data_mut().deadline = Instant::now() + timeout;
        store.set_epoch_deadline(1);
        let started = tokio::time::timeout(timeout, async {
            let bindings = self.pre.instantiate_async(&mut store).await?;
            let configured = bindings.ankusa_sink_sink().call_configure(&mut store, &self.options).await?;
            wasmtime::Result::Ok((bindings, configured))
        })
        .await;
        self.stats.created.fetch_add(1, Ordering::Relaxed);
        match started {
            Ok(Ok((bindings, Ok(())))) => Ok(Warm { store, bindings, uses: 0 }),
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

    /// Start one instance, ask it whether it is durable, and keep it warm.
    pub async fn start_first(&self, timeout: Duration) -> Result<bool, StartError> {
        let mut warm = self.start(timeout).await?;
        warm.store.data_mut().deadline = Instant::now() + timeout;
        warm.store.set_epoch_deadline(1);
        let durable =
            tokio::time::timeout(timeout, warm.bindings.ankusa_sink_sink().call_durable(&mut warm.store)).await;
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
        let Ok(_permit) = self.permits.acquire().await else {
            return Outcome::Failed(Failure::new(ErrorClass::Transient, "sink pool is shutting down"));
        };
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut warm = match idle {
            Some(warm) => warm,
            None => match self.start(timeout).await {
                Ok(warm) => warm,
                Err(StartError::Runtime(failure)) => return Outcome::Failed(failure),
                Err(StartError::Options(config)) => {
                    return Outcome::Failed(Failure::new(
                        ErrorClass::Fault,
                        format!("a fresh instance rejected the options it accepted at load: {}", config.message),
                    ));
                }
            },
        };
        let state = warm.store.data_mut();
        state.deadline = Instant::now() + timeout;
        state.memory.hit = false;
        state.denials.take();
        warm.store.set_epoch_deadline(1);
        warm.uses += 1;

        let call = warm.bindings.ankusa_sink_sink().call_deliver(&mut warm.store, hook, attempt);
        let result = tokio::time::timeout(timeout, call).await;
        let denied = warm.store.data().denials.take();
        let outcome = match result {
            Err(_) => {
                self.stats.timeouts.fetch_add(1, Ordering::Relaxed);
                self.retire(warm);
                Outcome::Failed(Failure::new(
                    ErrorClass::Timeout,
                    format!("attempt exceeded its deadline of {timeout:?}"),
                ))
            }
            Ok(Err(err)) => {
                let failure = self.classify_error(&warm.store, &err);
                self.retire(warm);
                Outcome::Failed(failure)
            }
            Ok(Ok(reported)) => {
                let outcome = match (reported, denied) {
                    (Ok(()), _) => Outcome::Delivered,
                    (Err(_), Some(denied)) => Outcome::Failed(Failure::new(ErrorClass::Denied, denied.0)),
                    (Err(failure), None) => Outcome::Failed(from_guest(failure)),
                };
                if warm.uses >= self.max_uses {
                    self.retire(warm);
                } else {
                    self.keep(warm);
                }
                outcome
            }
        };
        // Nearly every delivery has nothing suppressed: skip the lock then.
        if self.factory.log.suppressed_total() > 0 {
            self.factory.log.report_suppressed();
        }
        outcome
    }

    fn keep(&self, warm: Warm) {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).push(warm);
    }

    fn retire(&self, warm: Warm) {
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
                Failure::new(ErrorClass::Fault, format!("trap: {trap}"))
            }
            None => {
                self.stats.traps.fetch_add(1, Ordering::Relaxed);
                let first_line = format!("{err:#}");
                let first_line = first_line.lines().next().unwrap_or("unknown runtime error");
                Failure::new(ErrorClass::Fault, first_line.to_string())
            }
        }
    }
}

fn from_guest(failure: bindings::Failure) -> Failure {
    match failure.class {
        bindings::ErrorClass::Transient => Failure::new(ErrorClass::Transient, failure.reason),
        bindings::ErrorClass::Permanent => Failure::new(ErrorClass::Permanent, failure.reason),
        bindings::ErrorClass::RetryAfter(ms) => {
            Failure { retry_after_ms: Some(ms), ..Failure::new(ErrorClass::RetryAfter, failure.reason) }
        }
    }
}
