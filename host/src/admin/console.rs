//! `/console`: the web console, three static files built into the binary.
//! It reads and changes the node only through the admin API (with the
//! token the operator types, sent as a header), so it needs no route of
//! its own beyond these files, and no token to fetch them.
//!
//! Hook data it shows is untrusted input. The console writes it into the
//! page as text only, and every console response carries a strict
//! Content-Security-Policy: scripts and styles from this origin only, no
//! inline script, no framing, no form posts elsewhere.

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

const INDEX: &str = include_str!("../../console/index.html");
const SCRIPT: &str = include_str!("../../console/console.js");
const STYLE: &str = include_str!("../../console/console.css");

/// What a console response may load and do.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// Bytes of the console's first load: the page, its script and its style.
pub fn first_load_bytes() -> usize {
    INDEX.len() + SCRIPT.len() + STYLE.len()
}

/// Whether `path` is one of the console's (served without a token).
pub fn is_console(path: &str) -> bool {
    path == "/console" || path.starts_with("/console/")
}

/// The console's routes.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/console", get(|| async { Redirect::permanent("/console/") }))
        .route("/console/", get(|| async { asset("text/html; charset=utf-8", INDEX) }))
        .route("/console/console.js", get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }))
        .route("/console/console.css", get(|| async { asset("text/css; charset=utf-8", STYLE) }))
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    // The files change with the binary: revalidate, never serve stale.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}
