//! The console and traces, against the real binary:
//! - the console's first load (HTML, CSS, JavaScript) in KiB, and the time
//!   to fetch it from a node, against `GET /health` on the same connection;
//! - the DLQ page the console asks for (`GET /v1/dlq?limit=50`, and
//!   filtered by sink name and class) over 1 000 000 dead rows, walking
//!   200 pages by cursor, against the same queries made in-process on the
//!   same store just before;
//! - ingest acks/s at 64 connections with traces exported over OTLP to a
//!   local collector, against the same node with traces off, interleaved
//!   (off, on, off, on).
//!
//! `cargo build --release --workspace --bins && cargo run --release -p ankusa-bench --bin bench-console`
//! (`ANKUSA_BENCH_ONLY=load|dlq|traces` runs one part.)

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ankusa::error_class::ErrorClass;
use ankusa::queue::{DeadQuery, Queue, QueueConfig, SinkSelector};
use ankusa_bench::load::{LoadConfig, LoadReport, run};
use ankusa_bench::{Receiver, fill, ratio, report, start_node};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};

const DEAD_ROWS: usize = 1_000_000;
const PAGES: usize = 200;
const CONNECTIONS: usize = 64;
const LOAD_SECONDS: u64 = 6;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

type HttpClient = Client<HttpConnector, Empty<Bytes>>;

fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

/// GET `path` from `addr`: (status, body bytes, time to the whole body).
async fn get(client: &HttpClient, addr: SocketAddr, path: &str) -> anyhow::Result<(u16, Bytes, Duration)> {
    let started = Instant::now();
    let response = client.get(format!("http://{addr}{path}").parse()?).await?;
    let status = response.status().as_u16();
    let body = response.into_body().collect().await?.to_bytes();
    Ok((status, body, started.elapsed()))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len().max(1)) - 1;
    sorted.get(i).map_or(0.0, |d| ms(*d))
}

/// The console's files, as a browser's first visit fetches them.
async fn first_load(bin: &Path, dir: &Path) -> anyhow::Result<()> {
    let kib = ankusa::admin::console_first_load_bytes() as f64 / 1024.0;
    report("console.first_load", kib, "KiB");
    let node = start_node(bin, dir, "load", "sources: {demo: {sinks: [log]}}\nsinks: {log: {component: log}}\n").await;
    let client = client();
    let (mut console, mut health) = (Vec::new(), Vec::new());
    for _ in 0..200 {
        let mut took = Duration::ZERO;
        let mut bytes = 0;
        for path in ["/console/", "/console/console.css", "/console/console.js"] {
            let (status, body, t) = get(&client, node.admin, path).await?;
            anyhow::ensure!(status == 200, "{path} answered {status}");
            took += t;
            bytes += body.len();
        }
        anyhow::ensure!(bytes == ankusa::admin::console_first_load_bytes(), "served {bytes} bytes");
        console.push(took);
        health.push(get(&client, node.admin, "/health").await?.2);
    }
    console.sort_unstable();
    health.sort_unstable();
    report("console.first_load_fetch.p50", percentile(&console, 0.5), "ms");
    report("console.health.p50", percentile(&health, 0.5), "ms");
    ratio("console.first_load_fetch_vs_health", percentile(&console, 0.5), percentile(&health, 0.5));
    node.kill();
    Ok(())
}

/// The console's DLQ requests: (name, API query, the same query in-process).
fn dlq_cases() -> [(&'static str, String, DeadQuery); 2] {
    [
        ("first_page", "limit=50".into(), DeadQuery { limit: 50, ..DeadQuery::default() }),
        (
            "sink_and_class",
            format!("sink={}&error_class=permanent&limit=50", fill::SINKS[1]),
            DeadQuery {
                limit: 50,
                sink: Some(SinkSelector::Name(fill::SINKS[1].into())),
                error_class: Some(ErrorClass::Permanent),
                ..DeadQuery::default()
            },
        ),
    ]
}

async fn dlq(bin: &Path, dir: &Path) -> anyhow::Result<()> {
    let data = dir.join("data-dlq");
    let queue = Arc::new(Queue::open(&data.join("store"), QueueConfig::default())?);
    let built = Instant::now();
    fill::dead(&queue, DEAD_ROWS, 50).await?;
    report("console.dlq.build_dead_rows", built.elapsed().as_secs_f64(), "s");
    report("console.dlq.dead_rows", queue.counter(None, "dead")? as f64, "rows");
    let mut in_process = Vec::new();
    for (_, _, query) in dlq_cases() {
        let mut latencies = Vec::new();
        let mut cursor = None;
        for _ in 0..PAGES {
            let started = Instant::now();
            let page = queue.dead_letters().dead(&DeadQuery { cursor: cursor.clone(), ..query.clone() })?;
            latencies.push(started.elapsed());
            cursor = page.next_cursor;
        }
        latencies.sort_unstable();
        in_process.push(latencies);
    }
    if let Ok(queue) = Arc::try_unwrap(queue) {
        queue.close().await;
    }

    let sinks: String = fill::SINKS.iter().map(|s| format!("  {s}: {{component: log}}\n")).collect();
    let yaml = format!(
        "node: {{roles: [ingest, admin]}}\nsinks:\n{sinks}sources:\n  github: {{sinks: [{0}, {1}]}}\n  rare: {{sinks: [{0}, {1}]}}\n",
        fill::SINKS[0],
        fill::SINKS[1]
    );
    let node = start_node(bin, dir, "dlq", &yaml).await;
    let client = client();
    for ((name, api_query, _), in_process) in dlq_cases().into_iter().zip(in_process) {
        let mut latencies = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..PAGES {
            let path = match &cursor {
                Some(c) => format!("/v1/dlq?{api_query}&cursor={c}"),
                None => format!("/v1/dlq?{api_query}"),
            };
            let (status, body, took) = get(&client, node.admin, &path).await?;
            anyhow::ensure!(status == 200, "{path} answered {status}: {}", String::from_utf8_lossy(&body));
            let page: serde_json::Value = serde_json::from_slice(&body)?;
            let entries = page["entries"].as_array().map_or(0, Vec::len);
            anyhow::ensure!(entries == 50, "{path} gave {entries} entries");
            latencies.push(took);
            cursor = page["next_cursor"].as_str().map(String::from);
        }
        latencies.sort_unstable();
        let api_p50 = percentile(&latencies, 0.5);
        report(&format!("console.dlq.{name}.api.p50"), api_p50, "ms");
        report(&format!("console.dlq.{name}.api.p99"), percentile(&latencies, 0.99), "ms");
        report(&format!("console.dlq.{name}.in_process.p50"), percentile(&in_process, 0.5), "ms");
        ratio(&format!("console.dlq.{name}.api_vs_in_process_p50"), api_p50, percentile(&in_process, 0.5));
    }
    node.kill();
    Ok(())
}

/// An OTLP/HTTP collector that takes every export and answers an empty
/// (valid) protobuf response: the requests and bytes it took.
struct Collector {
    addr: SocketAddr,
    requests: Arc<AtomicU64>,
    bytes: Arc<AtomicU64>,
}

impl Collector {
    async fn start() -> anyhow::Result<Collector> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (requests, bytes) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let counters = (requests.clone(), bytes.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let counters = counters.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
                        let counters = counters.clone();
                        async move {
                            let body = request.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                            counters.0.fetch_add(1, Ordering::Relaxed);
                            counters.1.fetch_add(body.len() as u64, Ordering::Relaxed);
                            let mut response = hyper::Response::new(Full::new(Bytes::new()));
                            response
                                .headers_mut()
                                .insert("content-type", "application/x-protobuf".parse().expect("a header"));
                            Ok::<_, Infallible>(response)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(Collector { addr, requests, bytes })
    }
}

async fn traces(bin: &Path, dir: &Path) -> anyhow::Result<()> {
    let receiver = Receiver::start()?;
    let collector = Collector::start().await?;
    let yaml = |traced: bool| {
        let otlp = if traced {
            format!("observability: {{otlp: {{endpoint: \"http://{}\"}}}}\n", collector.addr)
        } else {
            String::new()
        };
        format!(
            // The default tenant limit (5 000/s) would refuse the load.
            "{otlp}rate_limits: {{default: {{rate: 1000000, burst: 1000000}}}}\nsinks:\n  out:\n    component: http\n    options: {{url: \"{}\"}}\n    allow: [\"http://{}\"]\nsources:\n  bench: {{sinks: [out]}}\n",
            receiver.url(),
            receiver.addr
        )
    };
    let (mut off, mut on) = (LoadReport::default(), LoadReport::default());
    for round in 0..4 {
        let traced = round % 2 == 1;
        let node = start_node(bin, dir, &format!("traces-{round}"), &yaml(traced)).await;
        let load = run(LoadConfig {
            addr: node.ingest,
            path: "/webhooks/bench".into(),
            connections: CONNECTIONS,
            rate: None,
            duration: Duration::from_secs(LOAD_SECONDS),
            body_bytes: 1024,
        })
        .await?;
        let (_, log) = node.stop();
        anyhow::ensure!(load.failures.is_empty(), "failed requests {:?}:\n{log}", load.failures);
        if traced {
            on = on.then(load);
        } else {
            off = off.then(load);
        }
    }
    off.print("console.ingest.traces_off");
    on.print("console.ingest.traces_on");
    ratio("console.ingest.traces_on_vs_off", on.acks_per_sec(), off.acks_per_sec());
    report("console.traces.exports", collector.requests.load(Ordering::Relaxed) as f64, "requests");
    report("console.traces.exported", collector.bytes.load(Ordering::Relaxed) as f64 / (1 << 20) as f64, "MiB");
    anyhow::ensure!(collector.requests.load(Ordering::Relaxed) > 0, "the collector got no spans");
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let only = std::env::var("ANKUSA_BENCH_ONLY").ok();
    let runs = |part: &str| only.as_deref().is_none_or(|o| o == part);
    let bin = ankusa_bench::ankusa_bin(None)?;
    let dir = tempfile::tempdir()?;
    if runs("load") {
        first_load(&bin, dir.path()).await?;
    }
    if runs("dlq") {
        dlq(&bin, dir.path()).await?;
    }
    if runs("traces") {
        traces(&bin, dir.path()).await?;
    }
    Ok(())
}
