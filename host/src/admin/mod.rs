//! The admin API (default `127.0.0.1:4002`): health, metrics, the DLQ,
//! replays, the quarantine pen, held ordering keys, tenants and their
//! sources, and sinks.
//!
//! Every route is declared once, with its OpenAPI description, and the
//! router and `/openapi.json` are both generated from those declarations.
//! When a token is configured, every route but `/health` and `/ready`
//! needs `Authorization: Bearer <token>`; a non-loopback bind without one
//! is refused by the config check. What a browser may send it, token or
//! not, is `browser`'s to judge (DNS rebinding, cross-site requests).

mod browser;
mod console;
mod dlq;
mod error;
mod fleet;
mod hooks;
mod ordering;
mod quarantine;
mod replays;
mod sinks;
mod sources;
mod stats;
mod status;
mod tenants;
mod transforms;

use std::future::Future;
use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use ring::digest::{SHA256, digest};
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;
use utoipa::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use console::{CONTENT_SECURITY_POLICY, first_load_bytes as console_first_load_bytes};
pub use error::{ApiError, ErrorBody};

use crate::node::Node;

#[derive(OpenApi)]
#[openapi(
    info(title = "Ankusa admin API", description = "Operate an Ankusa node: DLQ, replays, quarantine, tenants, sinks."),
    modifiers(&BearerAuth),
    security(("bearer" = [])),
    components(schemas(ErrorBody)),
)]
struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The document, generated once from the route declarations.
static DOCUMENT: OnceLock<utoipa::openapi::OpenApi> = OnceLock::new();

/// The routes and their OpenAPI descriptions, one declaration each.
fn declared() -> OpenApiRouter<Arc<Node>> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(status::health))
        .routes(routes!(status::ready))
        .routes(routes!(status::metrics))
        .routes(routes!(status::openapi))
        .routes(routes!(status::config))
        .routes(routes!(status::wal))
        .routes(routes!(fleet::status))
        .routes(routes!(dlq::list))
        .routes(routes!(hooks::get))
        .routes(routes!(replays::list, replays::create))
        .routes(routes!(replays::get, replays::update))
        .routes(routes!(quarantine::list, quarantine::purge))
        .routes(routes!(ordering::held))
        .routes(routes!(ordering::release))
        .routes(routes!(sources::list_all))
        .routes(routes!(sources::list, sources::create))
        .routes(routes!(sources::get, sources::replace, sources::delete))
        .routes(routes!(tenants::list))
        .routes(routes!(tenants::usage))
        .routes(routes!(tenants::get_rate_limit, tenants::put_rate_limit))
        .routes(routes!(tenants::status, tenants::erase))
        .routes(routes!(sinks::list))
        .routes(routes!(sinks::reload))
        .routes(routes!(sinks::upload))
        .routes(routes!(stats::get))
        .routes(routes!(transforms::list))
        .routes(routes!(transforms::try_one))
}

/// The OpenAPI document of the admin API.
pub fn document() -> &'static utoipa::openapi::OpenApi {
    DOCUMENT.get_or_init(|| declared().into_openapi())
}

/// The admin router over `node`.
pub fn router(node: Arc<Node>) -> Router {
    let (router, _) = declared().split_for_parts();
    router
        .merge(console::routes())
        .fallback(no_route)
        .layer(axum::middleware::from_fn_with_state(node.clone(), authorize))
        .layer(axum::middleware::from_fn_with_state(node.clone(), browser::guard))
        .layer(axum::middleware::from_fn(request_id))
        .with_state(node)
}

/// Serve the admin API until `shutdown` completes, with the edge's limits
/// on request heads; a request refused before its handler (a too-long
/// request line, framing two ways) gets the typed problem like any other.
pub async fn serve(listener: TcpListener, node: Arc<Node>, shutdown: impl Future<Output = ()> + Send + 'static) {
    let limits = crate::edge::Limits {
        header_timeout: std::time::Duration::from_secs(10),
        max_head: crate::edge::DEFAULT_MAX_HEADER_BYTES,
        max_line: crate::edge::DEFAULT_MAX_LINE,
    };
    crate::edge::serve_router(listener, router(node), limits, refused, shutdown).await;
}

fn refused(refusal: crate::edge::Refusal) -> Response {
    use crate::edge::Refusal;
    let (status, code) = refusal.answer();
    crate::metrics::metrics().admin_refused(code);
    let message = match refusal {
        Refusal::UriTooLong => format!("the request line is over {} bytes", crate::edge::DEFAULT_MAX_LINE),
        Refusal::HeadTooLarge => {
            format!("the request line and headers are over {} bytes", crate::edge::DEFAULT_MAX_HEADER_BYTES)
        }
        Refusal::TooManyHeaders => "more than 100 header fields".to_string(),
        Refusal::BodyTooLarge => "a Content-Length larger than any body this API takes".to_string(),
        Refusal::FramedTwoWays => {
            "both Content-Length and Transfer-Encoding: the request is framed two ways".to_string()
        }
    };
    ApiError::new(status, code, message).into_response()
}

async fn no_route() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "no_route", "no such admin route (see /openapi.json)")
}

/// Routes open to anyone who can reach the port: probes need no token.
const OPEN_ROUTES: [&str; 2] = ["/health", "/ready"];

/// The bearer token, when one is configured, compared in constant time
/// (both sides hashed first, so neither length leaks either).
async fn authorize(State(node): State<Arc<Node>>, request: Request, next: Next) -> Response {
    let Some(token) = &node.config.admin.token else { return next.run(request).await };
    if OPEN_ROUTES.contains(&request.uri().path()) || console::is_console(request.uri().path()) {
        return next.run(request).await;
    }
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    let expected = digest(&SHA256, token.0.as_bytes());
    let given = digest(&SHA256, presented.as_bytes());
    if bool::from(expected.as_ref().ct_eq(given.as_ref())) && !presented.is_empty() {
        return next.run(request).await;
    }
    let mut response =
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", "a valid bearer token is required").into_response();
    response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

/// Every request gets an id (the caller's `x-request-id`, or a new one),
/// echoed in the answer and carried by the request's log lines.
async fn request_id(mut request: Request, next: Next) -> Response {
    let id = request
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128)
        .map(str::to_string)
        .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
    let span = tracing::info_span!("admin", request_id = %id, method = %request.method(), path = %request.uri().path());
    request.extensions_mut().insert(RequestId(id.clone()));
    let mut response = tracing::Instrument::instrument(next.run(request), span.clone()).await;
    span.in_scope(|| tracing::debug!(status = response.status().as_u16(), "admin request"));
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert("x-request-id", value);
    }
    // Answers are data, never to be sniffed into markup.
    response.headers_mut().insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    response
}

/// The id of the request being served.
#[derive(Clone, Debug)]
pub struct RequestId(pub String);

/// `400 invalid_tenant` unless `tenant` is a tenant id.
fn tenant_checked(tenant: &str) -> Result<(), ApiError> {
    if crate::source::valid_tenant(tenant) {
        Ok(())
    } else {
        Err(ApiError::bad_request("invalid_tenant", "a tenant id is 1-64 of A-Z a-z 0-9 _ -"))
    }
}

/// Entries per page of a listing: 50 unless asked, 1 to 1 000.
fn page_limit(asked: Option<usize>) -> Result<usize, ApiError> {
    const DEFAULT: usize = 50;
    const MAX: usize = 1000;
    let limit = asked.unwrap_or(DEFAULT);
    if (1..=MAX).contains(&limit) {
        Ok(limit)
    } else {
        Err(ApiError::bad_request("invalid_query", format!("limit: between 1 and {MAX}")))
    }
}

/// The node's queue, or the answer for a node that keeps none.
fn queue_of(node: &Node) -> Result<&Arc<crate::queue::Queue>, ApiError> {
    node.queue.as_ref().ok_or_else(ApiError::no_store)
}
