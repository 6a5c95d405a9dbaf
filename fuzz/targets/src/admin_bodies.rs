//! The admin API's JSON bodies and query strings, through the real router
//! of a real node: anything a client sends is answered with a 2xx or a
//! typed 4xx, never a 5xx and never a panic.
//!
//! Input: a route byte, then lines: the tenant, the name, the query string,
//! and the body (the rest).

use std::sync::{Arc, OnceLock};

use ankusa::config::Config;
use ankusa::node::Node;
use axum::Router;
use http_body_util::BodyExt;
use tower::ServiceExt;

#[derive(Debug)]
struct Input<'a> {
    route: u8,
    tenant: &'a str,
    name: &'a str,
    query: &'a str,
    body: &'a [u8],
}

impl<'a> Input<'a> {
    fn parse(data: &'a [u8]) -> Option<Input<'a>> {
        let (&route, rest) = data.split_first()?;
        let mut parts = rest.splitn(4, |b| *b == b'\n');
        let mut text = || parts.next().and_then(|p| std::str::from_utf8(p).ok());
        let (tenant, name, query) = (text()?, text()?, text()?);
        let body = parts.next().unwrap_or_default();
        Some(Input { route, tenant, name, query, body })
    }
}

struct Admin {
    runtime: tokio::runtime::Runtime,
    router: Router,
    _dir: tempfile::TempDir,
}

fn admin() -> &'static Admin {
    static ADMIN: OnceLock<Admin> = OnceLock::new();
    ADMIN.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let mut config = Config::demo();
        config.node.data_dir = dir.path().to_path_buf();
        let node = runtime.block_on(Node::start(config)).expect("the demo node starts");
        let router = ankusa::admin::router(Arc::new(node));
        Admin { runtime, router, _dir: dir }
    })
}

fn request(input: &Input) -> Option<http::Request<axum::body::Body>> {
    let (t, n, q) = (input.tenant, input.name, input.query);
    let (method, uri) = match input.route % 8 {
        0 => ("POST", "/v1/replays".to_string()),
        1 => ("PATCH", format!("/v1/replays/{n}")),
        2 => ("POST", format!("/v1/tenants/{t}/sources")),
        3 => ("PUT", format!("/v1/tenants/{t}/sources/{n}")),
        4 => ("PUT", format!("/v1/tenants/{t}/rate-limit")),
        5 => ("GET", format!("/v1/dlq?{q}")),
        6 => ("GET", format!("/v1/quarantine?{q}")),
        _ => ("GET", format!("/v1/tenants/{t}/usage")),
    };
    let uri: http::Uri = uri.parse().ok()?;
    http::Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json")
        .body(axum::body::Body::from(input.body.to_vec()))
        .ok()
}

pub fn run(data: &[u8]) {
    let Some(input) = Input::parse(data) else { return };
    let admin = admin();
    let Some(request) = request(&input) else { return };
    let (status, body) = admin.runtime.block_on(async {
        let response = admin.router.clone().oneshot(request).await.expect("the router answers");
        let status = response.status();
        (status, response.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default())
    });
    assert!(status.as_u16() < 500, "{input:?} -> {status} {}", String::from_utf8_lossy(&body));
}
