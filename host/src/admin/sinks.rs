//! `/v1/sinks`: the loaded components and their state, hot reload, and a
//! component uploaded in place of a configured sink's.

use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::State;

use super::error::Segments;
use axum::http::StatusCode;
use serde::Serialize;
use utoipa::ToSchema;

use super::error::{ApiError, ErrorBody};
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
    /// The binding's transforms, in the order a hook passes them.
    pub transforms: Vec<LoadedTransform>,
    /// Hooks those transforms dropped since the node started.
    pub filtered: u64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct LoadedTransform {
    pub name: String,
    pub sha256: String,
    pub instances: Instances,
}

impl Instances {
    fn of(pool: crate::runtime::PoolSnapshot) -> Instances {
        Instances {
            live: pool.created.saturating_sub(pool.retired),
            idle: pool.idle,
            created: pool.created,
            retired: pool.retired,
            traps: pool.traps,
            timeouts: pool.timeouts,
            memory_faults: pool.memory_faults,
        }
    }
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
                instances: Instances::of(pool),
                breaker,
                breaker_until_ms: until,
                transforms: binding
                    .transforms
                    .iter()
                    .map(|t| LoadedTransform {
                        name: t.name().to_string(),
                        sha256: t.sha256().to_string(),
                        instances: Instances::of(t.instances()),
                    })
                    .collect(),
                filtered: crate::metrics::metrics().filtered_of(&source.name, &sink.label().sink),
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

/// The most a component upload may carry (a Python sink is about 20 MiB).
pub const MAX_UPLOAD_BYTES: usize = 128 * 1024 * 1024;

/// Load the request body (a `.wasm` component) as the configured sink
/// `name` and swap it in wherever a source delivers to it; a component
/// that fails to load leaves the running one in place. The upload lasts
/// until the sink is reloaded from its file or the node restarts: this is
/// `ankusa sink dev`'s loop, not a deployment.
#[utoipa::path(put, path = "/v1/sinks/{name}/component", tag = "sinks",
    params(("name" = String, Path, description = "A sink of the node's config")),
    request_body(content = Vec<u8>, content_type = "application/wasm", description = "The component"),
    responses(
        (status = 200, description = "Swapped in (or the same component again)", body = ReloadReport),
        (status = 404, description = "No sink of that name", body = ErrorBody),
        (status = 413, description = "Larger than 128 MiB", body = ErrorBody),
        (status = 422, description = "The component does not load; the running one stays", body = ErrorBody)))]
pub async fn upload(
    State(node): State<Arc<Node>>,
    Segments(name): Segments<String>,
    body: Body,
) -> Result<Json<ReloadReport>, ApiError> {
    // Read here, not by an extractor: those stop at axum's 2 MiB default.
    let component = axum::body::to_bytes(body, MAX_UPLOAD_BYTES).await.map_err(|_| {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!("a component is at most {MAX_UPLOAD_BYTES} bytes"),
        )
    })?;
    let report = node
        .replace_sink_component(&name, Arc::new(component.to_vec()))
        .await
        .ok_or_else(|| ApiError::not_found(format!("no sink named `{name}` in the node's config")))?;
    if let Some(failure) = report.failed.first() {
        return Err(ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "component_refused", failure.reason.clone())
            .with_details(serde_json::to_value(&report).unwrap_or_default()));
    }
    Ok(Json(report))
}
