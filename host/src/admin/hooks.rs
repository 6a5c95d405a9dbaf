//! `GET /v1/hooks/{seq}`: one stored hook as it was received (headers and
//! body) and what became of each of its deliveries.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;

use super::error::Segments;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Serialize;
use utoipa::ToSchema;

use super::{ApiError, queue_of};
use crate::node::Node;
use crate::queue::{DeliveryRow, Envelope, RowState};

#[derive(Debug, Serialize, ToSchema)]
pub struct HookView {
    pub id: String,
    pub seq: u64,
    pub source: String,
    pub tenant: String,
    pub received_at: u64,
    pub method: String,
    pub path: String,
    /// Request headers as received, in order; values not valid UTF-8 are
    /// shown lossily.
    pub headers: Vec<(String, String)>,
    pub content_type: Option<String>,
    /// The body: as text (`body_encoding` `utf8`) or base64 (`base64`).
    pub body: String,
    pub body_encoding: &'static str,
    pub size: u64,
    pub sha256: String,
    /// `verified`, `failed` (flagged) or `none`.
    pub verification: String,
    pub dedupe_key: Option<String>,
    /// One entry per sink of the source.
    pub deliveries: Vec<DeliveryView>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryView {
    /// The sink's name (`None` if the source no longer binds this index).
    pub sink: Option<String>,
    pub sink_index: u16,
    /// `due`, `waiting` (behind an earlier hook of its ordering key),
    /// `inflight`, `dead`, `filtered` (a transform of its binding dropped
    /// it) or `delivered`.
    pub state: &'static str,
    pub attempts: u32,
    /// For a due row: when its next attempt may run (unix ms).
    pub due_at: Option<u64>,
    pub dead_at: Option<u64>,
    /// When a transform dropped it (unix ms).
    pub filtered_at: Option<u64>,
    /// Why it died (or was filtered); while it is retrying, why its last
    /// attempt failed.
    pub reason: Option<String>,
    /// The class of that failure (`transient`, `fault`, ...).
    pub error_class: Option<String>,
    /// While it is retrying: when its last attempt failed (unix ms).
    pub failed_at: Option<u64>,
    pub replay_id: Option<String>,
}

fn delivery(row: &DeliveryRow) -> DeliveryView {
    let (state, due_at, dead_at) = match &row.state {
        RowState::Due { due_at } => ("due", Some(*due_at), None),
        RowState::Inflight { .. } => ("inflight", None, None),
        RowState::Dead { dead_at, .. } => ("dead", None, Some(*dead_at)),
        RowState::Waiting => ("waiting", None, None),
        RowState::Filtered { .. } => ("filtered", None, None),
    };
    let filtered_at = match &row.state {
        RowState::Filtered { at, .. } => Some(*at),
        _ => None,
    };
    let (reason, error_class, failed_at) = match (&row.state, &row.last_failure) {
        (RowState::Dead { reason, class, .. }, _) => {
            (Some(reason.clone()), class.map(|c| c.as_str().to_string()), None)
        }
        (RowState::Filtered { reason, .. }, _) => (Some(reason.clone()), None, None),
        (_, Some(last)) => (Some(last.reason.clone()), Some(last.class.as_str().to_string()), Some(last.at)),
        (_, None) => (None, None, None),
    };
    DeliveryView {
        sink: Some(row.sink_name.clone()),
        sink_index: row.sink,
        state,
        attempts: row.attempts,
        due_at,
        dead_at,
        filtered_at,
        reason,
        error_class,
        failed_at,
        replay_id: row.replay_id.clone(),
    }
}

fn view(envelope: Envelope, deliveries: Vec<DeliveryView>) -> HookView {
    let size = envelope.size();
    let (body, body_encoding) = match String::from_utf8(envelope.body) {
        Ok(text) => (text, "utf8"),
        Err(e) => (STANDARD.encode(e.as_bytes()), "base64"),
    };
    HookView {
        id: envelope.id,
        seq: envelope.seq,
        source: envelope.source_id,
        tenant: envelope.tenant_id,
        received_at: envelope.received_at,
        method: envelope.method,
        path: envelope.path,
        headers: envelope.headers.into_iter().map(|(n, v)| (n, String::from_utf8_lossy(&v).into_owned())).collect(),
        content_type: envelope.content_type,
        body,
        body_encoding,
        size,
        sha256: envelope.sha256,
        verification: envelope.verification.status.as_str().to_string(),
        dedupe_key: envelope.dedupe_key,
        deliveries,
    }
}

/// One stored hook and its deliveries. A sink of the source with no row
/// left was delivered.
#[utoipa::path(get, path = "/v1/hooks/{seq}", tag = "dlq",
    params(("seq" = u64, Path, description = "The hook's seq (as `/v1/dlq` lists it)")),
    responses(
        (status = 200, description = "The hook", body = HookView),
        (status = 400, description = "Not a seq", body = super::ErrorBody),
        (status = 404, description = "Not stored (delivered, or never)", body = super::ErrorBody),
    ))]
pub async fn get(State(node): State<Arc<Node>>, Segments(seq): Segments<String>) -> Result<Json<HookView>, ApiError> {
    let seq: u64 = seq.parse().map_err(|_| ApiError::bad_request("invalid_seq", "seq: a hook's number, 1 or more"))?;
    let queue = queue_of(&node)?;
    let Some(envelope) = queue.deliveries().hook(seq)? else {
        return Err(ApiError::not_found(format!("no hook {seq} is stored")));
    };
    let rows = queue.deliveries().rows_of_hook(seq)?;
    let mut deliveries: Vec<DeliveryView> = rows.iter().map(delivery).collect();
    if let Some((source, _)) = node.sources.get(&envelope.source_id) {
        for binding in &source.sinks {
            if !rows.iter().any(|r| r.sink == binding.index) {
                deliveries.push(DeliveryView {
                    sink: Some(binding.sink.label().sink.clone()),
                    sink_index: binding.index,
                    state: "delivered",
                    attempts: 0,
                    due_at: None,
                    dead_at: None,
                    filtered_at: None,
                    reason: None,
                    error_class: None,
                    failed_at: None,
                    replay_id: None,
                });
            }
        }
    }
    deliveries.sort_by_key(|d| d.sink_index);
    Ok(Json(view(envelope, deliveries)))
}
