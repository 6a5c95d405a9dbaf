//! What the soak sends the node: webhooks from several keep-alive clients
//! (each ack kept with the digest of the bytes sent), and the operator's
//! calls (DLQ replays, tenant erases) through the admin API.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use super::node::{SCRATCH_SOURCE, SCRATCH_TENANT, SOURCE};
use super::rng::Rng;

/// One acknowledged hook.
#[derive(Clone, Debug)]
pub struct Acked {
    pub tenant: &'static str,
    pub sha256: String,
}

/// Every ack the clients got, by hook id, and what is in flight.
#[derive(Default)]
pub struct Ledger {
    pub acked: Mutex<HashMap<String, Acked>>,
    /// Requests sent and not yet answered.
    pub posting: AtomicUsize,
    /// Answers other than `201`, and transport errors (a killed node).
    pub refused: AtomicU64,
    pub transport_errors: AtomicU64,
    /// The next body's number: every body sent is different.
    next: AtomicU64,
}

pub type Http = Client<HttpConnector, Full<Bytes>>;

pub fn http() -> Http {
    Client::builder(TokioExecutor::new()).pool_max_idle_per_host(64).build_http()
}

/// `clients` loops posting hooks to `ingest` until `stop`, one in ten to
/// the scratch tenant.
pub fn post_hooks(
    ingest: SocketAddr,
    clients: usize,
    seed: u64,
    ledger: Arc<Ledger>,
    stop: Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..clients)
        .map(|client| {
            let (ledger, stop) = (ledger.clone(), stop.clone());
            tokio::spawn(async move {
                let http = http();
                let mut rng = Rng::new(seed ^ ((client as u64) << 32));
                while !stop.load(Ordering::Relaxed) {
                    post_one(&http, ingest, &mut rng, &ledger).await;
                }
            })
        })
        .collect()
}

async fn post_one(http: &Http, ingest: SocketAddr, rng: &mut Rng, ledger: &Ledger) {
    let (source, tenant) =
        if rng.chance(0.1) { (SCRATCH_SOURCE, SCRATCH_TENANT) } else { (SOURCE, super::node::TENANT) };
    let n = ledger.next.fetch_add(1, Ordering::Relaxed);
    let mut body = format!("{{\"n\":{n},\"pad\":\"").into_bytes();
    let pad = rng.range(16, 1500) as usize;
    body.extend((0..pad).map(|i| b'a' + ((n as usize + i) % 26) as u8));
    body.extend_from_slice(b"\"}");
    let sha256 = ankusa::digest::sha256_hex(&body);
    let request = match http::Request::post(format!("http://{ingest}/webhooks/{source}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
    {
        Ok(request) => request,
        Err(_) => return,
    };
    ledger.posting.fetch_add(1, Ordering::Relaxed);
    let answer = http.request(request).await;
    ledger.posting.fetch_sub(1, Ordering::Relaxed);
    let response = match answer {
        Ok(response) => response,
        Err(_) => {
            // The node is down (killed, or not yet back): try again soon.
            ledger.transport_errors.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(20)).await;
            return;
        }
    };
    let status = response.status();
    let Ok(bytes) = response.into_body().collect().await.map(|b| b.to_bytes()) else {
        ledger.transport_errors.fetch_add(1, Ordering::Relaxed);
        return;
    };
    if status != http::StatusCode::CREATED {
        // 409 while the scratch tenant is erased, 503 while the node
        // recovers: not acked, so not counted.
        ledger.refused.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(5)).await;
        return;
    }
    let id = serde_json::from_slice::<Value>(&bytes).ok().and_then(|v| v["id"].as_str().map(str::to_string));
    if let (Some(id), Ok(mut acked)) = (id, ledger.acked.lock()) {
        acked.insert(id, Acked { tenant, sha256 });
    }
}

/// The admin API of the node.
#[derive(Clone)]
pub struct Admin {
    pub addr: SocketAddr,
    http: Http,
}

impl Admin {
    pub fn new(addr: SocketAddr) -> Admin {
        Admin { addr, http: http() }
    }

    /// One call; `None` when the node does not answer.
    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Option<(u16, Value)> {
        let body = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
        let request = http::Request::builder()
            .method(method)
            .uri(format!("http://{}{path}", self.addr))
            .header("content-type", "application/json")
            .body(Full::new(body))
            .ok()?;
        let call = self.http.request(request);
        let response = tokio::time::timeout(Duration::from_secs(5), call).await.ok()?.ok()?;
        let status = response.status().as_u16();
        let bytes = response.into_body().collect().await.ok()?.to_bytes();
        Some((status, serde_json::from_slice(&bytes).unwrap_or(Value::Null)))
    }

    /// Revive every dead row, at most `rate` rows a second.
    pub async fn replay_dlq(&self, rate: f64) -> bool {
        let job = serde_json::json!({"kind": "dlq", "rate": rate, "max_lag_ms": 60000});
        matches!(self.call("POST", "/v1/replays", Some(job)).await, Some((201 | 202, _)))
    }

    /// Start erasing the scratch tenant (unless an erase is running).
    pub async fn erase_scratch(&self) -> bool {
        matches!(self.call("DELETE", &format!("/v1/tenants/{SCRATCH_TENANT}"), None).await, Some((202, _)))
    }

    /// What is running now: a replay, an erase, and the intake checkpoints
    /// so far.
    pub async fn observe(&self) -> Option<Observed> {
        let (_, replays) = self.call("GET", "/v1/replays", None).await?;
        let replaying = replays.as_array().is_some_and(|jobs| jobs.iter().any(|j| j["state"] == "running"));
        let erasing = match self.call("GET", &format!("/v1/tenants/{SCRATCH_TENANT}"), None).await? {
            (200, erase) => !matches!(erase["phase"].as_str(), Some("done" | "failed")),
            _ => false,
        };
        let (_, wal) = self.call("GET", "/v1/wal", None).await?;
        let checkpoints = wal["store"]["checkpoints"].as_u64().unwrap_or(0);
        Some(Observed { replaying, erasing, checkpoints })
    }

    /// Rows of `tenant` by state.
    pub async fn usage(&self, tenant: &str) -> Option<Value> {
        match self.call("GET", &format!("/v1/tenants/{tenant}/usage"), None).await? {
            (200, usage) => Some(usage),
            _ => None,
        }
    }
}

/// A snapshot of the node's background work.
#[derive(Clone, Copy, Debug, Default)]
pub struct Observed {
    pub replaying: bool,
    pub erasing: bool,
    pub checkpoints: u64,
}
