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
/// does not answer; `partial` while the bucket cannot be listed (a leader
/// election): the nodes this one knows.
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
    // Listing the bucket's keys follows a JetStream consumer, which can
    // stall while its stream elects a leader: answer rather than wait.
    let unavailable = |message: String| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "nats_unavailable", message);
    match tokio::time::timeout(STATUS_TIMEOUT, fleet.status()).await {
        Ok(status) => status.map(Json).map_err(|e| unavailable(e.to_string())),
        Err(_) => Err(unavailable(format!("the JetStream servers did not answer within {STATUS_TIMEOUT:?}"))),
    }
}

/// How long `/v1/fleet` waits for the fleet's bucket.
const STATUS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
