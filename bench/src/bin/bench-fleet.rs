//! The fleet (`wal.mode: fleet`) on this machine, everything on loopback:
//! - ingest: 64 keep-alive connections for 8 s against one node in `disk`
//!   mode (the baseline), then split over two fleet nodes on a 3-server
//!   JetStream cluster (R3); acks/s, p50/p99, the hooks per JetStream
//!   publish round the nodes report, and the nodes' CPU per hook from the
//!   first post until every acked hook is delivered (ingest, log, dispatch
//!   and delivery; the NATS servers' CPU is not in it), and per ack over
//!   the load's seconds alone (a `disk` node defers deliveries then, so
//!   that ratio overstates what a fleet hook costs);
//! - JetStream alone, the floor under fleet ingest: the same 3 servers
//!   taking 1 KiB messages with message ids from 64 publishers (on two
//!   connections, as two nodes), each awaiting its ack before the next;
//! - takeover: a node holding a 10 000-hook backlog it does not deliver
//!   (ingest only) is killed with SIGKILL; the time until a peer delivers
//!   the first of those hooks, and until it has delivered them all; then
//!   the same with a NATS server killed at the same moment.
//!
//! `cargo build --release --workspace --bins && cargo run --release -p ankusa-bench --bin bench-fleet [packaged|current]`
//! (the NATS servers: Debian's, the default, or a current release;
//! `ANKUSA_BENCH_LOGS=DIR` keeps each takeover's taker's log there).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ankusa_bench::load::{LoadConfig, run};
use ankusa_bench::{Receiver, cpu_of_process, ratio, report, start_node};

use ankusa_tests::nats_cluster::{Cluster, NatsServer};

const CONNECTIONS: usize = 64;
const SECONDS: u64 = 8;
const BACKLOG: usize = 10_000;
const LEASE_TTL_MS: u64 = 2_000;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn yaml(receiver: &Receiver, wal: &str, roles: &str) -> String {
    format!(
        "node: {{roles: [{roles}]}}
{wal}
# The default tenant limit (5 000/s) would refuse the load.
rate_limits: {{default: {{rate: 1000000, burst: 1000000}}}}
sinks:
  out:
    component: http
    options: {{url: \"{url}\"}}
    allow: [\"http://{addr}\"]
sources:
  bench:
    sinks: [out]
",
        url = receiver.url(),
        addr = receiver.addr,
    )
}

fn fleet_wal(cluster: &Cluster, stream: &str, node: &str) -> String {
    format!(
        "wal: {{mode: fleet}}\nfleet: {{nats: {}, stream: {stream}, replicas: 3, node_id: {node}, lease_ttl_ms: {LEASE_TTL_MS}}}",
        cluster.yaml_urls()
    )
}

fn load_config(addr: SocketAddr, connections: usize) -> LoadConfig {
    LoadConfig {
        addr,
        path: "/webhooks/bench".into(),
        connections,
        rate: None,
        duration: Duration::from_secs(SECONDS),
        body_bytes: 1024,
    }
}

/// What `pids` and the receiver stood at before a load, to measure it by.
struct Before {
    cpu: Duration,
    received: u64,
}

impl Before {
    fn now(pids: &[u32], receiver: &Receiver) -> Before {
        Before { cpu: cpu_of(pids), received: receiver.received.load(Ordering::Relaxed) }
    }
}

/// User + system CPU of `pids` so far.
fn cpu_of(pids: &[u32]) -> Duration {
    pids.iter().map(|pid| cpu_of_process(*pid)).sum()
}

/// Report, under `name`, what `pids` spent on `load` since `before`: the
/// share of its acks delivered while it ran, the CPU per ack over the load
/// alone, then, once every acked hook is delivered, the CPU per hook from
/// ingest through delivery. Both CPU figures, in µs.
async fn cpu_figures(
    name: &str,
    pids: &[u32],
    before: Before,
    receiver: &Receiver,
    load: &ankusa_bench::load::LoadReport,
) -> anyhow::Result<(f64, f64)> {
    let acked = load.acks.len();
    let per = |cpu: Duration| cpu.saturating_sub(before.cpu).as_secs_f64() * 1e6 / acked.max(1) as f64;
    let delivered = || receiver.received.load(Ordering::Relaxed) - before.received;
    ratio(&format!("{name}.delivered_during_load_vs_acked"), delivered() as f64, acked as f64);
    let during_load = per(cpu_of(pids));
    report(&format!("{name}.cpu_per_ack_during_load"), during_load, "µs");
    let started = Instant::now();
    while delivered() < acked as u64 {
        anyhow::ensure!(started.elapsed() < Duration::from_secs(300), "acked hooks were not delivered within 300 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let per_hook = per(cpu_of(pids));
    report(&format!("{name}.cpu_per_hook"), per_hook, "µs");
    Ok((during_load, per_hook))
}

/// Post `count` hooks to `addr` from 32 connections; how many were acked.
async fn post(addr: SocketAddr, count: usize) -> usize {
    let acked = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for w in 0..32 {
        let acked = acked.clone();
        tasks.push(tokio::spawn(async move {
            let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http::<String>();
            for i in (w..count).step_by(32) {
                let request = http::Request::post(format!("http://{addr}/webhooks/bench"))
                    .header("content-type", "application/json")
                    .body(format!("{{\"backlog\":{i}}}"))
                    .expect("request");
                if let Ok(response) = client.request(request).await
                    && response.status().as_u16() == 201
                {
                    acked.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
    acked.load(Ordering::Relaxed)
}

/// A node holding a backlog it does not deliver (ingest only) is killed,
/// with NATS server `kill_server` at the same moment when given (started
/// again once the backlog is delivered); the time until its peer delivers
/// the first of those hooks and all of them, under `name`.
async fn takeover(
    bin: &std::path::Path,
    dir: &std::path::Path,
    receiver: &Receiver,
    cluster: &mut Cluster,
    name: &str,
    kill_server: Option<usize>,
) -> anyhow::Result<()> {
    let stream = name.replace(['.', '_'], "-").to_uppercase();
    let (holder, taker) = (format!("{stream}-c"), format!("{stream}-d"));
    let roles = "ingest, dispatch, admin";
    let c =
        start_node(bin, dir, &holder, &yaml(receiver, &fleet_wal(cluster, &stream, &holder), "ingest, admin")).await;
    let d = start_node(bin, dir, &taker, &yaml(receiver, &fleet_wal(cluster, &stream, &taker), roles)).await;
    let acked = post(c.ingest, BACKLOG).await;
    anyhow::ensure!(acked == BACKLOG, "only {acked} of {BACKLOG} backlog hooks acked");
    let before = receiver.received.load(Ordering::Relaxed) as usize;
    let killed = Instant::now();
    c.kill();
    if let Some(server) = kill_server {
        cluster.kill_server(server);
    }
    let mut first = None;
    let all = loop {
        let delivered = receiver.received.load(Ordering::Relaxed) as usize - before;
        if delivered > 0 && first.is_none() {
            first = Some(killed.elapsed());
        }
        if delivered >= BACKLOG {
            break killed.elapsed();
        }
        anyhow::ensure!(killed.elapsed() < Duration::from_secs(300), "the backlog was not delivered: {delivered}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    let first = first.unwrap_or(all);
    report(&format!("{name}.lease_ttl"), LEASE_TTL_MS as f64, "ms");
    report(&format!("{name}.first_delivery"), first.as_secs_f64() * 1e3, "ms");
    report(&format!("{name}.backlog_delivered"), all.as_secs_f64() * 1e3, "ms");
    report(&format!("{name}.backlog_rate"), BACKLOG as f64 / (all - first).as_secs_f64().max(1e-3), "hooks/s");
    ratio(&format!("{name}.first_delivery_vs_lease_ttl"), first.as_secs_f64() * 1e3, LEASE_TTL_MS as f64);
    let (_, status) = d.admin("GET", "/v1/fleet", None, None).await;
    if let Some(taken) = status["nodes"].as_array().into_iter().flatten().find(|n| n["node"] == holder.as_str()) {
        let t = &taken["taken"];
        let imported = t["imported"].as_f64().unwrap_or(0.0);
        report(&format!("{name}.imported"), imported, "hooks");
        let import_ms = t["done_ms"].as_f64().unwrap_or(0.0) - t["at_ms"].as_f64().unwrap_or(0.0);
        report(&format!("{name}.import"), import_ms, "ms");
        report(&format!("{name}.import_rate"), imported * 1e3 / import_ms.max(1.0), "hooks/s");
    }
    let duplicates = receiver.received.load(Ordering::Relaxed) as usize - before - BACKLOG;
    report(&format!("{name}.extra_deliveries"), duplicates as f64, "deliveries");
    // The taker's log, to break a slow takeover down.
    if let Some(logs) = std::env::var_os("ANKUSA_BENCH_LOGS") {
        let path = std::path::Path::new(&logs).join(format!("{name}.taker.log"));
        std::fs::write(&path, d.log())?;
        println!("# the taker's log: {}", path.display());
    }
    d.kill();
    if let Some(server) = kill_server {
        cluster.start_server(server);
        cluster.wait_ready(3).await;
    }
    Ok(())
}

/// Acks a second the cluster gives 64 publishers of 1 KiB messages with
/// message ids on an R3 stream, each publisher awaiting its ack before
/// its next message, on two connections: what the fleet's intake asks of
/// JetStream, with no node in the way.
async fn jetstream_alone(cluster: &Cluster) -> anyhow::Result<f64> {
    use async_nats::jetstream::message::PublishMessage as Publish;
    let setup = cluster.client().await;
    setup
        .create_stream(async_nats::jetstream::stream::Config {
            name: "FLOOR".into(),
            subjects: vec!["floor.>".into()],
            num_replicas: 3,
            duplicate_window: Duration::from_secs(3600),
            ..Default::default()
        })
        .await?;
    let acked = Arc::new(AtomicUsize::new(0));
    let deadline = Instant::now() + Duration::from_secs(SECONDS);
    let payload = bytes::Bytes::from(vec![b'x'; 1024]);
    let mut tasks = Vec::new();
    for connection in 0..2 {
        let js = cluster.client().await;
        for p in 0..CONNECTIONS / 2 {
            let (js, acked, payload) = (js.clone(), acked.clone(), payload.clone());
            tasks.push(tokio::spawn(async move {
                let mut n = 0u64;
                while Instant::now() < deadline {
                    n += 1;
                    let publish = Publish::build().payload(payload.clone()).message_id(format!("{connection}.{p}.{n}"));
                    if let Ok(ack) = js.send_publish(format!("floor.{connection}"), publish).await
                        && ack.await.is_ok()
                    {
                        acked.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
    }
    for task in tasks {
        let _ = task.await;
    }
    let _ = setup.delete_stream("FLOOR").await;
    Ok(acked.load(Ordering::Relaxed) as f64 / SECONDS as f64)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let server = match std::env::args().nth(1).as_deref() {
        None | Some("packaged") => NatsServer::Packaged,
        Some("current") => NatsServer::Current,
        Some(other) => anyhow::bail!("servers: packaged or current, not {other}"),
    };
    println!("# nats-server {}", server.version());
    let bin = ankusa_bench::ankusa_bin(None)?;
    let receiver = Receiver::start()?;
    let dir = tempfile::tempdir()?;

    // Baseline: one node, disk mode, the same load.
    let disk =
        start_node(&bin, dir.path(), "disk", &yaml(&receiver, "wal: {mode: disk}", "ingest, dispatch, admin")).await;
    let before = Before::now(&[disk.pid()], &receiver);
    let baseline = run(load_config(disk.ingest, CONNECTIONS)).await?;
    baseline.print("fleet.baseline_disk");
    let (disk_window, disk_cpu) =
        cpu_figures("fleet.baseline_disk", &[disk.pid()], before, &receiver, &baseline).await?;
    disk.kill();

    let mut cluster = Cluster::start_on(3, server).await;
    let roles = "ingest, dispatch, admin";
    let a = start_node(&bin, dir.path(), "a", &yaml(&receiver, &fleet_wal(&cluster, "INGEST", "a"), roles)).await;
    let b = start_node(&bin, dir.path(), "b", &yaml(&receiver, &fleet_wal(&cluster, "INGEST", "b"), roles)).await;
    let pids = [a.pid(), b.pid()];
    let before = Before::now(&pids, &receiver);
    let (on_a, on_b) =
        tokio::join!(run(load_config(a.ingest, CONNECTIONS / 2)), run(load_config(b.ingest, CONNECTIONS / 2)));
    let fleet = on_a?.merge(on_b?);
    fleet.print("fleet.ingest");
    ratio("fleet.ingest_vs_disk", fleet.acks_per_sec(), baseline.acks_per_sec());
    let (fleet_window, fleet_cpu) = cpu_figures("fleet.ingest", &pids, before, &receiver, &fleet).await?;
    ratio("fleet.cpu_per_ack_during_load_vs_disk", fleet_window, disk_window);
    ratio("fleet.cpu_per_hook_vs_disk", fleet_cpu, disk_cpu);
    let mut rounds = 0.0;
    let mut hooks = 0.0;
    let mut round_us = 0.0;
    for node in [&a, &b] {
        let (_, status) = node.admin("GET", "/v1/fleet", None, None).await;
        let publish = &status["publish"];
        rounds += publish["rounds"].as_f64().unwrap_or(0.0);
        hooks += publish["hooks"].as_f64().unwrap_or(0.0);
        round_us += publish["mean_round_us"].as_f64().unwrap_or(0.0) * publish["rounds"].as_f64().unwrap_or(0.0);
    }
    report("fleet.hooks_per_publish_round", hooks / rounds.max(1.0), "hooks");
    report("fleet.publish_round_mean", round_us / rounds.max(1.0) / 1e3, "ms");
    a.kill();
    b.kill();

    let floor = jetstream_alone(&cluster).await?;
    report("fleet.jetstream_alone", floor, "acks/s");
    ratio("fleet.jetstream_alone_vs_disk", floor, baseline.acks_per_sec());
    ratio("fleet.ingest_vs_jetstream_alone", fleet.acks_per_sec(), floor);

    takeover(&bin, dir.path(), &receiver, &mut cluster, "fleet.takeover", None).await?;
    // The same with a NATS server killed at the moment of the node's
    // kill: the stream and the bucket may lose their leader as well.
    takeover(&bin, dir.path(), &receiver, &mut cluster, "fleet.takeover_server_killed", Some(0)).await?;
    Ok(())
}
