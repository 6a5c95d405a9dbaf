//! `/v1/ordering`: the keys of ordered bindings held by a dead hook
//! (`on_dead: hold`), and releasing one (its dead hook stays in the DLQ;
//! the hooks behind it are delivered, the first carrying its id).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::error::{Body, Params};
use super::{ApiError, queue_of};
use crate::node::Node;
use crate::queue::{LineId, now_ms};
use crate::source::{Directory, valid_tenant};

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct HeldParams {
    /// Only this tenant's held keys.
    pub tenant: Option<String>,
    /// Keys listed at most (1-1000, default 50).
    pub limit: Option<usize>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct HeldKey {
    pub tenant: String,
    pub source: String,
    /// The sink's name (`None` if the source no longer binds its index).
    pub sink: Option<String>,
    pub sink_index: u16,
    /// The ordering key's value.
    pub key: String,
    /// The dead hook holding the key: replay it (it is delivered first) or
    /// release the key.
    pub hook_id: Option<String>,
    pub seq: u64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct HeldKeys {
    pub entries: Vec<HeldKey>,
}

/// One held key to release.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReleaseBody {
    /// The source's tenant (default `default`).
    pub tenant: Option<String>,
    pub source: String,
    /// The sink's name in that source.
    pub sink: String,
    /// The ordering key's value, as `GET /v1/ordering/held` lists it.
    pub key: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Released {
    /// The dead hook that held the key (it stays in the DLQ).
    pub seq: u64,
}

/// Keys held by a dead hook.
#[utoipa::path(get, path = "/v1/ordering/held", tag = "ordering", params(HeldParams),
    responses(
        (status = 200, description = "Held keys, by tenant, source, sink and key", body = HeldKeys),
        (status = 400, description = "A bad parameter", body = super::ErrorBody),
    ))]
pub async fn held(
    State(node): State<Arc<Node>>,
    Params(params): Params<HeldParams>,
) -> Result<Json<HeldKeys>, ApiError> {
    let queue = queue_of(&node)?;
    if params.tenant.as_deref().is_some_and(|t| !valid_tenant(t)) {
        return Err(ApiError::bad_request("invalid_query", "tenant: not a tenant id"));
    }
    let limit = super::page_limit(params.limit)?;
    let held = queue.dead_letters().held_lines(params.tenant.as_deref(), limit)?;
    let entries = held
        .into_iter()
        .map(|held| {
            let source = node.sources.resolve(Some(&held.line.tenant), &held.line.source);
            let sink = source
                .and_then(|s| s.sinks.iter().find(|b| b.index == held.line.sink).map(|b| b.sink.label().sink.clone()));
            let hook_id = queue.deliveries().hook(held.seq).ok().flatten().map(|envelope| envelope.id);
            HeldKey {
                tenant: held.line.tenant,
                source: held.line.source,
                sink,
                sink_index: held.line.sink,
                key: held.line.key,
                hook_id,
                seq: held.seq,
            }
        })
        .collect();
    Ok(Json(HeldKeys { entries }))
}

/// Release a held key: its dead hook stays in the DLQ, the hooks behind it
/// are delivered in order, the first carrying `x-ankusa-previous-dead`.
#[utoipa::path(post, path = "/v1/ordering/release", tag = "ordering", request_body = ReleaseBody,
    responses(
        (status = 200, description = "Released", body = Released),
        (status = 404, description = "No such source or sink, or the key is not held", body = super::ErrorBody),
    ))]
pub async fn release(State(node): State<Arc<Node>>, Body(body): Body<ReleaseBody>) -> Result<Json<Released>, ApiError> {
    let queue = queue_of(&node)?;
    let tenant = body.tenant.unwrap_or_else(|| crate::tenant::DEFAULT_TENANT.to_string());
    let source = node
        .sources
        .resolve(Some(&tenant), &body.source)
        .ok_or_else(|| ApiError::not_found(format!("source `{}` of tenant `{tenant}`", body.source)))?;
    let sink = source
        .sinks
        .iter()
        .find(|b| b.sink.label().sink == body.sink)
        .ok_or_else(|| ApiError::not_found(format!("sink `{}` of source `{}`", body.sink, body.source)))?;
    let line = LineId { tenant, source: body.source, sink: sink.index, key: body.key };
    match queue.dead_letters().release_line(&line, now_ms())? {
        Some(seq) => Ok(Json(Released { seq })),
        None => Err(ApiError::not_found("the key is not held".to_string())),
    }
}
