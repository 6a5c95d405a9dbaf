//! A configured sink: one component, its options, its policy and its pool.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

use super::bindings::Hook;
use super::capability::FilesystemSettings;
use super::clock::ManualClock;
use super::egress::{EgressCounter, EgressCounts, EgressSettings, Resolver};
use super::http::{HttpLimits, Upstream};
use super::labels::SinkLabel;
use super::log::{LogChannel, LogLine, LogRate};
use super::outcome::{Failure, Outcome};
use super::pool::{InstancePool, PoolSnapshot, SinkExports};
use crate::problem::Checker;

/// Where a sink's component comes from.
#[derive(Clone, Debug)]
pub enum ComponentSource {
    /// A sink shipped inside the binary, by name (`log`, `http`).
    Builtin(String),
    /// A `.wasm` component file.
    Path(PathBuf),
    /// Component bytes already in memory; `origin` names them in errors.
    Bytes { origin: String, bytes: Arc<Vec<u8>> },
}

impl ComponentSource {
    /// `log` or `http` name a built-in sink; anything with a `/` or ending in
    /// `.wasm` is a path.
    pub fn parse(reference: &str) -> ComponentSource {
        if reference.contains('/') || reference.ends_with(".wasm") || reference.ends_with(".wat") {
            ComponentSource::Path(PathBuf::from(reference))
        } else {
            ComponentSource::Builtin(reference.to_string())
        }
    }
}

/// Resource limits of one configured sink.
#[derive(Clone, Debug)]
pub struct SinkLimits {
    /// Warm instances (and so concurrent deliveries) at most.
    pub concurrency: usize,
    /// Linear memory cap per instance.
    pub memory_bytes: usize,
    /// Deliveries an instance serves before it is retired.
    pub max_uses: u64,
    /// Wall-clock and CPU deadline of one attempt.
    pub attempt_timeout: Duration,
    pub http: HttpLimits,
    pub log_rate: LogRate,
    /// How many due hooks one `deliver-batch` call takes (used only if the
    /// component exports `ankusa:sink/batch`).
    pub batch: BatchLimits,
}

/// The bounds of one batch: dispatch hands a batching sink up to
/// `max_hooks` hooks and `max_bytes` of bodies per call, and waits at most
/// `max_wait` for a batch to fill before sending what it has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct BatchLimits {
    /// Hooks per call at most (1 turns batching off).
    pub max_hooks: usize,
    /// Body bytes per call at most (a single larger hook still goes alone).
    pub max_bytes: u64,
    /// How long a batch may wait for more hooks before it is sent as is.
    #[serde(rename = "max_wait_ms", with = "crate::settings::millis")]
    #[schema(value_type = u64)]
    pub max_wait: Duration,
}

impl BatchLimits {
    pub fn check(&self, c: &mut Checker) {
        c.within("max_hooks", self.max_hooks as u64, 1, 10_000);
        c.within("max_bytes", self.max_bytes, 1, 64 << 20);
        c.within_ms("max_wait_ms", self.max_wait, 0, 60_000);
    }
}

impl Default for BatchLimits {
    fn default() -> Self {
        BatchLimits { max_hooks: 100, max_bytes: 1 << 20, max_wait: Duration::from_millis(10) }
    }
}

impl Default for SinkLimits {
    fn default() -> Self {
        SinkLimits {
            concurrency: 32,
            memory_bytes: 64 << 20,
            max_uses: 10_000,
            attempt_timeout: Duration::from_secs(30),
            http: HttpLimits::default(),
            log_rate: LogRate::default(),
            batch: BatchLimits::default(),
        }
    }
}

/// Everything needed to load one configured sink.
#[derive(Clone)]
pub struct SinkSpec {
    pub label: SinkLabel,
    pub component: ComponentSource,
    /// Handed to the component's `configure` as JSON text.
    pub options: serde_json::Value,
    /// Where it may connect (the HTTP and socket capabilities).
    pub egress: EgressSettings,
    /// What it sees as `/` (the filesystem capability).
    pub filesystem: FilesystemSettings,
    /// The trust roots, server name and client certificate of the
    /// connections it opens (`tls:`), if it has any.
    pub tls: Option<crate::tls::TlsSettings>,
    pub limits: SinkLimits,
    pub upstream: Upstream,
    /// A controllable clock instead of the host's (plugin tests).
    pub clock: Option<Arc<ManualClock>>,
    /// How host names resolve: the system, or a table (plugin tests).
    pub resolver: Resolver,
    /// Keep guest log lines for inspection (plugin tests).
    pub capture_logs: bool,
}

impl SinkSpec {
    pub fn new(label: SinkLabel, component: ComponentSource) -> Self {
        SinkSpec {
            label,
            component,
            options: serde_json::Value::Object(Default::default()),
            egress: EgressSettings::default(),
            filesystem: FilesystemSettings::default(),
            tls: None,
            limits: SinkLimits::default(),
            upstream: Upstream::Network,
            clock: None,
            capture_logs: false,
            resolver: Resolver::System,
        }
    }
}

/// A loaded, configured sink, ready to deliver.
pub struct Sink {
    pub(crate) label: SinkLabel,
    pub(crate) sha256: String,
    pub(crate) durable: bool,
    /// Set when the component exports `batch`.
    pub(crate) batch: Option<BatchLimits>,
    pub(crate) attempt_timeout: Duration,
    pub(crate) memory_bytes: usize,
    /// Shared by every binding loaded with the same component, options
    /// and settings.
    pub(crate) pool: Arc<InstancePool<SinkExports>>,
    /// This binding's deliveries at once (`concurrency`).
    pub(crate) permits: Semaphore,
    pub(crate) log: Arc<LogChannel>,
    pub(crate) egress: Arc<EgressCounter>,
}

impl Sink {
    pub fn label(&self) -> &SinkLabel {
        &self.label
    }

    /// SHA-256 of the component's bytes.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// The component's own answer for the configured options.
    pub fn durable(&self) -> bool {
        self.durable
    }

    /// Deliver one hook, bounded by the sink's attempt timeout.
    pub async fn deliver(&self, hook: &Hook, attempt: u32) -> Outcome {
        self.deliver_within(hook, attempt, self.attempt_timeout).await
    }

    /// Deliver with an explicit deadline (dispatch passes its own).
    pub async fn deliver_within(&self, hook: &Hook, attempt: u32, timeout: Duration) -> Outcome {
        let Ok(_permit) = self.permits.acquire().await else {
            return Outcome::Failed(closing());
        };
        self.pool.deliver(hook, attempt, timeout).await
    }

    /// The bounds of a batch, if the component takes hooks a batch at a
    /// time (it exports `ankusa:sink/batch`).
    pub fn batch(&self) -> Option<BatchLimits> {
        self.batch
    }

    /// Deliver `hooks` in one call, one outcome per hook (`attempts[i]` is
    /// `hooks[i]`'s), bounded by `timeout` for the whole batch. For a sink
    /// without `batch`, one `deliver` call each on one instance.
    pub async fn deliver_batch_within(&self, hooks: &[Hook], attempts: &[u32], timeout: Duration) -> Vec<Outcome> {
        let Ok(_permit) = self.permits.acquire().await else {
            return vec![Outcome::Failed(closing()); hooks.len()];
        };
        self.pool.deliver_batch(hooks, attempts, timeout).await
    }

    /// The same loaded component for another binding (`label`), with its
    /// own deliveries at once and deadline: nothing is started.
    pub(crate) fn bound_as(&self, label: SinkLabel, limits: &SinkLimits) -> Sink {
        Sink {
            label,
            sha256: self.sha256.clone(),
            durable: self.durable,
            batch: self.batch.map(|_| limits.batch),
            attempt_timeout: limits.attempt_timeout,
            memory_bytes: self.memory_bytes,
            pool: self.pool.clone(),
            permits: Semaphore::new(limits.concurrency.max(1)),
            log: self.log.clone(),
            egress: self.egress.clone(),
        }
    }

    /// The linear memory cap of each instance.
    pub fn memory_bytes(&self) -> usize {
        self.memory_bytes
    }

    pub fn instances(&self) -> PoolSnapshot {
        self.pool.snapshot()
    }

    /// Captured guest log lines (only with `capture_logs`).
    pub fn logs(&self) -> Vec<LogLine> {
        self.log.captured()
    }

    pub fn suppressed_log_lines(&self) -> u64 {
        self.log.suppressed_total()
    }

    /// Connects attempted and destinations refused, since it loaded.
    pub fn egress(&self) -> EgressCounts {
        self.egress.counts()
    }
}

/// The answer while the node closes a sink's permits.
fn closing() -> Failure {
    Failure::new(crate::error_class::ErrorClass::Transient, "sink pool is shutting down")
}
