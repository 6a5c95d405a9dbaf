//! `/v1/quarantine`: list and purge the hooks held in the pen (releasing
//! them is a replay job of kind `quarantine`).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::error::Params;
use super::{ApiError, queue_of};
use crate::node::Node;
use crate::source::valid_tenant;

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct PenParams {
    /// Only this tenant's held hooks.
    pub tenant: Option<String>,
    /// Only this source's (needs `tenant`).
    pub source: Option<String>,
    /// Entries per page (1-1000, default 50).
    pub limit: Option<usize>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct PurgeParams {
    /// Purge this tenant's held hooks.
    pub tenant: Option<String>,
    /// Only this source's (needs `tenant`).
    pub source: Option<String>,
    /// Purge the whole pen (required when no tenant is named).
    #[serde(default)]
    pub all: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct HeldHook {
    pub id: String,
    pub tenant: String,
    pub source: String,
    pub received_at: u64,
    pub size: u64,
    pub sha256: String,
    /// Why verification failed (`signature_mismatch`, `stale_timestamp`, ...).
    pub reason: Option<String>,
    pub scheme: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PenPage {
    /// Bytes the pen holds, all tenants together.
    pub held_bytes: u64,
    pub entries: Vec<HeldHook>,
    pub next_cursor: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Purged {
    pub purged: u64,
}

fn scope(tenant: &Option<String>, source: &Option<String>) -> Result<(), ApiError> {
    if tenant.as_deref().is_some_and(|t| !valid_tenant(t)) {
        return Err(ApiError::bad_request("invalid_query", "tenant: not a tenant id"));
    }
    if source.is_some() && tenant.is_none() {
        return Err(ApiError::bad_request("invalid_query", "source: needs tenant"));
    }
    Ok(())
}

/// Held hooks, in key order.
#[utoipa::path(get, path = "/v1/quarantine", tag = "quarantine", params(PenParams),
    responses(
        (status = 200, description = "A page of held hooks", body = PenPage),
        (status = 400, description = "A bad parameter, or `invalid_cursor`", body = super::ErrorBody),
    ))]
pub async fn list(State(node): State<Arc<Node>>, Params(params): Params<PenParams>) -> Result<Json<PenPage>, ApiError> {
    let queue = queue_of(&node)?;
    scope(&params.tenant, &params.source)?;
    let limit = super::page_limit(params.limit)?;
    let after = match &params.cursor {
        None => None,
        Some(cursor) => {
            let key = hex::decode(cursor).ok().filter(|k| crate::queue::is_pen_key(k));
            Some(key.ok_or_else(|| ApiError::bad_request("invalid_cursor", "not a cursor of this listing"))?)
        }
    };
    let held = queue.pen().pen_page(params.tenant.as_deref(), params.source.as_deref(), after.as_deref(), limit)?;
    let next_cursor = (held.len() == limit).then(|| held.last().map(|e| hex::encode(&e.key))).flatten();
    let entries = held
        .iter()
        .map(|e| HeldHook {
            id: e.envelope.id.clone(),
            tenant: e.envelope.tenant_id.clone(),
            source: e.envelope.source_id.clone(),
            received_at: e.envelope.received_at,
            size: e.envelope.size(),
            sha256: e.envelope.sha256.clone(),
            reason: e.envelope.verification.reason.clone(),
            scheme: e.envelope.verification.scheme.clone(),
        })
        .collect();
    Ok(Json(PenPage { held_bytes: queue.pen().pen_bytes()?, entries, next_cursor }))
}

/// Purge held hooks of a tenant (or one of its sources), or, with
/// `all=true`, the whole pen.
#[utoipa::path(delete, path = "/v1/quarantine", tag = "quarantine", params(PurgeParams),
    responses(
        (status = 200, description = "How many were purged", body = Purged),
        (status = 400, description = "Neither a tenant nor all=true", body = super::ErrorBody),
    ))]
pub async fn purge(
    State(node): State<Arc<Node>>,
    Params(params): Params<PurgeParams>,
) -> Result<Json<Purged>, ApiError> {
    let queue = queue_of(&node)?;
    scope(&params.tenant, &params.source)?;
    if params.tenant.is_none() && !params.all {
        return Err(ApiError::bad_request("invalid_query", "name a tenant, or pass all=true to purge the whole pen"));
    }
    let purged = queue.pen().purge_pen(params.tenant.as_deref(), params.source.as_deref())?;
    tracing::info!(tenant = ?params.tenant, source = ?params.source, purged, "quarantine purged");
    Ok(Json(Purged { purged }))
}
