//! `/v1/transforms`: the configured transforms, and trying one on a hook
//! (nothing is stored or delivered).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::ApiError;
use super::error::{Body, Segments};
use crate::node::Node;
use crate::runtime::{Applied, Hook, Transform};

#[derive(Debug, Serialize, ToSchema)]
pub struct TransformView {
    pub name: String,
    /// `jsonfilter`, `reshape`, or the `.wasm` path.
    pub component: String,
    /// The bindings that run it: `source/sink`.
    pub bindings: Vec<String>,
}

/// A hook to try a transform on; everything but the body is optional.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TryHook {
    /// The body: text, or base64 with `body_encoding: base64`.
    #[serde(default)]
    pub body: String,
    /// `utf8` (default) or `base64`.
    pub body_encoding: Option<String>,
    /// Request headers, in order: `[[name, value], ...]`.
    #[serde(default)]
    pub headers: Vec<(String, String)>,
    pub content_type: Option<String>,
    /// The source and tenant the transform sees (default `try`, `default`).
    pub source: Option<String>,
    pub tenant: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Tried {
    /// `deliver`, `drop` or `failed`.
    pub verdict: &'static str,
    /// Why it dropped the hook, or why the call failed.
    pub reason: Option<String>,
    /// For `failed`: the class (`fault`, `timeout`, `permanent`, ...).
    pub class: Option<String>,
    /// For `deliver`: the hook as its sink would get it.
    pub hook: Option<TriedHook>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TriedHook {
    pub content_type: Option<String>,
    pub headers: Vec<(String, String)>,
    pub body: String,
    /// `utf8` or `base64`.
    pub body_encoding: &'static str,
    pub sha256: String,
}

/// The transforms of the node's config, and the bindings that run each.
#[utoipa::path(get, path = "/v1/transforms", tag = "sinks",
    responses((status = 200, description = "The configured transforms", body = Vec<TransformView>)))]
pub async fn list(State(node): State<Arc<Node>>) -> Json<Vec<TransformView>> {
    let all = node.sources.all();
    let views = node
        .config
        .transforms
        .iter()
        .map(|(name, settings)| TransformView {
            name: name.clone(),
            component: settings.component.clone(),
            bindings: all
                .iter()
                .flat_map(|(source, _)| {
                    let bindings = source.sinks.iter().filter(|b| b.transforms.iter().any(|t| t.name() == name));
                    bindings.map(|b| format!("{}/{}", source.name, b.sink.label().sink)).collect::<Vec<_>>()
                })
                .collect(),
        })
        .collect();
    Json(views)
}

/// Run the transform `name` on a hook and answer what it made of it:
/// the verdict, and the hook its sink would get, or why it failed.
/// Nothing is stored or delivered. The transform running in a binding is
/// used (an upload's, if one was swapped in), else it is loaded from the
/// config.
#[utoipa::path(post, path = "/v1/transforms/{name}/try", tag = "sinks", request_body = TryHook,
    params(("name" = String, Path, description = "A transform of the node's config")),
    responses(
        (status = 200, description = "What the transform made of the hook", body = Tried),
        (status = 400, description = "A bad hook", body = super::ErrorBody),
        (status = 404, description = "No transform of that name", body = super::ErrorBody),
        (status = 422, description = "The transform does not load", body = super::ErrorBody),
    ))]
pub async fn try_one(
    State(node): State<Arc<Node>>,
    Segments(name): Segments<String>,
    Body(input): Body<TryHook>,
) -> Result<Json<Tried>, ApiError> {
    let transform = running(&node, &name).await?;
    let mut hook = hook_of(input)?;
    let tried = match transform.apply(&mut hook).await {
        Ok(Applied::Drop(reason)) => Tried { verdict: "drop", reason: Some(reason), class: None, hook: None },
        Ok(Applied::Deliver) => {
            let (body, body_encoding) = match String::from_utf8(hook.body) {
                Ok(text) => (text, "utf8"),
                Err(e) => (STANDARD.encode(e.as_bytes()), "base64"),
            };
            let headers =
                hook.headers.into_iter().map(|(n, v)| (n, String::from_utf8_lossy(&v).into_owned())).collect();
            let sent = TriedHook { content_type: hook.content_type, headers, body, body_encoding, sha256: hook.sha256 };
            Tried { verdict: "deliver", reason: None, class: None, hook: Some(sent) }
        }
        Err(failure) => Tried {
            verdict: "failed",
            reason: Some(failure.reason),
            class: Some(failure.class.as_str().to_string()),
            hook: None,
        },
    };
    Ok(Json(tried))
}

/// The transform `name` as a binding runs it, or loaded from the config.
async fn running(node: &Node, name: &str) -> Result<Arc<Transform>, ApiError> {
    let bound = node.sources.all().iter().find_map(|(source, _)| {
        source.sinks.iter().flat_map(|b| b.transforms.iter()).find(|t| t.name() == name).cloned()
    });
    if let Some(transform) = bound {
        return Ok(transform);
    }
    let spec = node
        .config
        .transform_spec(name)
        .ok_or_else(|| ApiError::not_found(format!("no transform named `{name}` in the node's config")))?;
    let loaded =
        node.runtime.load_transform(spec).await.map_err(|e| {
            ApiError::new(axum::http::StatusCode::UNPROCESSABLE_ENTITY, "transform_refused", e.to_string())
        })?;
    Ok(Arc::new(loaded))
}

fn hook_of(input: TryHook) -> Result<Hook, ApiError> {
    let body = match input.body_encoding.as_deref() {
        None | Some("utf8") => input.body.into_bytes(),
        Some("base64") => STANDARD
            .decode(input.body.as_bytes())
            .map_err(|e| ApiError::bad_request("invalid_body", format!("body: not base64: {e}")))?,
        Some(other) => {
            return Err(ApiError::bad_request("invalid_body", format!("body_encoding: `{other}` (utf8 or base64)")));
        }
    };
    let content_type = input
        .content_type
        .or_else(|| input.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case("content-type")).map(|(_, v)| v.clone()));
    let id = uuid::Uuid::now_v7().to_string();
    Ok(Hook {
        idempotency_key: format!("try-{id}"),
        id,
        seq: 0,
        source: input.source.unwrap_or_else(|| "try".into()),
        tenant: input.tenant.unwrap_or_else(|| crate::tenant::DEFAULT_TENANT.into()),
        received_at: crate::queue::now_ms(),
        content_type,
        headers: input.headers.into_iter().map(|(n, v)| (n, v.into_bytes())).collect(),
        sha256: crate::digest::sha256_hex(&body),
        body,
        dedupe_key: None,
        replay_id: None,
    })
}
