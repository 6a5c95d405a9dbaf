//! The edge's HTTP server: the routes, the shared state, and a hyper
//! connection loop with a header read timeout (slow clients are cut off
//! before they hold a connection for long), a limit on a request head's
//! size (`431`), and a refusal of requests framed two ways (`400`, see
//! `framing`).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hyper::service::Service;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

pub use super::framing::Refusal;
use super::framing::{Followed, Framing, Watch};
pub use super::settings::EdgeConfig;
use super::settings::MIN_MAX_HEADER_BYTES;
pub use super::state::{Edge, Mode};

/// What hyper's read buffer may hold past the head limit: the end the
/// walk adds to a head it cut.
const HEAD_SLACK: usize = 1024;

pub fn router(edge: Arc<Edge>) -> Router {
    let mut router = Router::new()
        .route("/health", get(super::ingest::health))
        .route("/ready", get(super::ingest::ready))
        .route("/webhooks/{source}", post(super::ingest::ingest));
    if edge.config.http.tenant_routing {
        router = router.route("/webhooks/{tenant}/{source}", post(super::ingest::ingest_for_tenant));
    }
    router.with_state(edge)
}

/// Serve `edge` on `listener` until `shutdown` resolves.
pub async fn serve(listener: TcpListener, edge: Arc<Edge>, shutdown: impl Future<Output = ()>) {
    let limits = Limits {
        header_timeout: edge.config.http.header_timeout,
        max_head: edge.config.http.max_header_bytes,
        max_line: super::framing::DEFAULT_MAX_LINE,
    };
    serve_router(listener, router(edge), limits, refused, shutdown).await;
}

/// What a connection's requests must keep within.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// A client must send its request head within this.
    pub header_timeout: Duration,
    /// A request head larger than this is refused `431` (at least 8 KiB).
    pub max_head: usize,
    /// A request line longer than this is refused `414`.
    pub max_line: usize,
}

/// How long a stop waits for open connections to finish the request
/// each is serving; what is left then is cut.
const DRAIN: Duration = Duration::from_secs(5);

/// Serve `app` over HTTP/1 on `listener` until `shutdown` resolves: each
/// connection's bytes followed (see `framing`), a request framed two ways
/// or with a too-long line answered by `refuse` and its connection closed.
/// At `shutdown` no connection is accepted, each open one finishes the
/// request it serves and closes (keep-alive ends), and this returns once
/// they have (at most [`DRAIN`]): nothing holds `app` after it.
pub async fn serve_router(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    refuse: fn(Refusal) -> Response,
    shutdown: impl Future<Output = ()>,
) {
    let max_head = limits.max_head.max(MIN_MAX_HEADER_BYTES);
    let (stopping, stop) = tokio::sync::watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Finished connections' results go as new ones come.
        while connections.try_join_next().is_some() {}
        let _ = stream.set_nodelay(true);
        let watch = Arc::new(Watch::default());
        let stream = Followed::new(stream, Framing::new(max_head, limits.max_line, watch.clone()));
        let app = TowerToHyperService::new(app.clone());
        let service = hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
            let refusal = watch.next();
            let call = refusal.is_none().then(|| app.call(request));
            async move {
                match (call, refusal) {
                    (Some(call), _) => call.await,
                    (None, refusal) => Ok(closing(refuse(refusal.unwrap_or(Refusal::FramedTwoWays)))),
                }
            }
        });
        let mut stop = stop.clone();
        connections.spawn(async move {
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                // Room past the head limit: the walk cuts and ends a
                // larger head itself, for a typed 431.
                .max_buf_size(max_head + HEAD_SLACK)
                .serve_connection(TokioIo::new(stream), service);
            tokio::pin!(connection);
            let stopping = async move {
                let _ = stop.wait_for(|stopping| *stopping).await;
            };
            let ended = tokio::select! {
                ended = connection.as_mut() => ended,
                () = stopping => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(e) = ended {
                tracing::debug!("connection ended: {e}");
            }
        });
    }
    drop(listener);
    let _ = stopping.send(true);
    if tokio::time::timeout(DRAIN, async { while connections.join_next().await.is_some() {} }).await.is_err() {
        tracing::warn!(left = connections.len(), "connections still open {DRAIN:?} after the stop; cut");
        connections.shutdown().await;
    }
}

/// A refusal closes its connection: what follows it on the wire cannot be
/// trusted to start where this server thinks.
fn closing(mut response: Response) -> Response {
    response.headers_mut().insert(axum::http::header::CONNECTION, axum::http::HeaderValue::from_static("close"));
    response
}

/// The edge's answer to a request refused before its handler.
fn refused(refusal: Refusal) -> Response {
    let (status, code) = refusal.answer();
    crate::metrics::ingest(code);
    (status, axum::Json(serde_json::json!({ "error": code }))).into_response()
}
