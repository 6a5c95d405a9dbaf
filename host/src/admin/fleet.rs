//! `/v1/fleet`: the fleet as this node sees it (`wal.mode: fleet`).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;

use super::error::ApiError;
use crate::fleet::FleetStatus;
use crate::node::Node;

/// Every node's lease and lag, the takeovers on record, and this node's
/// JetStream publishing. 404 unless `wal.mode` is `fleet`; 503 while NATS
/// does not answer.
#[utoipa::path(get, path = "/v1/fleet", tag = "status",
    responses(
        (status = 200, description = "The fleet", body = FleetStatus),
        (status = 404, description = "This node is not in a fleet"),
        (status = 503, description = "NATS does not answer"),
    ))]
pub async fn status(State(node): State<Arc<Node>>) -> Result<Json<FleetStatus>, ApiError> {
    let Some(fleet) = &node.fleet else {
        return Err(ApiError::new(StatusCode::NOT_FOUND, "not_in_a_fleet", "wal.mode is not fleet"));
    };
    fleet
        .status()
        .await
        .map(Json)
        .map_err(|e| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "nats_unavailable", e.to_string()))
}
