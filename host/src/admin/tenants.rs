//! `/v1/tenants/{tenant}`: usage (from counters, O(1)), the rate limit,
//! and erase.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;

use super::error::Segments;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::error::Body;
use super::{ApiError, queue_of, tenant_checked};
use crate::edge::rate::Rate;
use crate::node::Node;
use crate::tenant::StoredRate;

#[derive(Debug, Serialize, ToSchema)]
pub struct Usage {
    pub tenant: String,
    /// Rows due for a first attempt or a retry.
    pub pending: i64,
    /// Of those, rows waiting out a backoff.
    pub scheduled: i64,
    pub inflight: i64,
    pub dead: i64,
    /// Bytes of undelivered hooks.
    pub bytes: i64,
    pub dedupe_keys: i64,
    pub sources: usize,
    pub erasing: bool,
}

/// A tenant's usage, read from its counters.
#[utoipa::path(get, path = "/v1/tenants/{tenant}/usage", tag = "tenants",
    params(("tenant" = String, Path, description = "The tenant id")),
    responses((status = 200, description = "Its usage", body = Usage), (status = 400, description = "A bad tenant id", body = super::ErrorBody)))]
pub async fn usage(State(node): State<Arc<Node>>, Segments(tenant): Segments<String>) -> Result<Json<Usage>, ApiError> {
    tenant_checked(&tenant)?;
    Ok(Json(usage_of(&node, tenant)?))
}

fn usage_of(node: &Node, tenant: String) -> Result<Usage, ApiError> {
    let queue = queue_of(node)?;
    let count = |kind| queue.counter(Some(&tenant), kind);
    Ok(Usage {
        pending: count("pending")?,
        scheduled: count("scheduled")?,
        inflight: count("inflight")?,
        dead: count("dead")?,
        bytes: count("bytes")?,
        dedupe_keys: count("dedupe_keys")?,
        sources: node.sources.all().iter().filter(|(s, _)| s.tenant == tenant).count(),
        erasing: queue.tenants().erasing().contains(&tenant),
        tenant,
    })
}

/// Every tenant the node knows (owning a source, holding data, or being
/// erased), each with its usage.
#[utoipa::path(get, path = "/v1/tenants", tag = "tenants",
    responses((status = 200, description = "Every tenant and its usage", body = Vec<Usage>)))]
pub async fn list(State(node): State<Arc<Node>>) -> Result<Json<Vec<Usage>>, ApiError> {
    let queue = queue_of(&node)?;
    let mut ids: std::collections::BTreeSet<String> = queue.tenants().holding_ids().into_iter().collect();
    ids.extend(queue.tenants().erasing());
    ids.extend(node.sources.all().iter().map(|(s, _)| s.tenant.clone()));
    Ok(Json(ids.into_iter().map(|tenant| usage_of(&node, tenant)).collect::<Result<_, _>>()?))
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    /// Requests per second, sustained.
    pub rate: f64,
    /// Requests at once on top of the rate.
    pub burst: u32,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RateLimitView {
    pub tenant: String,
    pub rate: f64,
    pub burst: u32,
    /// `false`: the node's default applies.
    pub own: bool,
}

fn edge_of(node: &Node) -> Result<&crate::edge::Edge, ApiError> {
    node.edge.as_deref().ok_or_else(|| ApiError::conflict("no_ingest", "this node does not run the ingest role"))
}

/// The rate a tenant's hooks are held to.
#[utoipa::path(get, path = "/v1/tenants/{tenant}/rate-limit", tag = "tenants",
    params(("tenant" = String, Path, description = "The tenant id")),
    responses((status = 200, description = "Its limit", body = RateLimitView)))]
pub async fn get_rate_limit(
    State(node): State<Arc<Node>>,
    Segments(tenant): Segments<String>,
) -> Result<Json<RateLimitView>, ApiError> {
    tenant_checked(&tenant)?;
    let (rate, own) = edge_of(&node)?.tenant_limits.rate_of(&tenant);
    Ok(Json(RateLimitView { tenant, rate: rate.per_second, burst: rate.burst, own }))
}

/// Set a tenant's own rate limit (kept across restarts).
#[utoipa::path(put, path = "/v1/tenants/{tenant}/rate-limit", tag = "tenants", request_body = RateLimit,
    params(("tenant" = String, Path, description = "The tenant id")),
    responses((status = 200, description = "The new limit", body = RateLimitView), (status = 400, description = "A bad body", body = super::ErrorBody)))]
pub async fn put_rate_limit(
    State(node): State<Arc<Node>>,
    Segments(tenant): Segments<String>,
    Body(limit): Body<RateLimit>,
) -> Result<Json<RateLimitView>, ApiError> {
    tenant_checked(&tenant)?;
    if !(limit.rate.is_finite() && limit.rate > 0.0) {
        return Err(ApiError::bad_request("invalid_body", "rate: above 0"));
    }
    if limit.burst == 0 {
        return Err(ApiError::bad_request("invalid_body", "burst: at least 1"));
    }
    let edge = edge_of(&node)?;
    crate::tenant::put_limit(
        &queue_of(&node)?.records(),
        &tenant,
        Some(StoredRate { rate: limit.rate, burst: limit.burst }),
    )?;
    edge.tenant_limits.set_rate(&tenant, Some(Rate { per_second: limit.rate, burst: limit.burst }));
    Ok(Json(RateLimitView { tenant, rate: limit.rate, burst: limit.burst, own: true }))
}

/// A tenant's erase job (404 if it was never erased).
#[utoipa::path(get, path = "/v1/tenants/{tenant}", tag = "tenants",
    params(("tenant" = String, Path, description = "The tenant id")),
    responses((status = 200, description = "The erase's progress", body = Object), (status = 404, description = "Never erased", body = super::ErrorBody)))]
pub async fn status(
    State(node): State<Arc<Node>>,
    Segments(tenant): Segments<String>,
) -> Result<Json<Value>, ApiError> {
    tenant_checked(&tenant)?;
    let erasures = node.erasures.as_ref().ok_or_else(ApiError::no_store)?;
    match erasures.status(&tenant)? {
        Some(erase) => Ok(Json(serde_json::to_value(erase).unwrap_or(Value::Null))),
        None => Err(ApiError::not_found(format!("tenant `{tenant}` has no erase job"))),
    }
}

/// Erase everything of a tenant: its new hooks are refused from now on
/// (`409 tenant_erasing`), then its rows, hooks, held hooks, sources,
/// dedupe keys and counters are removed in resumable steps.
#[utoipa::path(delete, path = "/v1/tenants/{tenant}", tag = "tenants",
    params(("tenant" = String, Path, description = "The tenant id")),
    responses((status = 202, description = "Erasing; follow with GET", body = Object)))]
pub async fn erase(
    State(node): State<Arc<Node>>,
    Segments(tenant): Segments<String>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    tenant_checked(&tenant)?;
    let erasures = node.erasures.as_ref().ok_or_else(ApiError::no_store)?;
    let erase = erasures.start(&tenant).await?;
    tracing::warn!(%tenant, "tenant erase started");
    Ok((StatusCode::ACCEPTED, Json(serde_json::to_value(erase).unwrap_or(Value::Null))))
}
