//! `/v1/replays`: start replay jobs, follow them, pause, resume, cancel.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;

use super::error::Segments;
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::ApiError;
use super::error::Body;
use crate::error_class::ErrorClass;
use crate::node::Node;
use crate::queue::SinkSelector;
use crate::replay::{Control, DlqFilter, Job, JobKind, JobSpec, ReplayConfig, Replays};
use crate::source::valid_tenant;

/// A new replay job.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewReplay {
    /// The job's id (1-64 of `A-Z a-z 0-9 _ -`); a new one when absent.
    pub id: Option<String>,
    /// `dlq` (revive dead rows), `archive` (redrive archived hooks received
    /// in `[since, until)`) or `quarantine` (re-verify and release held
    /// hooks of one source).
    pub kind: JobKind,
    /// `dlq`, `archive`: only this source's; `quarantine`: the source (required).
    pub source: Option<String>,
    /// `dlq`, `archive`: only these tenants'.
    pub tenants: Option<Vec<String>>,
    /// `quarantine`: the source's tenant (default: the source's owner).
    pub tenant: Option<String>,
    /// `dlq`: dead at or after (unix ms); `archive`: received at or after.
    pub since: Option<u64>,
    /// `dlq`: dead before (unix ms); `archive`: received before; default:
    /// when the job starts.
    pub until: Option<u64>,
    /// `dlq`: only this sink's rows (its name).
    pub sink: Option<String>,
    /// `dlq`: only this error class.
    pub error_class: Option<String>,
    /// `dlq`: exactly these dead rows (at most 1000), instead of a filter.
    pub rows: Option<Vec<RowRef>>,
    /// Rows moved per second at most (default 1000).
    pub rate: Option<f64>,
    /// Wait while dispatch's oldest due row is later than this (default 2000).
    pub max_lag_ms: Option<u64>,
}

/// One delivery row: its hook's seq and the sink's index in its source
/// (as `/v1/dlq` lists them).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RowRef {
    pub seq: u64,
    pub sink_index: u16,
}

/// Rows a selection names, at most.
const MAX_SELECTED: usize = 1000;

/// A change of a job's state.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplayUpdate {
    pub state: WantedState,
}

/// The state an operator asks a job to be in.
#[derive(Clone, Copy, Debug, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum WantedState {
    /// Resume a paused job.
    Running,
    Paused,
    Cancelled,
}

fn replays_of(node: &Node) -> Result<&Replays, ApiError> {
    node.replays.as_ref().ok_or_else(|| {
        ApiError::conflict("no_dispatch", "this node does not run replay jobs (wal.mode none, or no dispatch role)")
    })
}

fn job_json(job: &Job) -> Value {
    serde_json::to_value(job).unwrap_or(Value::Null)
}

/// Every replay job, finished ones included.
#[utoipa::path(get, path = "/v1/replays", tag = "replays",
    responses((status = 200, description = "The jobs", body = Vec<Object>)))]
pub async fn list(State(node): State<Arc<Node>>) -> Result<Json<Vec<Value>>, ApiError> {
    Ok(Json(replays_of(&node)?.list()?.iter().map(job_json).collect()))
}

/// Start a replay job.
#[utoipa::path(post, path = "/v1/replays", tag = "replays", request_body = NewReplay,
    responses(
        (status = 201, description = "Started", body = Object),
        (status = 400, description = "A bad body", body = super::ErrorBody),
        (status = 409, description = "The id is taken", body = super::ErrorBody),
        (status = 429, description = "16 jobs are running already", body = super::ErrorBody),
    ))]
pub async fn create(
    State(node): State<Arc<Node>>,
    Body(new): Body<NewReplay>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let replays = replays_of(&node)?;
    let id = new.id.clone().unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
    if !valid_tenant(&id) {
        return Err(ApiError::bad_request("invalid_body", "id: 1-64 of A-Z a-z 0-9 _ -"));
    }
    let defaults = ReplayConfig::default();
    let config = ReplayConfig {
        rate: new.rate.unwrap_or(defaults.rate),
        max_lag_ms: new.max_lag_ms.unwrap_or(defaults.max_lag_ms),
        ..defaults
    };
    if !(config.rate.is_finite() && config.rate > 0.0) {
        return Err(ApiError::bad_request("invalid_body", "rate: above 0"));
    }
    let spec = spec_of(&node, new)?;
    match replays.start(&id, spec, config)? {
        Some(job) => Ok((StatusCode::CREATED, Json(job_json(&job)))),
        None => Err(ApiError::conflict("replay_exists", format!("a replay job `{id}` exists"))),
    }
}

fn spec_of(node: &Node, new: NewReplay) -> Result<JobSpec, ApiError> {
    let bad = |m: &str| ApiError::bad_request("invalid_body", m.to_string());
    match new.kind {
        JobKind::Dlq => {
            let error_class = new
                .error_class
                .as_deref()
                .map(|c| c.parse::<ErrorClass>().map_err(|e| ApiError::bad_request("invalid_body", e.to_string())))
                .transpose()?;
            if new.tenants.iter().flatten().any(|t| !valid_tenant(t)) {
                return Err(bad("tenants: each a tenant id"));
            }
            if new.tenant.is_some() {
                return Err(bad("tenant: only for kind quarantine (use tenants)"));
            }
            let rows = new.rows.map(|rows| rows.into_iter().map(|r| (r.seq, r.sink_index)).collect::<Vec<_>>());
            if let Some(rows) = &rows {
                if rows.is_empty() || rows.len() > MAX_SELECTED {
                    return Err(bad("rows: 1 to 1000 rows"));
                }
                let filtered = new.source.is_some()
                    || new.tenants.is_some()
                    || new.since.is_some()
                    || new.until.is_some()
                    || new.sink.is_some()
                    || error_class.is_some();
                if filtered {
                    return Err(bad("rows: a selection takes no filter"));
                }
            }
            Ok(JobSpec::Dlq(DlqFilter {
                source_id: new.source,
                tenants: new.tenants,
                since: new.since,
                until: new.until,
                sink: new.sink.map(SinkSelector::Name),
                error_class,
                rows,
            }))
        }
        JobKind::Quarantine => {
            let source = new.source.ok_or_else(|| bad("source: required for kind quarantine"))?;
            let Some((found, _)) = node.sources.get(&source) else {
                return Err(ApiError::not_found(format!("no source `{source}`")));
            };
            let tenant = new.tenant.unwrap_or_else(|| found.tenant.clone());
            Ok(JobSpec::Quarantine { tenant, source })
        }
        JobKind::Archive => {
            if !node.config.archive.enabled {
                return Err(ApiError::bad_request(
                    "archive_disabled",
                    "kind archive: this node keeps no archive (set archive.enabled)",
                ));
            }
            if new.sink.is_some() || new.error_class.is_some() || new.tenant.is_some() || new.rows.is_some() {
                return Err(bad("kind archive takes source, tenants, since and until"));
            }
            if new.tenants.iter().flatten().any(|t| !valid_tenant(t)) {
                return Err(bad("tenants: each a tenant id"));
            }
            Ok(JobSpec::Archive(DlqFilter {
                source_id: new.source,
                tenants: new.tenants,
                since: new.since,
                until: new.until,
                sink: None,
                error_class: None,
                rows: None,
            }))
        }
    }
}

/// One replay job.
#[utoipa::path(get, path = "/v1/replays/{id}", tag = "replays", params(("id" = String, Path, description = "The job's id")),
    responses((status = 200, description = "The job", body = Object), (status = 404, description = "No such job", body = super::ErrorBody)))]
pub async fn get(State(node): State<Arc<Node>>, Segments(id): Segments<String>) -> Result<Json<Value>, ApiError> {
    match replays_of(&node)?.get(&id)? {
        Some(job) => Ok(Json(job_json(&job))),
        None => Err(ApiError::not_found(format!("no replay job `{id}`"))),
    }
}

/// Pause, resume or cancel a replay job.
#[utoipa::path(patch, path = "/v1/replays/{id}", tag = "replays", request_body = ReplayUpdate,
    params(("id" = String, Path, description = "The job's id")),
    responses(
        (status = 200, description = "The job after the change", body = Object),
        (status = 400, description = "A bad body", body = super::ErrorBody),
        (status = 404, description = "No such job", body = super::ErrorBody),
    ))]
pub async fn update(
    State(node): State<Arc<Node>>,
    Segments(id): Segments<String>,
    Body(update): Body<ReplayUpdate>,
) -> Result<Json<Value>, ApiError> {
    let wanted = match update.state {
        WantedState::Running => Control::Run,
        WantedState::Paused => Control::Pause,
        WantedState::Cancelled => Control::Cancel,
    };
    match replays_of(&node)?.control(&id, wanted).await? {
        Some(job) => Ok(Json(job_json(&job))),
        None => Err(ApiError::not_found(format!("no replay job `{id}`"))),
    }
}
