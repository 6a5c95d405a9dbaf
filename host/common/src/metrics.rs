//! The node's Prometheus metrics: one registry for the process.
//!
//! Subsystems record events here as they happen (requests, commits,
//! deliveries, breaker transitions). Levels that the store already keeps
//! exactly (pending, inflight, dead, ...) are read from its counters when
//! scraped, never counted twice. Label values are bounded: outcomes and
//! classes are fixed sets, sources and sinks are configured names, and a
//! request for an unknown source is counted under its outcome only.

use std::sync::LazyLock;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SinkLabels {
    pub source: String,
    pub sink: String,
}

/// A configured sink (or transform) by name alone: its instances are
/// shared by every source bound to it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabels {
    pub sink: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeliveryLabels {
    pub source: String,
    pub sink: String,
    /// `ok` or the error class.
    pub class: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BreakerLabels {
    pub source: String,
    pub sink: String,
    /// `open`, `half_open` or `closed`.
    pub to: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FamilyLabels {
    /// A store column family: a fixed set.
    pub family: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    pub state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// A refusal's code: a fixed set.
    pub reason: &'static str,
}

pub struct Metrics {
    pub ingest_requests: Family<OutcomeLabels, Counter>,
    pub admin_refused: Family<ReasonLabels, Counter>,
    pub commit_seconds: Histogram,
    pub commit_group_hooks: Histogram,
    pub load_shed: Counter,
    /// `fleet`: JetStream publish rounds (one per group) and their failures.
    pub fleet_publish_seconds: Histogram,
    pub fleet_publish_hooks: Histogram,
    pub fleet_publish_failures: Counter,
    pub fleet_takeovers: Counter,
    pub fleet_undecodable: Counter,
    pub fleet_bucket_lost: Counter,
    pub queue_rows: Family<StateLabels, Gauge>,
    pub oldest_due_age_seconds: Gauge<f64, AtomicU64>,
    pub deliveries: Family<DeliveryLabels, Counter>,
    /// Hooks a binding's transforms dropped (the `filtered` outcome).
    pub filtered: Family<SinkLabels, Counter>,
    pub settle_batch: Histogram,
    /// Hooks per `deliver-batch` call.
    pub batch_hooks: Histogram,
    pub breaker_transitions: Family<BreakerLabels, Counter>,
    pub breakers_open: Gauge,
    pub replay_moved: Gauge,
    pub replay_throttled_seconds: Gauge<f64, AtomicU64>,
    pub replay_jobs: Family<StateLabels, Gauge>,
    pub sink_instances: Family<PoolLabels, Gauge>,
    pub sink_memory_cap_bytes: Family<PoolLabels, Gauge>,
    pub sink_traps: Family<PoolLabels, Gauge>,
    pub sink_timeouts: Family<PoolLabels, Gauge>,
    pub sink_memory_faults: Family<PoolLabels, Gauge>,
    pub store_corruption: Family<FamilyLabels, Counter>,
    pub sink_egress_connects: Family<PoolLabels, Gauge>,
    pub sink_egress_denied: Family<PoolLabels, Gauge>,
    registry: Registry,
    described: Vec<Metric>,
}

impl Metrics {
    /// A hook the transforms of the binding `source` → `sink` dropped.
    pub fn count_filtered(&self, source: &str, sink: &str) {
        self.filtered.get_or_create(&SinkLabels { source: source.into(), sink: sink.into() }).inc();
    }

    /// The hooks the transforms of the binding `source` → `sink` dropped
    /// since the node started.
    pub fn filtered_of(&self, source: &str, sink: &str) -> u64 {
        self.filtered.get(&SinkLabels { source: source.into(), sink: sink.into() }).map_or(0, |counter| counter.get())
    }
}

/// One metric as registered: what the metrics reference lists, whether or
/// not it has samples yet.
#[derive(Clone, Debug)]
pub struct Metric {
    /// Its exposed name, prefix included (a counter adds `_total`).
    pub name: String,
    pub kind: &'static str,
    pub help: &'static str,
}

/// The registry, and what was registered in it.
struct Described {
    registry: Registry,
    metrics: Vec<Metric>,
}

impl Described {
    fn register<M>(&mut self, name: &str, help: &'static str, metric: M)
    where
        M: prometheus_client::registry::Metric + TypedMetric,
    {
        let kind = match M::TYPE {
            MetricType::Counter => "counter",
            MetricType::Gauge => "gauge",
            MetricType::Histogram => "histogram",
            _ => "other",
        };
        self.metrics.push(Metric { name: format!("ankusa_{name}"), kind, help });
        self.registry.register(name, help, metric);
    }
}

impl Metrics {
    fn new() -> Metrics {
        let mut registry = Described { registry: Registry::with_prefix("ankusa"), metrics: Vec::new() };
        let ingest_requests = Family::<OutcomeLabels, Counter>::default();
        registry.register("ingest_requests", "Webhook requests answered, by outcome", ingest_requests.clone());
        let admin_refused = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "admin_refused",
            "Admin API requests refused before their handler, by reason (a foreign Host or Origin, a cross-site \
             request, a request head over the limits)",
            admin_refused.clone(),
        );
        let commit_seconds = Histogram::new(exponential_buckets(0.000_25, 2.0, 16));
        registry.register(
            "commit_duration_seconds",
            "Synced group commits of the queue writer",
            commit_seconds.clone(),
        );
        let commit_group_hooks = Histogram::new(exponential_buckets(1.0, 2.0, 14));
        registry.register("commit_group_hooks", "Hooks per synced group commit", commit_group_hooks.clone());
        let load_shed = Counter::default();
        registry.register("load_shed", "Requests refused with 503 overload by the batcher", load_shed.clone());
        let fleet_publish_seconds = Histogram::new(exponential_buckets(0.000_25, 2.0, 16));
        registry.register(
            "fleet_publish_duration_seconds",
            "JetStream publish rounds of the writer (a group's hooks, until a quorum acked them)",
            fleet_publish_seconds.clone(),
        );
        let fleet_publish_hooks = Histogram::new(exponential_buckets(1.0, 2.0, 14));
        registry.register("fleet_publish_hooks", "Hooks per JetStream publish round", fleet_publish_hooks.clone());
        let fleet_publish_failures = Counter::default();
        registry.register(
            "fleet_publish_failures",
            "JetStream publish rounds that failed (their hooks were refused with 503)",
            fleet_publish_failures.clone(),
        );
        let fleet_takeovers = Counter::default();
        registry.register("fleet_takeovers", "Takeovers of a lapsed node this node ran", fleet_takeovers.clone());
        let fleet_undecodable = Counter::default();
        registry.register(
            "fleet_undecodable",
            "Logged hooks a takeover could not decode, each dead-lettered as a fault",
            fleet_undecodable.clone(),
        );
        let fleet_bucket_lost = Counter::default();
        registry.register(
            "fleet_bucket_lost",
            "Times this node found the fleet's leases bucket lost and made again",
            fleet_bucket_lost.clone(),
        );
        let queue_rows = Family::<StateLabels, Gauge>::default();
        registry.register(
            "queue_rows",
            "Delivery rows by state (from the store's counters): pending, scheduled, inflight, dead; waiting \
             (pending rows of ordered keys waiting their turn: behind their key's head, or its head moved up \
             and not yet claimed) and held (dead heads holding their key: one per held key)",
            queue_rows.clone(),
        );
        let oldest_due_age_seconds = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "queue_oldest_due_age_seconds",
            "How late the earliest due row is (0 when none is late)",
            oldest_due_age_seconds.clone(),
        );
        let deliveries = Family::<DeliveryLabels, Counter>::default();
        registry.register("deliveries", "Delivery attempts by sink and outcome class", deliveries.clone());
        let filtered = Family::<SinkLabels, Counter>::default();
        registry.register(
            "filtered",
            "Hooks a binding's transforms dropped: not delivered to its sink, not dead",
            filtered.clone(),
        );
        let settle_batch = Histogram::new(exponential_buckets(1.0, 2.0, 11));
        registry.register("settle_batch_rows", "Delivery outcomes recorded per store write", settle_batch.clone());
        let batch_hooks = Histogram::new(exponential_buckets(2.0, 2.0, 13));
        registry.register("delivery_batch_hooks", "Hooks per deliver-batch call", batch_hooks.clone());
        let breaker_transitions = Family::<BreakerLabels, Counter>::default();
        registry.register("breaker_transitions", "Circuit breaker state changes", breaker_transitions.clone());
        let breakers_open = Gauge::default();
        registry.register("breakers_open", "Sink breakers open now", breakers_open.clone());
        let replay_moved = Gauge::default();
        registry.register("replay_moved_rows", "Rows moved by replay jobs, all jobs together", replay_moved.clone());
        let replay_throttled_seconds = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "replay_throttled_seconds",
            "Time replay jobs waited for dispatch to catch up",
            replay_throttled_seconds.clone(),
        );
        let replay_jobs = Family::<StateLabels, Gauge>::default();
        registry.register("replay_jobs", "Replay jobs by state", replay_jobs.clone());
        let sink_instances = Family::<PoolLabels, Gauge>::default();
        registry.register(
            "sink_instances",
            "Instances of each sink, busy or idle, shared by the sources bound to it",
            sink_instances.clone(),
        );
        let sink_memory_cap_bytes = Family::<PoolLabels, Gauge>::default();
        registry.register(
            "sink_memory_cap_bytes",
            "Linear memory each instance of a sink may use",
            sink_memory_cap_bytes.clone(),
        );
        let sink_traps = Family::<PoolLabels, Gauge>::default();
        registry.register("sink_traps", "Instances of a sink that trapped, since it loaded", sink_traps.clone());
        let sink_timeouts = Family::<PoolLabels, Gauge>::default();
        registry.register(
            "sink_timeouts",
            "Attempts of a sink cut off at their deadline, since it loaded",
            sink_timeouts.clone(),
        );
        let sink_memory_faults = Family::<PoolLabels, Gauge>::default();
        registry.register(
            "sink_memory_faults",
            "Instances of a sink that hit their memory cap, since it loaded",
            sink_memory_faults.clone(),
        );
        let store_corruption = Family::<FamilyLabels, Counter>::default();
        registry.register(
            "store_corruption",
            "Damaged blocks found in the store (a checksum mismatch), each once, by column family",
            store_corruption.clone(),
        );
        let sink_egress_connects = Family::<PoolLabels, Gauge>::default();
        registry.register(
            "sink_egress_connects",
            "Connections a sink made (HTTP and TCP), since it loaded",
            sink_egress_connects.clone(),
        );
        let sink_egress_denied = Family::<PoolLabels, Gauge>::default();
        registry.register(
            "sink_egress_denied",
            "Destinations a sink was refused by its egress policy, since it loaded",
            sink_egress_denied.clone(),
        );
        Metrics {
            ingest_requests,
            admin_refused,
            commit_seconds,
            commit_group_hooks,
            load_shed,
            fleet_publish_seconds,
            fleet_publish_hooks,
            fleet_publish_failures,
            fleet_takeovers,
            fleet_undecodable,
            fleet_bucket_lost,
            queue_rows,
            oldest_due_age_seconds,
            deliveries,
            filtered,
            settle_batch,
            batch_hooks,
            breaker_transitions,
            breakers_open,
            replay_moved,
            replay_throttled_seconds,
            replay_jobs,
            sink_instances,
            sink_memory_cap_bytes,
            sink_traps,
            sink_timeouts,
            sink_memory_faults,
            store_corruption,
            sink_egress_connects,
            sink_egress_denied,
            registry: registry.registry,
            described: registry.metrics,
        }
    }

    /// An admin request refused before its handler, for `reason`.
    pub fn admin_refused(&self, reason: &'static str) {
        self.admin_refused.get_or_create(&ReasonLabels { reason }).inc();
    }

    /// Every metric registered, in order.
    pub fn described(&self) -> &[Metric] {
        &self.described
    }

    /// The exposition text (OpenMetrics, which Prometheus scrapes).
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// The process's metrics.
pub fn metrics() -> &'static Metrics {
    &METRICS
}

/// Count one answered ingest request.
pub fn ingest(outcome: &'static str) {
    metrics().ingest_requests.get_or_create(&OutcomeLabels { outcome }).inc();
}

/// A damaged block found in a store family.
pub fn store_damage(family: &'static str) {
    metrics().store_corruption.get_or_create(&FamilyLabels { family }).inc();
}

/// The content type of [`Metrics::encode`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
