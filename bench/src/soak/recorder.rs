//! The receiver the soak's http sink delivers to. It fails a share of
//! attempts (`503`, retried; `400`, dead at once so replays have work),
//! answers the rest `200` after a short random pause (so a kill often lands
//! with deliveries in flight), and records every `200` it gave: the hook id
//! and the digest of the bytes it received.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

use super::rng::Rng;

/// Shares of attempts answered with a failure, in parts per thousand.
#[derive(Clone, Copy, Debug)]
pub struct Failures {
    /// `503`: retried with backoff.
    pub transient_permille: u64,
    /// `400`: dead at once, revived only by a replay.
    pub permanent_permille: u64,
}

/// One `200` the receiver gave.
#[derive(Clone, Debug)]
pub struct Delivery {
    pub tenant: String,
    pub sha256: String,
}

#[derive(Default)]
struct State {
    delivered: Mutex<HashMap<String, Vec<Delivery>>>,
    transient: AtomicU64,
    permanent: AtomicU64,
    /// Requests being answered right now.
    inflight: AtomicUsize,
    transient_permille: AtomicU64,
    permanent_permille: AtomicU64,
    draws: AtomicU64,
}

pub struct Recorder {
    pub addr: SocketAddr,
    state: Arc<State>,
}

impl Recorder {
    /// Listen on a free loopback port, on a runtime of its own thread.
    pub fn start(failures: Failures, seed: u64) -> std::io::Result<Recorder> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let state = Arc::new(State::default());
        state.draws.store(seed, Ordering::Relaxed);
        let recorder = Recorder { addr, state: state.clone() };
        recorder.set_failures(failures);
        std::thread::Builder::new().name("soak-recorder".into()).spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
            runtime.block_on(serve(listener, state));
        })?;
        Ok(recorder)
    }

    pub fn set_failures(&self, failures: Failures) {
        self.state.transient_permille.store(failures.transient_permille, Ordering::Relaxed);
        self.state.permanent_permille.store(failures.permanent_permille, Ordering::Relaxed);
    }

    pub fn url(&self) -> String {
        format!("http://{}/hooks", self.addr)
    }

    pub fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn inflight(&self) -> usize {
        self.state.inflight.load(Ordering::Relaxed)
    }

    /// Every `200` given so far, by hook id.
    pub fn delivered(&self) -> HashMap<String, Vec<Delivery>> {
        self.state.delivered.lock().map(|d| d.clone()).unwrap_or_default()
    }

    /// How many of `ids` were never answered `200`.
    pub fn undelivered<'a>(&self, ids: impl Iterator<Item = &'a String>) -> usize {
        let Ok(delivered) = self.state.delivered.lock() else { return usize::MAX };
        ids.filter(|id| !delivered.contains_key(*id)).count()
    }

    /// Attempts answered `503` and `400`.
    pub fn failed(&self) -> (u64, u64) {
        (self.state.transient.load(Ordering::Relaxed), self.state.permanent.load(Ordering::Relaxed))
    }
}

async fn serve(listener: std::net::TcpListener, state: Arc<State>) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else { return };
    while let Ok((stream, _)) = listener.accept().await {
        let state = state.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request: Request<Incoming>| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(answer(&state, request).await) }
            });
            let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

async fn answer(state: &State, request: Request<Incoming>) -> Response<Full<Bytes>> {
    state.inflight.fetch_add(1, Ordering::Relaxed);
    let response = record(state, request).await;
    state.inflight.fetch_sub(1, Ordering::Relaxed);
    response
}

async fn record(state: &State, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let header =
        |name: &str| request.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string).unwrap_or_default();
    let (id, tenant) = (header("x-ankusa-id"), header("x-ankusa-tenant"));
    let Ok(body) = request.into_body().collect().await else { return status(StatusCode::BAD_REQUEST) };
    let mut rng = Rng::new(state.draws.fetch_add(1, Ordering::Relaxed));
    tokio::time::sleep(Duration::from_micros(rng.range(0, 4000))).await;
    let draw = rng.range(0, 1000);
    let transient = state.transient_permille.load(Ordering::Relaxed);
    let permanent = state.permanent_permille.load(Ordering::Relaxed);
    if draw < transient {
        state.transient.fetch_add(1, Ordering::Relaxed);
        return status(StatusCode::SERVICE_UNAVAILABLE);
    }
    if draw < transient + permanent {
        state.permanent.fetch_add(1, Ordering::Relaxed);
        return status(StatusCode::BAD_REQUEST);
    }
    let delivery = Delivery { tenant, sha256: ankusa::digest::sha256_hex(&body.to_bytes()) };
    if let Ok(mut delivered) = state.delivered.lock() {
        delivered.entry(id).or_default().push(delivery);
    }
    status(StatusCode::OK)
}

fn status(code: StatusCode) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = code;
    response
}
