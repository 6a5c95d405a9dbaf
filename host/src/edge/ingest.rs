//! `POST /webhooks/...`: the checks, in order, then the commit.
//!
//! 1. the source resolves, else `404 unknown_source` (the same answer for
//!    every resolution failure, so probes learn nothing);
//! 2. `Content-Length` within `max_body_bytes`, else `413`, before a body
//!    byte is read;
//! 3. header values are visible ASCII (and spaces, tabs), else `400`;
//! 4. the body, streamed (chunked too), within the limit, else `413`, and
//!    within the body timeout, else `408`;
//! 5. the signature: `401`, `202` (quarantined) or flagged;
//! 6. the tenant's rate: `429` with `Retry-After`;
//! 7. the commit (or, in direct mode, every sink's confirmation).
//!
//! A node that is stopping answers every hook `503` with `Retry-After`.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, Limited};
use serde::Serialize;
use serde_json::json;

use super::batcher::SubmitError;
use super::state::{Edge, Mode};
use crate::queue::{EntryOutcome, Envelope, QueueError, Refusal};
use crate::source::{Admission, OnVerifyFailure, Source, valid_tenant};
use crate::telemetry::traces;

/// An answer, with what became of the request as counted in
/// `ankusa_ingest_requests`.
struct Answer {
    outcome: &'static str,
    response: Response,
}

fn reply(status: StatusCode, outcome: &'static str, body: impl Serialize) -> Answer {
    Answer { outcome, response: (status, axum::Json(body)).into_response() }
}

fn error(status: StatusCode, code: &'static str) -> Answer {
    reply(status, code, json!({ "error": code }))
}

/// Count the answer under its outcome; a refusal is also told in the log
/// (summarised per source and reason).
fn counted(answer: Answer, source: Option<&Source>) -> Response {
    crate::metrics::ingest(answer.outcome);
    let status = answer.response.status();
    if status.is_client_error() || status.is_server_error() {
        crate::telemetry::logs::webhook_refused(source.map(|s| s.name.as_str()), answer.outcome, status.as_u16());
    }
    answer.response
}

fn retry_after(mut answer: Answer, seconds: u64) -> Answer {
    answer.response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds.max(1)));
    answer
}

fn unavailable(code: &'static str) -> Answer {
    retry_after(error(StatusCode::SERVICE_UNAVAILABLE, code), 1)
}

/// The body of a `201`: typed, since every accepted hook is answered so.
#[derive(Serialize)]
struct Accepted<'a> {
    status: &'static str,
    id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    seq: Option<u64>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    duplicate: bool,
}

impl<'a> Accepted<'a> {
    fn new(id: &'a str) -> Self {
        Accepted { status: "accepted", id, seq: None, duplicate: false }
    }
}

pub async fn health() -> Response {
    (StatusCode::OK, axum::Json(json!({ "status": "ok" }))).into_response()
}

pub async fn ready(State(edge): State<Arc<Edge>>) -> Response {
    if edge.stopping() {
        return stopping().response;
    }
    readiness(edge.intake())
}

/// The answer while the node stops: `503` with `Retry-After`, and the
/// connection closed, so the client's retry opens a new one (to a peer).
fn stopping() -> Answer {
    let mut answer = unavailable("stopping");
    answer.response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    answer
}

/// `/ready` of the edge and of the admin API: `200` when the store takes
/// writes, has room and is undamaged (or there is no store); else `503`
/// with `Retry-After` and every reason (`details.reasons`: code, message).
pub fn readiness(intake: Option<&crate::queue::Intake>) -> Response {
    let reasons = intake.map(crate::queue::Intake::readiness).unwrap_or_default();
    let Some(first) = reasons.first() else {
        return (StatusCode::OK, axum::Json(json!({ "status": "ready" }))).into_response();
    };
    let listed: Vec<_> = reasons.iter().map(|r| json!({ "code": r.code, "message": r.message })).collect();
    let body = json!({ "error": first.code, "message": first.message, "details": { "reasons": listed } });
    let mut response = (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response();
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(1));
    response
}

pub async fn ingest(State(edge): State<Arc<Edge>>, Path(source): Path<String>, request: Request) -> Response {
    let resolved = edge.directory.resolve(None, &source);
    counted(handle(edge, resolved.clone(), request).await, resolved.as_deref())
}

pub async fn ingest_for_tenant(
    State(edge): State<Arc<Edge>>,
    Path((tenant, source)): Path<(String, String)>,
    request: Request,
) -> Response {
    let resolved = valid_tenant(&tenant).then(|| edge.directory.resolve(Some(&tenant), &source)).flatten();
    counted(handle(edge, resolved.clone(), request).await, resolved.as_deref())
}

/// Visible ASCII, space and tab: what a header value may hold.
fn visible(value: &HeaderValue) -> bool {
    value.as_bytes().iter().all(|b| *b == b'\t' || (0x20..=0x7e).contains(b))
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers.get(header::CONTENT_LENGTH)?.to_str().ok()?.parse().ok()
}

async fn handle(edge: Arc<Edge>, source: Option<Arc<Source>>, request: Request) -> Answer {
    let arrived = SystemTime::now();
    if edge.stopping() {
        return stopping();
    }
    let Some(source) = source else { return error(StatusCode::NOT_FOUND, "unknown_source") };
    let max = edge.config.http.max_body_bytes;
    let (parts, body) = request.into_parts();
    if content_length(&parts.headers).is_some_and(|len| len > max) {
        return error(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
    }
    if !parts.headers.values().all(visible) {
        return error(StatusCode::BAD_REQUEST, "invalid_header");
    }
    let body = match read_body(body, max, edge.config.http.body_timeout).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let headers: Vec<(String, Vec<u8>)> =
        parts.headers.iter().map(|(n, v)| (n.as_str().to_string(), v.as_bytes().to_vec())).collect();
    let mut envelope = Envelope::new(
        uuid::Uuid::now_v7().to_string(),
        source.name.clone(),
        source.tenant.clone(),
        now.as_millis() as u64,
        body,
    );
    envelope.path = parts.uri.path().to_string();
    envelope.method = parts.method.as_str().to_string();
    envelope.content_type = parts.headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_string);
    envelope.headers = headers;

    if let Admission::Rejected { reason } = source.admit(&mut envelope, now.as_secs(), source.on_verify_failure) {
        if source.on_verify_failure == OnVerifyFailure::Quarantine {
            return quarantine(&edge, &source, &envelope, now).await;
        }
        return reply(
            StatusCode::UNAUTHORIZED,
            "invalid_signature",
            json!({ "error": "invalid_signature", "reason": reason }),
        );
    }
    if let Err(wait) = edge.tenant_limits.check(&source.tenant, now.as_nanos() as u64) {
        return retry_after(error(StatusCode::TOO_MANY_REQUESTS, "rate_limited"), wait.as_secs_f64().ceil() as u64);
    }
    match &edge.mode {
        Mode::Queue { batcher, .. } => {
            // The envelope moves into the commit: keep what the trace needs.
            let arrival = traces::enabled().then(|| Arrival::of(&envelope));
            let entry = source.entry(envelope);
            let committing = SystemTime::now();
            let outcome = batcher.submit(entry).await;
            let committed = SystemTime::now();
            let answered = answer(&outcome);
            if let Some(arrival) = arrival {
                let stored = match &outcome {
                    Ok(EntryOutcome::Committed(hook)) => Some((hook, false)),
                    Ok(EntryOutcome::Duplicate(original)) => Some((original, true)),
                    _ => None,
                };
                trace_ingest(&arrival, stored, &answered, (arrived, committed), Some((committing, committed)));
            }
            answered
        }
        Mode::Direct => match super::direct::publish(&source, &envelope, edge.config.direct_deadline).await {
            Ok(()) => {
                let answered = reply(StatusCode::CREATED, "accepted", Accepted::new(&envelope.id));
                if traces::enabled() {
                    let span = (arrived, SystemTime::now());
                    trace_ingest(&Arrival::of(&envelope), Some((&envelope, false)), &answered, span, None);
                }
                answered
            }
            Err(unconfirmed) => {
                tracing::warn!(source = %source.name, failures = ?unconfirmed.failures, "direct publish not confirmed");
                unavailable("sink_unavailable")
            }
        },
    }
}

async fn read_body(body: Body, max: u64, timeout: Duration) -> Result<Vec<u8>, Answer> {
    let limited = Limited::new(body, usize::try_from(max).unwrap_or(usize::MAX));
    match tokio::time::timeout(timeout, limited.collect()).await {
        Err(_) => Err(error(StatusCode::REQUEST_TIMEOUT, "body_timeout")),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            Err(error(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"))
        }
        Ok(Err(_)) => Err(error(StatusCode::BAD_REQUEST, "bad_body")),
        Ok(Ok(collected)) => Ok(collected.to_bytes().to_vec()),
    }
}

async fn quarantine(edge: &Edge, source: &Source, envelope: &Envelope, now: Duration) -> Answer {
    let Some(pen) = edge.pen() else {
        // Direct mode has no pen: a failed signature is refused.
        return error(StatusCode::UNAUTHORIZED, "invalid_signature");
    };
    let bucket = format!("{}/{}", source.tenant, source.name);
    if let Err(wait) = edge.pen_limits.check(&bucket, now.as_nanos() as u64) {
        return retry_after(
            error(StatusCode::TOO_MANY_REQUESTS, "quarantine_rate_limited"),
            wait.as_secs_f64().ceil() as u64,
        );
    }
    match pen.quarantine(envelope, edge.config.quarantine.max_bytes, edge.pen_copies()).await {
        Ok(()) => reply(StatusCode::ACCEPTED, "quarantined", json!({ "status": "quarantined", "id": envelope.id })),
        Err(QueueError::QuarantineFull) => unavailable("quarantine_full"),
        Err(QueueError::PenCopy(e)) => {
            tracing::warn!("quarantine copy failed: {e}");
            unavailable("store_unavailable")
        }
        Err(e) => {
            tracing::error!("quarantine write failed: {e}");
            unavailable("store_unavailable")
        }
    }
}

/// What a request's trace needs of it once its envelope has moved into
/// the commit.
struct Arrival {
    id: String,
    source: String,
    tenant: String,
    method: String,
    path: String,
    headers: Vec<(String, Vec<u8>)>,
    bytes: u64,
}

impl Arrival {
    fn of(envelope: &Envelope) -> Arrival {
        Arrival {
            id: envelope.id.clone(),
            source: envelope.source_id.clone(),
            tenant: envelope.tenant_id.clone(),
            method: envelope.method.clone(),
            path: envelope.path.clone(),
            headers: envelope.headers.clone(),
            bytes: envelope.size(),
        }
    }
}

/// Record the ingest of a request that reached the commit: under the
/// stored hook's id (`stored`: the hook, and whether it is the original of
/// this duplicate), or under its own if refused.
fn trace_ingest(
    arrival: &Arrival,
    stored: Option<(&Envelope, bool)>,
    answered: &Answer,
    span: (SystemTime, SystemTime),
    commit: Option<(SystemTime, SystemTime)>,
) {
    let (hook_id, seq, headers, duplicate) = match stored {
        Some((hook, duplicate)) => (
            hook.id.as_str(),
            (hook.seq > 0).then_some(hook.seq),
            &hook.headers,
            duplicate.then_some(arrival.id.as_str()),
        ),
        None => (arrival.id.as_str(), None, &arrival.headers, None),
    };
    traces::ingested(traces::Ingest {
        hook_id,
        duplicate,
        seq,
        source: &arrival.source,
        tenant: &arrival.tenant,
        method: &arrival.method,
        path: &arrival.path,
        headers,
        bytes: arrival.bytes,
        outcome: answered.outcome,
        status: answered.response.status().as_u16(),
        span,
        commit,
    });
}

/// The HTTP answer for a commit's outcome.
fn answer(outcome: &Result<EntryOutcome, SubmitError>) -> Answer {
    match outcome {
        Ok(EntryOutcome::Committed(e)) => {
            reply(StatusCode::CREATED, "accepted", Accepted { seq: Some(e.seq), ..Accepted::new(&e.id) })
        }
        Ok(EntryOutcome::Duplicate(e)) => {
            reply(StatusCode::CREATED, "duplicate", Accepted { duplicate: true, ..Accepted::new(&e.id) })
        }
        Ok(EntryOutcome::Refused(refusal)) => match refusal {
            Refusal::TenantLimit => error(StatusCode::TOO_MANY_REQUESTS, "tenant_limit"),
            Refusal::DedupeQuota => error(StatusCode::TOO_MANY_REQUESTS, "dedupe_quota"),
            Refusal::TenantErasing => error(StatusCode::CONFLICT, "tenant_erasing"),
            Refusal::IntakeUnavailable | Refusal::IntakePending | Refusal::StoreUnavailable | Refusal::Half { .. } => {
                unavailable("store_unavailable")
            }
        },
        Err(SubmitError::Overload) => {
            crate::metrics::metrics().load_shed.inc();
            unavailable("overload")
        }
        Err(SubmitError::Queue(e)) => {
            tracing::error!("commit failed: {e}");
            unavailable("store_unavailable")
        }
    }
}
