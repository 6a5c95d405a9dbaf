//! `GET /v1/dlq`: dead rows, newest first, with the queue's `dead`
//! filters as query parameters and its authenticated cursor for paging.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::error::Params;
use super::{ApiError, queue_of};
use crate::error_class::ErrorClass;
use crate::node::Node;
use crate::queue::{DeadEntry, DeadQuery, SinkSelector};

#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DlqParams {
    /// Only this source's rows.
    pub source: Option<String>,
    /// Only these tenants' rows (comma-separated).
    pub tenant: Option<String>,
    /// Only rows dead at or after this time (unix ms).
    pub since: Option<u64>,
    /// Only this sink's rows (its name).
    pub sink: Option<String>,
    /// Only rows dead with this class (`transient`, `permanent`, `timeout`, `fault`, `denied`, `gone`, `retry_after`).
    pub error_class: Option<String>,
    /// Entries per page (1-1000, default 50).
    pub limit: Option<usize>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DeadRow {
    pub id: String,
    pub seq: u64,
    pub source: String,
    pub tenant: String,
    pub received_at: u64,
    /// The sink's name.
    pub sink: String,
    /// The sink's index within its source (with `seq`, the row's address).
    pub sink_index: u16,
    /// When the row died (unix ms).
    pub dead_at: u64,
    pub reason: String,
    pub error_class: Option<String>,
    pub attempts: u32,
    pub size: u64,
    pub sha256: String,
    pub content_type: Option<String>,
    /// The hook is damaged in the store and cannot be read: only its seq,
    /// source and tenant are known (`id` is empty).
    pub unreadable: bool,
}

impl From<&DeadEntry> for DeadRow {
    fn from(e: &DeadEntry) -> DeadRow {
        DeadRow {
            id: e.envelope.id.clone(),
            seq: e.envelope.seq,
            source: e.envelope.source_id.clone(),
            tenant: e.envelope.tenant_id.clone(),
            received_at: e.envelope.received_at,
            sink: e.sink_name.clone(),
            sink_index: e.sink,
            dead_at: e.at,
            reason: e.reason.clone(),
            error_class: e.error_class.map(|c| c.as_str().to_string()),
            attempts: e.attempts,
            size: e.envelope.size(),
            sha256: e.envelope.sha256.clone(),
            content_type: e.envelope.content_type.clone(),
            unreadable: e.unreadable,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DlqPage {
    /// How many rows match, when known without a scan.
    pub total: Option<u64>,
    pub entries: Vec<DeadRow>,
    /// Pass as `cursor` for the next page; absent on the last.
    pub next_cursor: Option<String>,
}

/// One page of the dead-letter queue.
#[utoipa::path(get, path = "/v1/dlq", tag = "dlq", params(DlqParams),
    responses(
        (status = 200, description = "A page of dead rows", body = DlqPage),
        (status = 400, description = "A bad parameter, or `invalid_cursor`", body = super::ErrorBody),
    ))]
pub async fn list(State(node): State<Arc<Node>>, Params(params): Params<DlqParams>) -> Result<Json<DlqPage>, ApiError> {
    let queue = queue_of(&node)?;
    let query = dead_query(params)?;
    let page = queue.dead_letters().dead(&query)?;
    Ok(Json(DlqPage {
        total: page.total,
        entries: page.entries.iter().map(DeadRow::from).collect(),
        next_cursor: page.next_cursor,
    }))
}

/// The queue's query for `params`, every value checked.
pub fn dead_query(params: DlqParams) -> Result<DeadQuery, ApiError> {
    let limit = super::page_limit(params.limit)?;
    let error_class = params
        .error_class
        .as_deref()
        .map(|name| {
            name.parse::<ErrorClass>().map_err(|e| ApiError::bad_request("invalid_query", format!("error_class: {e}")))
        })
        .transpose()?;
    let tenants = params.tenant.map(|list| list.split(',').map(str::to_string).collect::<Vec<_>>());
    if let Some(bad) = tenants.iter().flatten().find(|t| !crate::source::valid_tenant(t)) {
        return Err(ApiError::bad_request("invalid_query", format!("tenant: `{bad}` is not a tenant id")));
    }
    Ok(DeadQuery {
        limit,
        cursor: params.cursor,
        source_id: params.source,
        since: params.since,
        sink: params.sink.map(SinkSelector::Name),
        error_class,
        tenants,
    })
}
