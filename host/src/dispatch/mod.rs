//! Dispatch: delivers due rows through their sink components.
//!
//! The [`scheduler`] task owns the state. It claims due rows in batches
//! (due → inflight, one store batch) within the `max_inflight` and
//! `max_inflight_bytes` windows and queues each in its [`SinkKey`]'s
//! [`lane`] (tenant, source, sink index). Free slots (`concurrency`
//! overall, `sink_concurrency` per key) are handed round-robin across
//! lanes, so a slow or dead sink holds only its own slots: rows past a
//! lane's waiting bound, and every row while its circuit breaker is open,
//! are parked (due again later, attempts unchanged).
//!
//! An [`attempt`] reads the hooks and calls the sink, once or once for a
//! batch. Its [`outcome`] per row is one transition (done, due again after
//! a backoff, or dead with reason, class and attempts) that the settler
//! ([`settle`]) writes a batch at a time.

mod attempt;
mod breaker;
mod lane;
mod outcome;
mod policy;
mod scheduler;
mod settings;
mod settle;
mod stalled;

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::{Notify, mpsc};

pub use breaker::{Breaker, BreakerPolicy, State as BreakerState, Transition};
pub use lane::SinkKey;
pub use policy::{MAX_RETRY_AFTER, Next, RetryPolicy};
pub use settings::DispatchConfig;

use crate::queue::Deliveries;
use crate::source::Directory;

/// A running dispatcher; dropping it does not stop it, [`Dispatcher::stop`] does.
pub struct Dispatcher {
    stop: Arc<Notify>,
    control: mpsc::UnboundedSender<scheduler::Control>,
    task: tokio::task::JoinHandle<()>,
    /// Ends once the scheduler and every attempt have let go of it and
    /// their outcomes are written.
    settler: std::thread::JoinHandle<()>,
    breakers: Breakers,
}

/// How long a stop waits for the settler to write the last outcomes after
/// the attempts ended.
const SETTLE_AT_STOP: std::time::Duration = std::time::Duration::from_secs(2);

/// The breaker state of every key whose breaker is not plainly closed.
type Breakers = Arc<std::sync::Mutex<HashMap<SinkKey, BreakerState>>>;

impl Dispatcher {
    /// Start dispatching. Rows left inflight by a previous run must have
    /// been recovered first (`Queue::recover_inflight`). Fails only if the
    /// settler's thread cannot be started.
    pub fn start(
        deliveries: Deliveries,
        directory: Arc<dyn Directory>,
        config: DispatchConfig,
    ) -> std::io::Result<Dispatcher> {
        deliveries.set_sink_names(Arc::new(BoundNames(directory.clone())));
        let (settler, settler_thread) = settle::start(deliveries.clone())?;
        let stop = Arc::new(Notify::new());
        let breakers = Breakers::default();
        let (control, control_rx) = mpsc::unbounded_channel();
        let run = scheduler::Scheduler::run(
            deliveries,
            directory,
            config,
            breakers.clone(),
            settler,
            control_rx,
            stop.clone(),
        );
        let task = tokio::spawn(run);
        Ok(Dispatcher { stop, control, task, settler: settler_thread, breakers })
    }

    /// The breaker of one sink key (`None`: closed, no recent failures).
    pub fn breaker(&self, tenant: &str, source: &str, sink: u16) -> Option<BreakerState> {
        let breakers = self.breakers.lock().unwrap_or_else(|e| e.into_inner());
        breakers.get(&SinkKey::new(tenant, source, sink)).copied()
    }

    /// `sink`'s component in `source` was swapped: its breaker closes and
    /// its rows waiting out faults or the breaker are due now.
    pub fn component_swapped(&self, source: &str, sink: &str) {
        let swapped = scheduler::Control::Swapped { source: source.to_string(), sink: sink.to_string() };
        // Only a stopped scheduler has dropped its end: nothing to tell.
        let _ = self.control.send(swapped);
    }

    /// Breakers open or probing now.
    pub fn breakers_open(&self) -> usize {
        let breakers = self.breakers.lock().unwrap_or_else(|e| e.into_inner());
        breakers.values().filter(|s| !matches!(s, BreakerState::Closed { .. })).count()
    }

    /// Stop claiming; rows claimed and not started are handed back (due
    /// again), the attempts running finish (within their timeout), and
    /// every outcome is written before this returns.
    pub async fn stop(self) {
        self.stop.notify_one();
        let _ = self.task.await;
        let settler = self.settler;
        let written = tokio::time::timeout(SETTLE_AT_STOP, tokio::task::spawn_blocking(move || settler.join())).await;
        if written.is_err() {
            tracing::warn!(
                "delivery outcomes still being written at the stop: their rows are due again at the next start"
            );
        }
    }
}

/// The sink a source's binding at an index delivers to, for rows the queue
/// makes again from their hooks.
struct BoundNames(Arc<dyn Directory>);

impl crate::queue::SinkNames for BoundNames {
    fn sink_name(&self, tenant: &str, source: &str, index: u16) -> Option<String> {
        let source = self.0.resolve(Some(tenant), source)?;
        let binding = source.sinks.iter().find(|b| b.index == index)?;
        Some(binding.sink.label().sink.clone())
    }
}
