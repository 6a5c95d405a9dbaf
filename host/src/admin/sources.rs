//! `/v1/tenants/{tenant}/sources`: sources minted at runtime, checked like
//! the config's (the same key-naming checks, every sink loaded with its
//! options, `check_durable` under `wal.mode: none`) and stored durably.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;

use super::error::Segments;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::{IntoParams, ToSchema};

use super::error::{Body, Params};
use super::{ApiError, tenant_checked};
use crate::node::Node;
use crate::source::{BindingSection, DedupeKeySection, OnVerifyFailure, SourceSection, VerifySection};
use crate::source::{DedupeRule, Origin, Source};

/// A source as written through the API (its tenant is the path's).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SourceBody {
    /// Required when creating; must match the path when replacing.
    pub name: Option<String>,
    /// `{"preset": "github", "secret": "..."}` or `{"hmac": {...}, "secret": [...]}`.
    #[schema(value_type = Option<Object>)]
    pub verify: Option<VerifySection>,
    /// `reject` (default), `quarantine` or `accept_flag`.
    #[schema(value_type = Option<String>)]
    #[serde(default)]
    pub on_verify_failure: OnVerifyFailure,
    /// `{"preset": ...}`, `{"header": ...}` or `{"json_path": ...}`.
    #[schema(value_type = Option<Object>)]
    pub dedupe: Option<DedupeKeySection>,
    /// Sinks configured under `sinks`: each a name, or
    /// `{"sink": NAME, "ordering": {"key": "header:X-Shop-Id", "on_dead": "skip"}}`.
    #[schema(value_type = Vec<Object>)]
    pub sinks: Vec<BindingSection>,
    /// Only these request headers reach the sinks (default: all but
    /// credentials, hop-by-hop headers and `x-ankusa-*`).
    pub forward_headers: Option<Vec<String>>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeleteParams {
    /// Delete even with undelivered rows: they are dead-lettered (class `gone`).
    #[serde(default)]
    pub dead_letter: bool,
}

/// A source as shown (secrets never).
#[derive(Debug, Serialize, ToSchema)]
pub struct SourceView {
    pub name: String,
    pub tenant: String,
    /// `config` (edit the file) or `runtime` (this API).
    pub origin: &'static str,
    /// Where providers POST.
    pub url: String,
    /// The verification scheme, if any.
    pub verify: Option<String>,
    pub on_verify_failure: &'static str,
    /// Where a provider's delivery id is read (`header x-github-delivery`,
    /// `json id`), if the source dedupes.
    pub dedupe: Option<String>,
    pub sinks: Vec<SinkView>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SinkView {
    pub index: u16,
    pub name: String,
    pub sha256: String,
    pub durable: bool,
    /// Its ordering, if it delivers in order: the key and `on_dead`.
    pub ordering: Option<String>,
}

fn view(source: &Source, origin: Origin) -> SourceView {
    SourceView {
        name: source.name.clone(),
        tenant: source.tenant.clone(),
        origin: match origin {
            Origin::Config => "config",
            Origin::Runtime => "runtime",
        },
        url: format!("/webhooks/{}", source.name),
        verify: source.verifier.as_ref().map(|v| v.scheme().name.clone()),
        on_verify_failure: match source.on_verify_failure {
            crate::source::OnVerifyFailure::Reject => "reject",
            crate::source::OnVerifyFailure::Quarantine => "quarantine",
            crate::source::OnVerifyFailure::AcceptFlag => "accept_flag",
        },
        dedupe: source.dedupe.as_ref().map(|rule| match rule {
            DedupeRule::Header(name) => format!("header {name}"),
            DedupeRule::JsonPath(path) => format!("json {}", path.join(".")),
        }),
        sinks: source
            .sinks
            .iter()
            .map(|b| SinkView {
                index: b.index,
                name: b.sink.label().sink.clone(),
                sha256: b.sink.sha256().to_string(),
                durable: b.sink.durable(),
                ordering: b.ordering.as_ref().map(|o| o.describe()),
            })
            .collect(),
    }
}

/// The tenant's source called `name`, or 404.
fn owned(node: &Node, tenant: &str, name: &str) -> Result<(Arc<Source>, Origin), ApiError> {
    match node.sources.get(name) {
        Some((source, origin)) if source.tenant == tenant => Ok((source, origin)),
        _ => Err(ApiError::not_found(format!("tenant `{tenant}` has no source `{name}`"))),
    }
}

/// Every source of every tenant, from the config and the API.
#[utoipa::path(get, path = "/v1/sources", tag = "sources",
    responses((status = 200, description = "Every source", body = Vec<SourceView>)))]
pub async fn list_all(State(node): State<Arc<Node>>) -> Json<Vec<SourceView>> {
    let mut all: Vec<SourceView> = node.sources.all().iter().map(|(s, o)| view(s, *o)).collect();
    all.sort_by(|a, b| (&a.tenant, &a.name).cmp(&(&b.tenant, &b.name)));
    Json(all)
}

/// The tenant's sources.
#[utoipa::path(get, path = "/v1/tenants/{tenant}/sources", tag = "tenants",
    params(("tenant" = String, Path, description = "The tenant id")),
    responses((status = 200, description = "Its sources", body = Vec<SourceView>), (status = 400, description = "A bad tenant id", body = super::ErrorBody)))]
pub async fn list(
    State(node): State<Arc<Node>>,
    Segments(tenant): Segments<String>,
) -> Result<Json<Vec<SourceView>>, ApiError> {
    tenant_checked(&tenant)?;
    Ok(Json(node.sources.all().iter().filter(|(s, _)| s.tenant == tenant).map(|(s, o)| view(s, *o)).collect()))
}

/// Create a source for the tenant.
#[utoipa::path(post, path = "/v1/tenants/{tenant}/sources", tag = "tenants", request_body = SourceBody,
    params(("tenant" = String, Path, description = "The tenant id")),
    responses(
        (status = 201, description = "Created and live", body = SourceView),
        (status = 400, description = "Invalid: `details` lists every problem by key", body = super::ErrorBody),
        (status = 422, description = "A list over its limit (`details`: key, limit, given)", body = super::ErrorBody),
        (status = 409, description = "The name is taken, or the tenant is being erased", body = super::ErrorBody),
    ))]
pub async fn create(
    State(node): State<Arc<Node>>,
    Segments(tenant): Segments<String>,
    Body(body): Body<SourceBody>,
) -> Result<(StatusCode, Json<SourceView>), ApiError> {
    tenant_checked(&tenant)?;
    let Some(name) = body.name.clone() else {
        return Err(ApiError::bad_request("invalid_body", "name: required"));
    };
    let _writing = node.source_writes.lock().await;
    if node.sources.get(&name).is_some() {
        return Err(ApiError::conflict("source_exists", format!("a source `{name}` exists (names are node-wide)")));
    }
    let source = write(&node, &tenant, &name, body).await?;
    Ok((StatusCode::CREATED, Json(view(&source, Origin::Runtime))))
}

/// One of the tenant's sources.
#[utoipa::path(get, path = "/v1/tenants/{tenant}/sources/{name}", tag = "tenants",
    params(("tenant" = String, Path, description = "The tenant id"), ("name" = String, Path, description = "The source's name")),
    responses((status = 200, description = "The source", body = SourceView), (status = 404, description = "No such source", body = super::ErrorBody)))]
pub async fn get(
    State(node): State<Arc<Node>>,
    Segments((tenant, name)): Segments<(String, String)>,
) -> Result<Json<SourceView>, ApiError> {
    tenant_checked(&tenant)?;
    let (source, origin) = owned(&node, &tenant, &name)?;
    Ok(Json(view(&source, origin)))
}

/// Replace a runtime source (hooks already accepted keep their sinks by
/// index).
#[utoipa::path(put, path = "/v1/tenants/{tenant}/sources/{name}", tag = "tenants", request_body = SourceBody,
    params(("tenant" = String, Path, description = "The tenant id"), ("name" = String, Path, description = "The source's name")),
    responses(
        (status = 200, description = "Replaced", body = SourceView),
        (status = 400, description = "Invalid: `details` lists every problem by key", body = super::ErrorBody),
        (status = 422, description = "A list over its limit (`details`: key, limit, given)", body = super::ErrorBody),
        (status = 404, description = "No such source", body = super::ErrorBody),
        (status = 409, description = "A config source (edit the file instead)", body = super::ErrorBody),
    ))]
pub async fn replace(
    State(node): State<Arc<Node>>,
    Segments((tenant, name)): Segments<(String, String)>,
    Body(body): Body<SourceBody>,
) -> Result<Json<SourceView>, ApiError> {
    tenant_checked(&tenant)?;
    if body.name.as_deref().is_some_and(|n| n != name) {
        return Err(ApiError::bad_request("invalid_body", "name: must match the path (a source is not renamed)"));
    }
    let _writing = node.source_writes.lock().await;
    let (_, origin) = owned(&node, &tenant, &name)?;
    if origin == Origin::Config {
        return Err(from_config(&name));
    }
    let source = write(&node, &tenant, &name, body).await?;
    Ok(Json(view(&source, Origin::Runtime)))
}

/// Delete a runtime source. With undelivered rows it answers `409` and
/// their counts, unless `dead_letter=true`.
#[utoipa::path(delete, path = "/v1/tenants/{tenant}/sources/{name}", tag = "tenants", params(("tenant" = String, Path, description = "The tenant id"), ("name" = String, Path, description = "The source's name"), DeleteParams),
    responses(
        (status = 200, description = "Deleted", body = Object),
        (status = 404, description = "No such source", body = super::ErrorBody),
        (status = 409, description = "Undelivered rows (see `details`), or a config source", body = super::ErrorBody),
    ))]
pub async fn delete(
    State(node): State<Arc<Node>>,
    Segments((tenant, name)): Segments<(String, String)>,
    Params(params): Params<DeleteParams>,
) -> Result<Json<Value>, ApiError> {
    tenant_checked(&tenant)?;
    let _writing = node.source_writes.lock().await;
    let (_, origin) = owned(&node, &tenant, &name)?;
    if origin == Origin::Config {
        return Err(from_config(&name));
    }
    let undelivered = match &node.queue {
        Some(queue) => queue.pending_for_source(&name, Some(&tenant))?,
        None => Default::default(),
    };
    if undelivered.pending + undelivered.inflight > 0 && !params.dead_letter {
        return Err(ApiError::conflict(
            "source_has_rows",
            format!("source `{name}` has undelivered rows; pass dead_letter=true to dead-letter them"),
        )
        .with_details(json!({"pending": undelivered.pending, "inflight": undelivered.inflight})));
    }
    node.source_records.delete(&tenant, &name)?;
    node.sources.remove(&name);
    tracing::info!(%tenant, source = %name, "source deleted");
    Ok(Json(json!({
        "deleted": name,
        "dead_lettered": undelivered.pending + undelivered.inflight,
    })))
}

fn from_config(name: &str) -> ApiError {
    ApiError::conflict("source_from_config", format!("source `{name}` comes from the config file: edit it there"))
}

/// Check, load, store and publish a runtime source.
async fn write(node: &Node, tenant: &str, name: &str, body: SourceBody) -> Result<Arc<Source>, ApiError> {
    within_limits(&body)?;
    if node.queue.as_ref().is_some_and(|q| q.tenants().erasing().iter().any(|t| t == tenant)) {
        return Err(ApiError::conflict("tenant_erasing", format!("tenant `{tenant}` is being erased")));
    }
    let section = SourceSection {
        tenant: tenant.to_string(),
        verify: body.verify,
        on_verify_failure: body.on_verify_failure,
        dedupe: body.dedupe,
        sinks: body.sinks,
        forward_headers: body.forward_headers,
    };
    let source = match node.config.source_settings(name, &section) {
        Ok(settings) => crate::source::load(settings, &node.runtime, node.config.wal_mode()).await,
        Err(problems) => Err(problems),
    };
    let source = source.map_err(|problems| {
        let details: Vec<Value> = problems.iter().map(|p| json!({"key": p.key, "message": p.message})).collect();
        let first = problems.first().map(|p| p.to_string()).unwrap_or_default();
        ApiError::bad_request("invalid_source", first).with_details(json!({ "problems": details }))
    })?;
    node.source_records.put(name, &section)?;
    node.sources.insert(source, Origin::Runtime);
    tracing::info!(%tenant, source = %name, "source written");
    node.sources.get(name).map(|(s, _)| s).ok_or_else(|| ApiError::not_found(name.to_string()))
}

/// A source's lists within their limits, checked before anything else of
/// it: `422 over_limit` naming the first list over.
fn within_limits(body: &SourceBody) -> Result<(), ApiError> {
    let lists = [
        ("sinks", body.sinks.len(), crate::source::MAX_SINKS),
        ("forward_headers", body.forward_headers.as_ref().map_or(0, Vec::len), crate::source::MAX_FORWARD_HEADERS),
        ("verify.secret", body.verify.as_ref().map_or(0, |v| v.secret.0.len()), crate::source::verify::MAX_SECRETS),
    ];
    match lists.into_iter().find(|(_, given, limit)| given > limit) {
        None => Ok(()),
        Some((key, given, limit)) => Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "over_limit",
            format!("{key}: {given} entries, at most {limit}"),
        )
        .with_details(json!({ "key": key, "limit": limit, "given": given }))),
    }
}
