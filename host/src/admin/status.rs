//! Probes, metrics, the document, and what the node runs with.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Value, json};
use utoipa::ToSchema;

use super::ApiError;
use crate::metrics::{PoolLabels, StateLabels};
use crate::node::Node;
use crate::queue::now_ms;

/// The process is up.
#[utoipa::path(get, path = "/health", tag = "status", security(()),
    responses((status = 200, description = "Alive", body = Object, example = json!({"status": "ok"}))))]
pub async fn health() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// Ready: the store takes writes (none failed since the last that
/// succeeded), has its reserve of free space and is not known damaged.
#[utoipa::path(get, path = "/ready", tag = "status", security(()),
    responses((status = 200, description = "Ready", body = Object),
        (status = 503, description = "Not ready: `details.reasons` gives every reason (`store_write_failed`, \
            `store_sync_failed`, `low_disk_space`, `store_damaged`)", body = super::ErrorBody)))]
pub async fn ready(State(node): State<Arc<Node>>) -> Response {
    crate::edge::readiness(node.queue.as_deref().map(crate::queue::Queue::intake).as_ref())
}

/// Prometheus metrics (OpenMetrics text).
#[utoipa::path(get, path = "/metrics", tag = "status",
    responses((status = 200, description = "The exposition", content_type = "application/openmetrics-text", body = String)))]
pub async fn metrics(State(node): State<Arc<Node>>) -> Response {
    refresh_levels(&node);
    ([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], crate::metrics::metrics().encode()).into_response()
}

/// Set the gauges that are read, not counted: the store's row counters,
/// breakers, replay jobs and sink pools.
fn refresh_levels(node: &Node) {
    let m = crate::metrics::metrics();
    if let Some(queue) = &node.queue {
        for state in ["pending", "scheduled", "inflight", "dead", "waiting", "held"] {
            let n = queue.counter(None, state).unwrap_or(0);
            m.queue_rows.get_or_create(&StateLabels { state }).set(n);
        }
        let late = match queue.deliveries().next_due_at() {
            Ok(Some(due)) => now_ms().saturating_sub(due) as f64 / 1000.0,
            _ => 0.0,
        };
        m.oldest_due_age_seconds.set(late);
        if let Ok(jobs) = crate::replay::jobs(queue) {
            m.replay_moved.set(jobs.iter().map(|j| j.moved as i64).sum());
            m.replay_throttled_seconds.set(jobs.iter().map(|j| j.throttled_ms as f64 / 1000.0).sum());
            use crate::replay::JobState;
            for state in [JobState::Running, JobState::Paused, JobState::Done, JobState::Cancelled, JobState::Failed] {
                let n = jobs.iter().filter(|j| j.state == state).count();
                m.replay_jobs.get_or_create(&StateLabels { state: state.as_str() }).set(n as i64);
            }
        }
    }
    if let Some(dispatcher) = &node.dispatcher {
        m.breakers_open.set(dispatcher.breakers_open() as i64);
    }
    // A sink's instances are shared by the sources bound to it: each sink
    // once, whatever binds it.
    let mut seen = std::collections::HashSet::new();
    for (source, _) in node.sources.all() {
        for binding in &source.sinks {
            let sink = &binding.sink;
            if !seen.insert(sink.label().sink.clone()) {
                continue;
            }
            let labels = PoolLabels { sink: sink.label().sink.clone() };
            let pool = sink.instances();
            m.sink_instances.get_or_create(&labels).set(pool.created.saturating_sub(pool.retired) as i64);
            m.sink_memory_cap_bytes.get_or_create(&labels).set(sink.memory_bytes() as i64);
            m.sink_traps.get_or_create(&labels).set(pool.traps as i64);
            m.sink_timeouts.get_or_create(&labels).set(pool.timeouts as i64);
            m.sink_memory_faults.get_or_create(&labels).set(pool.memory_faults as i64);
            let egress = sink.egress();
            m.sink_egress_connects.get_or_create(&labels).set(egress.connects as i64);
            m.sink_egress_denied.get_or_create(&labels).set(egress.denied as i64);
        }
    }
}

/// This document.
#[utoipa::path(get, path = "/openapi.json", tag = "status",
    responses((status = 200, description = "The OpenAPI 3.1 document of the admin API", body = Object)))]
pub async fn openapi() -> Json<&'static utoipa::openapi::OpenApi> {
    Json(super::document())
}

/// The configuration in force, defaults filled in, secrets redacted.
#[utoipa::path(get, path = "/v1/config", tag = "status",
    responses((status = 200, description = "The configuration", body = Object)))]
pub async fn config(State(node): State<Arc<Node>>) -> Json<Value> {
    Json(crate::config::redacted(&node.config))
}

#[derive(Serialize, ToSchema)]
pub struct WalStats {
    /// `disk`, `dual` or `none`.
    pub mode: &'static str,
    /// What an ack means under this mode.
    pub durability: String,
    pub store: Option<StoreStats>,
    /// `dual`: where the intake log lives.
    pub intake_dir: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct StoreStats {
    pub path: String,
    pub disk_bytes: u64,
    pub next_seq: u64,
    pub hooks: u64,
    pub deliveries: u64,
    /// Synced group commits since the node started.
    pub commits: u64,
    /// Calls those commits answered, and the hooks they stored.
    pub calls: u64,
    pub committed_hooks: u64,
    pub checkpoints: u64,
    /// The last failed write (unix ms), if any.
    pub last_commit_failure_ms: Option<u64>,
}

/// The write-ahead side: the mode, the store and the intake log.
#[utoipa::path(get, path = "/v1/wal", tag = "status",
    responses((status = 200, description = "WAL statistics", body = WalStats)))]
pub async fn wal(State(node): State<Arc<Node>>) -> Result<Json<WalStats>, ApiError> {
    let config = &node.config;
    let store = match &node.queue {
        None => None,
        Some(queue) => {
            let stats = queue.stats()?;
            let commits = queue.commit_stats();
            Some(StoreStats {
                path: config.store_dir().display().to_string(),
                disk_bytes: stats.disk_bytes,
                next_seq: stats.next_seq,
                hooks: stats.hooks,
                deliveries: stats.deliveries,
                commits: commits.commits,
                calls: commits.calls,
                committed_hooks: commits.hooks,
                checkpoints: commits.checkpoints,
                last_commit_failure_ms: queue.last_commit_failure_ms(),
            })
        }
    };
    Ok(Json(WalStats {
        mode: config.wal_mode().label(),
        durability: config.wal_mode().ack_means(&config.intake_dir()),
        store,
        intake_dir: (config.wal_mode() == crate::queue::WalMode::Dual)
            .then(|| config.intake_dir().display().to_string()),
    }))
}
