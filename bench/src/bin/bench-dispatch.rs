//! Dispatch end to end: a 100 000-hook backlog drained through the no-op
//! sink and through the http sink to a local keep-alive receiver, and
//! steady ingest → store → dispatch → sink with the load generator.
//!
//! The WASM share of CPU is estimated in the same run: the CPU a warm
//! no-op delivery costs when called directly, over the process CPU per
//! delivery while draining.
//!
//! `cargo run --release -p ankusa-bench --bin bench-dispatch`

use std::sync::Arc;
use std::time::{Duration, Instant};

use ankusa::dispatch::{DispatchConfig, Dispatcher};
use ankusa::edge::{Edge, EdgeConfig};
use ankusa::queue::{Entry, Envelope, Queue, QueueConfig};
use ankusa::runtime::builtin::artifact_dir;
use ankusa::runtime::{ComponentSource, EngineConfig, Runtime, Sink, SinkLabel, SinkSpec};
use ankusa::sinktest::TestHook;
use ankusa::source::{SinkBinding, Source, StaticDirectory};
use ankusa_bench::load::{LoadConfig, run};
use ankusa_bench::{Receiver, cpu, ratio, report};

const BACKLOG: usize = 100_000;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn directory(name: &str, sink: Arc<Sink>) -> Arc<StaticDirectory> {
    let mut directory = StaticDirectory::default();
    directory.add(Source {
        name: name.into(),
        tenant: "default".into(),
        verifier: None,
        on_verify_failure: Default::default(),
        dedupe: None,
        sinks: vec![SinkBinding { index: 0, sink }],
        forward_headers: Default::default(),
    });
    Arc::new(directory)
}

async fn fill(queue: &Queue, source: &str, sink_name: &str) -> anyhow::Result<()> {
    for chunk in 0..BACKLOG / 500 {
        let entries = (0..500)
            .map(|i| {
                let envelope = Envelope::new(
                    format!("hook-{chunk}-{i}"),
                    source.into(),
                    "default".into(),
                    1_700_000_000_000,
                    vec![b'x'; 1024],
                );
                Entry { envelope, sinks: vec![(0, sink_name.to_string())] }
            })
            .collect();
        queue.enqueue(entries, None).await?;
    }
    Ok(())
}

async fn drained(queue: &Queue) -> anyhow::Result<()> {
    while queue.counter(None, "pending")? + queue.counter(None, "inflight")? > 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}

/// Drain a backlog through `sink`; returns (deliveries/s, CPU per delivery).
async fn drain(name: &str, sink: Arc<Sink>) -> anyhow::Result<(f64, Duration)> {
    let dir = tempfile::tempdir()?;
    let queue = Arc::new(Queue::open(dir.path(), QueueConfig::default())?);
    fill(&queue, name, &sink.label().sink).await?;
    let cpu_before = cpu();
    let started = Instant::now();
    let dispatcher = Dispatcher::start(queue.clone(), directory(name, sink), DispatchConfig::default());
    drained(&queue).await?;
    let elapsed = started.elapsed();
    let cpu_per = (cpu() - cpu_before) / BACKLOG as u32;
    dispatcher.stop().await;
    let dead = queue.counter(None, "dead")?;
    anyhow::ensure!(dead == 0, "{dead} deliveries failed");
    let rate = BACKLOG as f64 / elapsed.as_secs_f64();
    report(&format!("dispatch.{name}.drain_100k"), elapsed.as_secs_f64(), "s");
    report(&format!("dispatch.{name}.deliveries_per_sec"), rate, "deliveries/s");
    report(&format!("dispatch.{name}.cpu_per_delivery"), cpu_per.as_secs_f64() * 1e6, "us");
    Ok((rate, cpu_per))
}

/// CPU of a warm no-op delivery called directly (guest + the call).
async fn direct_noop_cpu(sink: &Sink) -> anyhow::Result<Duration> {
    let hook = TestHook::new().body(vec![b'x'; 1024]).build();
    for _ in 0..5_000 {
        sink.deliver(&hook, 1).await;
    }
    let before = cpu();
    let calls = 100_000u32;
    for _ in 0..calls {
        sink.deliver(&hook, 1).await;
    }
    Ok((cpu() - before) / calls)
}

fn main() -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        let runtime = Runtime::new(EngineConfig::default(), None)?;
        let mut noop_spec =
            SinkSpec::new(SinkLabel::new("noop", "noop"), ComponentSource::Path(artifact_dir().join("noop.wasm")));
        noop_spec.limits.max_uses = u64::MAX;
        let noop = Arc::new(runtime.load(noop_spec).await?);
        let (noop_rate, noop_cpu) = drain("noop", noop.clone()).await?;

        let wasm_cpu = direct_noop_cpu(&noop).await?;
        report("dispatch.noop.wasm_call_cpu", wasm_cpu.as_secs_f64() * 1e6, "us");
        ratio("dispatch.noop.wasm_share_of_cpu", wasm_cpu.as_secs_f64(), noop_cpu.as_secs_f64());

        let receiver = Receiver::start()?;
        let mut http_spec = SinkSpec::new(SinkLabel::new("http", "http"), ComponentSource::Builtin("http".into()));
        http_spec.options = serde_json::json!({ "url": format!("http://{}/in", receiver.addr) });
        http_spec.allow = vec![format!("http://{}", receiver.addr)];
        let http = Arc::new(runtime.load(http_spec).await?);
        let (http_rate, _) = drain("http", http).await?;
        ratio("dispatch.http_vs_noop.deliveries_per_sec", http_rate, noop_rate);

        // Steady state: the load generator → edge → store → dispatch → no-op.
        let dir = tempfile::tempdir()?;
        let queue = Arc::new(Queue::open(dir.path(), QueueConfig::default())?);
        let directory = directory("noop", noop);
        let dispatcher = Dispatcher::start(queue.clone(), directory.clone(), DispatchConfig::default());
        let edge_config = EdgeConfig {
            tenant_rate: ankusa::edge::rate::Rate { per_second: 1e9, burst: u32::MAX },
            ..EdgeConfig::default()
        };
        let edge = Arc::new(Edge::new(edge_config, directory, Some(queue.clone())));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(ankusa::edge::serve(listener, edge, std::future::pending()));
        let started = Instant::now();
        let load = run(LoadConfig {
            addr,
            path: "/webhooks/noop".into(),
            connections: 64,
            rate: None,
            duration: Duration::from_secs(8),
            body_bytes: 1024,
        })
        .await?;
        drained(&queue).await?;
        let elapsed = started.elapsed().as_secs_f64();
        report("dispatch.end_to_end.acks_per_sec", load.acks_per_sec(), "acks/s");
        report("dispatch.end_to_end.delivered_per_sec", load.acks.len() as f64 / elapsed, "deliveries/s");
        dispatcher.stop().await;
        anyhow::Ok(())
    })
}
