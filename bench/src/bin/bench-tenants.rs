//! Many tenants on one node, against the real binary: 10 000 runtime
//! sources over 1 000 tenants, each bound to one http sink, against 10
//! sources on a node of the same config, in the same run. For each:
//! - the time to create the sources through the admin API;
//! - the node's resident memory with them loaded, and the instances of
//!   the sink (`ankusa_sink_instances`);
//! - the time a restart takes to be ready with them stored;
//! - ingest acks/s at 64 connections, each request to the next source in
//!   turn, while the node delivers;
//! - delivered hooks/s, from the first request to the last delivery, and
//!   the memory and the sink's instances after it.
//!
//! Tenants' rate limits are lifted on both, so the node's own rate is
//! what is measured.
//!
//! `cargo build --release --workspace --bins && cargo run --release -p ankusa-bench --bin bench-tenants`
//! (`ANKUSA_BENCH_SOURCES` changes the 10 000.)

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ankusa_bench::{Receiver, ratio, report, start_node};
use ankusa_tests::binary::{RunningNode, request};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use serde_json::json;

const SOURCES_PER_TENANT: usize = 10;
const CONNECTIONS: usize = 64;
const LOAD_SECONDS: u64 = 6;
/// Source writes in flight at once while creating them.
const CREATING: usize = 16;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// What one node measured.
struct Measured {
    create: Duration,
    rss_mib: f64,
    instances: f64,
    boot: Duration,
    rss_after_boot_mib: f64,
    acks_per_sec: f64,
    delivered_per_sec: f64,
    rss_after_load_mib: f64,
    instances_after_load: f64,
}

fn config(receiver: &Receiver) -> String {
    let origin = format!("http://{}", receiver.addr);
    format!(
        "sinks:\n  out:\n    component: http\n    options: {{url: \"{}\"}}\n    allow: [\"{origin}\"]\n\
         sources:\n  seed: {{sinks: [out]}}\n\
         rate_limits: {{default: {{rate: 1000000, burst: 1000000}}}}\n",
        receiver.url()
    )
}

/// Resident memory of `pid`, in MiB.
fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}

/// A gauge's value from the metrics page.
async fn gauge(node: &RunningNode, sample: &str) -> f64 {
    let (_, text) = request(node.admin, "GET", "/metrics", &[], None).await;
    let text = String::from_utf8_lossy(&text).into_owned();
    text.lines().find_map(|l| l.strip_prefix(sample)?.trim().parse().ok()).unwrap_or(0.0)
}

fn source_name(n: usize) -> String {
    format!("s{n:05}")
}

/// Create `count` runtime sources, `SOURCES_PER_TENANT` to a tenant.
async fn create(node: &RunningNode, count: usize) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let next = Arc::new(AtomicU64::new(0));
    let mut writers = Vec::new();
    for _ in 0..CREATING {
        let (admin, next) = (node.admin, next.clone());
        writers.push(tokio::spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed) as usize;
                if n >= count {
                    return Ok::<_, anyhow::Error>(());
                }
                let tenant = format!("t{:04}", n / SOURCES_PER_TENANT);
                let body = json!({"name": source_name(n), "sinks": ["out"]}).to_string();
                let (status, answer) =
                    request(admin, "POST", &format!("/v1/tenants/{tenant}/sources"), &[], Some(body)).await;
                anyhow::ensure!(status == 201, "source {n}: {status} {}", String::from_utf8_lossy(&answer));
            }
        }));
    }
    for writer in writers {
        writer.await??;
    }
    Ok(started.elapsed())
}

/// Closed-loop ingest over every source in turn: acks and the time taken.
async fn ingest(addr: SocketAddr, sources: usize) -> anyhow::Result<(u64, Duration)> {
    let acks = Arc::new(AtomicU64::new(0));
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let until = started + Duration::from_secs(LOAD_SECONDS);
    let mut clients = Vec::new();
    for _ in 0..CONNECTIONS {
        let (acks, next) = (acks.clone(), next.clone());
        clients.push(tokio::spawn(async move {
            let stream = tokio::net::TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            let (mut sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
            tokio::spawn(connection);
            while Instant::now() < until {
                let n = next.fetch_add(1, Ordering::Relaxed) as usize % sources;
                let body = Bytes::from(format!("{{\"n\":{n},\"pad\":\"{}\"}}", "x".repeat(200)));
                let request = http::Request::post(format!("/webhooks/{}", source_name(n)))
                    .header("host", addr.to_string())
                    .header("content-type", "application/json")
                    .body(Full::new(body))?;
                let response = sender.send_request(request).await?;
                let status = response.status();
                response.into_body().collect().await?;
                anyhow::ensure!(status == 201, "ingest answered {status}");
                acks.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<_, anyhow::Error>(())
        }));
    }
    for client in clients {
        client.await??;
    }
    Ok((acks.load(Ordering::Relaxed), started.elapsed()))
}

async fn measure(bin: &Path, dir: &Path, sources: usize) -> anyhow::Result<Measured> {
    let receiver = Receiver::start()?;
    let name = format!("{sources}");
    let node = start_node(bin, dir, &name, &config(&receiver)).await;
    // Besides the config's own `seed`.
    let create = create(&node, sources).await?;
    // A hook through the first source starts the sink's first instance.
    let warm = request(node.ingest, "POST", "/webhooks/seed", &[], Some("{}".into())).await;
    anyhow::ensure!(warm.0 == 201, "seed answered {}", warm.0);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss = rss_mib(node.pid());
    let instances = gauge(&node, "ankusa_sink_instances{sink=\"out\"} ").await;
    let config = node.config.clone();
    let data = node.data.clone();
    let (status, _) = node.stop();
    anyhow::ensure!(status.success(), "the node stopped with {status}");

    let booting = Instant::now();
    let node = RunningNode::start_bin(bin, &config, &data, &[], "127.0.0.1:0").await;
    let boot = booting.elapsed();
    let rss_after_boot = rss_mib(node.pid());
    let before = receiver.received.load(Ordering::Relaxed);
    let loading = Instant::now();
    let (acks, took) = ingest(node.ingest, sources).await?;
    let delivered_by = loop {
        if receiver.received.load(Ordering::Relaxed) - before >= acks {
            break loading.elapsed();
        }
        anyhow::ensure!(loading.elapsed() < Duration::from_secs(300), "not every acked hook was delivered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let rss_after_load = rss_mib(node.pid());
    let instances_after_load = gauge(&node, "ankusa_sink_instances{sink=\"out\"} ").await;
    node.kill();
    Ok(Measured {
        create,
        rss_mib: rss,
        instances,
        boot,
        rss_after_boot_mib: rss_after_boot,
        acks_per_sec: acks as f64 / took.as_secs_f64(),
        delivered_per_sec: acks as f64 / delivered_by.as_secs_f64(),
        rss_after_load_mib: rss_after_load,
        instances_after_load,
    })
}

fn print(prefix: &str, sources: usize, m: &Measured) {
    report(&format!("{prefix}.sources"), sources as f64, "sources");
    report(&format!("{prefix}.create"), m.create.as_secs_f64(), "s");
    report(&format!("{prefix}.create_per_source"), m.create.as_secs_f64() * 1e3 / sources as f64, "ms");
    report(&format!("{prefix}.rss"), m.rss_mib, "MiB");
    report(&format!("{prefix}.sink_instances"), m.instances, "instances");
    report(&format!("{prefix}.boot"), m.boot.as_secs_f64() * 1e3, "ms");
    report(&format!("{prefix}.rss_after_boot"), m.rss_after_boot_mib, "MiB");
    report(&format!("{prefix}.ingest"), m.acks_per_sec, "acks/s");
    report(&format!("{prefix}.delivered"), m.delivered_per_sec, "hooks/s");
    report(&format!("{prefix}.rss_after_load"), m.rss_after_load_mib, "MiB");
    report(&format!("{prefix}.sink_instances_after_load"), m.instances_after_load, "instances");
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let bin = ankusa_bench::ankusa_bin(None)?;
    let many: usize = std::env::var("ANKUSA_BENCH_SOURCES").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let dir = tempfile::tempdir()?;
    let few = measure(&bin, dir.path(), 10).await?;
    print("tenants.few", 10, &few);
    let lots = measure(&bin, dir.path(), many).await?;
    print("tenants.many", many, &lots);
    ratio("tenants.rss_many_vs_few", lots.rss_mib, few.rss_mib);
    ratio("tenants.rss_after_load_many_vs_few", lots.rss_after_load_mib, few.rss_after_load_mib);
    ratio("tenants.boot_many_vs_few", lots.boot.as_secs_f64(), few.boot.as_secs_f64());
    ratio("tenants.ingest_many_vs_few", lots.acks_per_sec, few.acks_per_sec);
    ratio("tenants.delivered_many_vs_few", lots.delivered_per_sec, few.delivered_per_sec);
    Ok(())
}
