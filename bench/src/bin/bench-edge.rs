//! Durable ingest over HTTP: the load generator against the edge in `disk`
//! mode (1 KiB bodies, 64 keep-alive connections), and in the same run the
//! HTTP ceiling of this machine: a bare axum handler that reads the body
//! and answers `201` without storing anything, and the disk's floor: the
//! same handler answering only once a group commit has `fdatasync`ed the
//! body to a plain file (see `ankusa_bench::floor`); and the bare handler
//! behind the edge's own connection loop, whose following of each
//! connection's bytes is then its only cost. Then open loop at 5 000/s.
//! Every ack is verified against the store afterwards.
//! `ANKUSA_BENCH_ONLY=open` runs the open loop alone, on a fresh store.
//!
//! `cargo run --release -p ankusa-bench --bin bench-edge`

use std::sync::Arc;
use std::time::Duration;

use ankusa::edge::{Edge, EdgeConfig};
use ankusa::queue::{Queue, QueueConfig};
use ankusa::runtime::{ComponentSource, EngineConfig, Runtime, SinkLabel, SinkSpec};
use ankusa::source::{SinkBinding, Source, StaticDirectory};
use ankusa_bench::load::{LoadConfig, LoadReport, run};
use ankusa_bench::{cpu, ratio, report};
use axum::response::IntoResponse;
use axum::routing::post;

const CONNECTIONS: usize = 64;
const SECONDS: u64 = 8;
const OPEN_LOOP_RATE: f64 = 5_000.0;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A closed-loop run and the CPU (server and load generator together) it
/// took per ack.
struct Measured {
    load: LoadReport,
    cpu_per_ack_us: f64,
}

async fn measured(addr: std::net::SocketAddr) -> anyhow::Result<Measured> {
    let before = cpu();
    let load = run(config(addr, None)).await?;
    let cpu_per_ack_us = (cpu() - before).as_secs_f64() * 1e6 / load.acks.len().max(1) as f64;
    Ok(Measured { load, cpu_per_ack_us })
}

/// A handler that reads the body and answers `201`, storing nothing.
fn bare_app() -> axum::Router {
    axum::Router::new().route(
        "/webhooks/{source}",
        post(|body: axum::body::Bytes| async move {
            let id = format!("{:x}", body.len());
            (axum::http::StatusCode::CREATED, axum::Json(serde_json::json!({ "status": "accepted", "id": id })))
        }),
    )
}

async fn bare_ceiling() -> anyhow::Result<Measured> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(async move { axum::serve(listener, bare_app()).await });
    let load = measured(addr).await?;
    server.abort();
    Ok(load)
}

/// The same handler behind the edge's connection loop: each connection's
/// bytes followed for framing and request-line limits (its cost alone).
async fn followed_ceiling() -> anyhow::Result<Measured> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let limits = ankusa::edge::Limits {
        header_timeout: Duration::from_secs(10),
        max_head: ankusa::edge::DEFAULT_MAX_HEADER_BYTES,
        max_line: ankusa::edge::DEFAULT_MAX_LINE,
    };
    let refuse = |_| axum::http::StatusCode::BAD_REQUEST.into_response();
    let server = tokio::spawn(ankusa::edge::serve_router(listener, bare_app(), limits, refuse, std::future::pending()));
    let load = measured(addr).await?;
    server.abort();
    Ok(load)
}

/// The fsync floor, measured like the others.
async fn fsync_floor(dir: &std::path::Path) -> anyhow::Result<Measured> {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let addr = ankusa_bench::floor::serve(dir, async move {
        let _ = stopped.await;
    })
    .await?;
    let load = measured(addr).await?;
    let _ = stop.send(());
    Ok(load)
}

fn config(addr: std::net::SocketAddr, rate: Option<f64>) -> LoadConfig {
    LoadConfig {
        addr,
        path: "/webhooks/bench".into(),
        connections: CONNECTIONS,
        rate,
        duration: Duration::from_secs(SECONDS),
        body_bytes: 1024,
    }
}

fn verify(queue: &Queue, reports: &[&LoadReport]) -> anyhow::Result<usize> {
    let stored: std::collections::HashMap<String, String> =
        queue.hooks(0, usize::MAX)?.into_iter().map(|h| (h.id, h.sha256)).collect();
    let mut checked = 0;
    for r in reports {
        for ack in &r.acks {
            match stored.get(&ack.id) {
                Some(sha) if *sha == ack.sha256 => checked += 1,
                Some(_) => anyhow::bail!("ack {} is stored with other bytes", ack.id),
                None => anyhow::bail!("ack {} is not stored", ack.id),
            }
        }
    }
    Ok(checked)
}

fn main() -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        // ANKUSA_BENCH_ONLY=open: the open loop alone, on a fresh store.
        let open_only = std::env::var("ANKUSA_BENCH_ONLY").is_ok_and(|v| v == "open");
        let ceiling = if open_only { None } else { Some(bare_ceiling().await?) };
        if let Some(ceiling) = &ceiling {
            ceiling.load.print("edge.bare_axum_201");
            report("edge.bare_axum_201.cpu_per_ack", ceiling.cpu_per_ack_us, "us");
            let followed = followed_ceiling().await?;
            followed.load.print("edge.bare_201_followed");
            report("edge.bare_201_followed.cpu_per_ack", followed.cpu_per_ack_us, "us");
            ratio("edge.followed_vs_bare_axum", followed.load.acks_per_sec(), ceiling.load.acks_per_sec());
            ratio("edge.followed_vs_bare_axum_cpu", ceiling.cpu_per_ack_us, followed.cpu_per_ack_us);
        }

        let dir = tempfile::tempdir()?;
        let floor = if open_only { None } else { Some(fsync_floor(dir.path()).await?) };
        if let (Some(floor), Some(ceiling)) = (&floor, &ceiling) {
            floor.load.print("edge.fsync_floor");
            report("edge.fsync_floor.cpu_per_ack", floor.cpu_per_ack_us, "us");
            ratio("edge.fsync_floor_vs_bare_axum", floor.load.acks_per_sec(), ceiling.load.acks_per_sec());
        }
        let queue = Arc::new(Queue::open(&dir.path().join("store"), QueueConfig::default())?);
        let runtime = Runtime::new(EngineConfig::default(), None)?;
        let log = runtime.load(SinkSpec::new(SinkLabel::new("bench", "log"), ComponentSource::Builtin("log".into())));
        let sink = Arc::new(log.await?);
        let mut directory = StaticDirectory::default();
        directory.add(Source {
            name: "bench".into(),
            tenant: "default".into(),
            verifier: None,
            on_verify_failure: Default::default(),
            dedupe: None,
            sinks: vec![
                SinkBinding { index: 0, sink: sink.clone(), ordering: None, transforms: Vec::new().into() },
                SinkBinding { index: 1, sink, ordering: None, transforms: Vec::new().into() },
            ],
            forward_headers: Default::default(),
        });
        let edge_config = EdgeConfig {
            rate_limits: ankusa::edge::RateLimits {
                default: ankusa::edge::rate::Rate { per_second: 1e9, burst: u32::MAX },
                ..Default::default()
            },
            ..EdgeConfig::default()
        };
        let edge = Arc::new(Edge::new(edge_config, Arc::new(directory), Some(&queue)));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(ankusa::edge::serve(listener, edge, std::future::pending()));

        let Some(ceiling) = ceiling else {
            let open = run(config(addr, Some(OPEN_LOOP_RATE))).await?;
            open.print("edge.open_loop_5000");
            report("edge.acks_verified_in_store", verify(&queue, &[&open])? as f64, "acks");
            return anyhow::Ok(());
        };
        let durable = measured(addr).await?;
        durable.load.print("edge.durable_disk");
        report("edge.durable_disk.cpu_per_ack", durable.cpu_per_ack_us, "us");
        ratio("edge.durable_vs_bare_axum", durable.load.acks_per_sec(), ceiling.load.acks_per_sec());
        // The same comparison in CPU per ack (bare over durable), which the
        // machine's other tenants disturb less than rates.
        ratio("edge.durable_vs_bare_axum_cpu", ceiling.cpu_per_ack_us, durable.cpu_per_ack_us);
        if let Some(floor) = &floor {
            ratio("edge.durable_vs_fsync_floor", durable.load.acks_per_sec(), floor.load.acks_per_sec());
        }
        let commits = queue.commit_stats();
        report("edge.durable_disk.hooks_per_commit", commits.hooks as f64 / commits.commits.max(1) as f64, "hooks");
        // The mean fsync a commit waited for under this load: every closed
        // loop round trip includes one, so the durable rate follows it.
        report("edge.durable_disk.fsync_mean", commits.sync_micros as f64 / commits.commits.max(1) as f64, "us");

        let open = run(config(addr, Some(OPEN_LOOP_RATE))).await?;
        open.print("edge.open_loop_5000");

        let checked = verify(&queue, &[&durable.load, &open])?;
        report("edge.acks_verified_in_store", checked as f64, "acks");
        anyhow::Ok(())
    })
}
