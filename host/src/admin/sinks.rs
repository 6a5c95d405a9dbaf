//! `/v1/sinks`: the loaded components and their state, and hot reload.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;

use crate::dispatch::BreakerState;
use crate::node::Node;
use crate::source::ReloadReport;

#[derive(Debug, Serialize, ToSchema)]
pub struct LoadedSink {
    pub source: String,
    pub tenant: String,
    /// The sink's index within its source.
    pub index: u16,
    pub name: String,
    /// `log`, `http`, or the `.wasm` path.
    pub component: String,
    pub sha256: String,
    pub durable: bool,
    pub memory_bytes: usize,
    pub instances: Instances,
    /// `closed`, `open` or `half_open`.
    pub breaker: &'static str,
    /// While open: when the next probe may run (unix ms).
    pub breaker_until_ms: Option<u64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Instances {
    /// Live now (created minus retired).
    pub live: u64,
    pub idle: usize,
    pub created: u64,
    pub retired: u64,
    pub traps: u64,
    pub timeouts: u64,
    pub memory_faults: u64,
}

/// Every loaded sink of every source.
#[utoipa::path(get, path = "/v1/sinks", tag = "sinks",
    responses((status = 200, description = "The loaded sinks", body = Vec<LoadedSink>)))]
pub async fn list(State(node): State<Arc<Node>>) -> Json<Vec<LoadedSink>> {
    let mut sinks = Vec::new();
    for (source, _) in node.sources.all() {
        for binding in &source.sinks {
            let sink = &binding.sink;
            let pool = sink.instances();
            let breaker = node.dispatcher.as_ref().and_then(|d| d.breaker(&source.tenant, &source.name, binding.index));
            let (breaker, until) = match breaker {
                None | Some(BreakerState::Closed { .. }) => ("closed", None),
                Some(BreakerState::Open { until_ms, .. }) => ("open", Some(until_ms)),
                Some(BreakerState::HalfOpen { .. }) => ("half_open", None),
            };
            sinks.push(LoadedSink {
                source: source.name.clone(),
                tenant: source.tenant.clone(),
                index: binding.index,
                name: sink.label().sink.clone(),
                component: node.config.sinks.get(&sink.label().sink).map(|s| s.component.clone()).unwrap_or_default(),
                sha256: sink.sha256().to_string(),
                durable: sink.durable(),
                memory_bytes: sink.memory_bytes(),
                instances: Instances {
                    live: pool.created.saturating_sub(pool.retired),
                    idle: pool.idle,
                    created: pool.created,
                    retired: pool.retired,
                    traps: pool.traps,
                    timeouts: pool.timeouts,
                    memory_faults: pool.memory_faults,
                },
                breaker,
                breaker_until_ms: until,
            });
        }
    }
    Json(sinks)
}

/// Reload every sink whose component file changed, swapping it in: calls
/// in flight finish on the old version. (SIGHUP does the same.)
#[utoipa::path(post, path = "/v1/sinks/reload", tag = "sinks",
    responses((status = 200, description = "What was swapped, unchanged or failed", body = ReloadReport)))]
pub async fn reload(State(node): State<Arc<Node>>) -> Json<ReloadReport> {
    Json(node.reload_sinks().await)
}
