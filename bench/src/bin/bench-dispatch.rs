//! Dispatch end to end:
//! - a 100 000-hook backlog drained through the no-op sink, then refilled
//!   and drained again on the same store, then once more after the store
//!   was closed and opened again (a drain must not slow down on a store
//!   that has delivered before);
//! - the same backlog over 1 000 keys of an ordered binding (against the
//!   unordered drain), and 5 000 hooks of one key (one at a time, against
//!   a direct call of the sink);
//! - the same backlog through the http sink to a local keep-alive receiver;
//! - the cost of a transform: the backlog through the no-op and the http
//!   sink with no transform, a `jsonfilter` that keeps every hook, a
//!   `reshape`, and the Python transform of `sink new --kind transform`,
//!   in the same run; and a direct call of each transform;
//! - durable ingest alone (the baseline: CPU per ack), then ingest and
//!   dispatch at once, through the no-op and the http sink: deliveries/s
//!   while ingest runs, against the ingest rate of the same run.
//!
//! The WASM share of CPU is estimated in the same run: the CPU a warm
//! no-op delivery costs when called directly, over the process CPU per
//! delivery while draining. The load generator runs on threads of its own
//! (`bench-load`), whose CPU is left out of every per-ack figure.
//!
//! `cargo run --release -p ankusa-bench --bin bench-dispatch`

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ankusa::authoring::build;
use ankusa::authoring::project::{Kind, Language, Project};
use ankusa::authoring::template;
use ankusa::authoring::tools::ToolCache;
use ankusa::dispatch::{DispatchConfig, Dispatcher};
use ankusa::edge::{Edge, EdgeConfig};
use ankusa::queue::{Entry, Envelope, Line, Queue, QueueConfig, now_ms};
use ankusa::runtime::builtin::artifact_dir;
use ankusa::runtime::{ComponentSource, EngineConfig, Runtime, Sink, SinkLabel, SinkSpec, Transform, TransformSpec};
use ankusa::sinktest::TestHook;
use ankusa::source::{SinkBinding, Source, StaticDirectory};
use ankusa_bench::load::{LoadConfig, LoadReport, run};
use ankusa_bench::{Receiver, cpu, cpu_of_threads, ratio, report};

const BACKLOG: usize = 100_000;
/// Hooks of the single-key ordered drain (one delivery at a time).
const ONE_KEY_HOOKS: usize = 5_000;
const LOAD_THREADS: &str = "bench-load";
const INGEST_SECONDS: u64 = 8;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn directory(name: &str, sink: Arc<Sink>) -> Arc<StaticDirectory> {
    transformed(name, sink, &[])
}

/// A source `name` bound to `sink` through `transforms`.
fn transformed(name: &str, sink: Arc<Sink>, transforms: &[Arc<Transform>]) -> Arc<StaticDirectory> {
    let mut directory = StaticDirectory::default();
    directory.add(Source {
        name: name.into(),
        tenant: "default".into(),
        verifier: None,
        on_verify_failure: Default::default(),
        dedupe: None,
        sinks: vec![SinkBinding { index: 0, sink, ordering: None, transforms: transforms.to_vec().into() }],
        forward_headers: Default::default(),
    });
    Arc::new(directory)
}

/// A 1 KiB JSON body, an invoice event (what the transforms read).
fn body() -> Vec<u8> {
    let mut body = br#"{"type":"invoice.paid","data":{"amount":1200,"pad":""}}"#.to_vec();
    let pad = 1024 - body.len();
    body.splice(body.len() - 3..body.len() - 3, std::iter::repeat_n(b'x', pad));
    body
}

/// How a backlog's hooks are keyed: not at all, or over this many keys
/// of an ordered binding (hook `n` has key `n % keys`).
#[derive(Clone, Copy)]
enum Keys {
    Unordered,
    Ordered(usize),
}

async fn fill(queue: &Queue, source: &str, sink_name: &str, round: usize) -> anyhow::Result<()> {
    fill_keyed(queue, source, sink_name, round, BACKLOG, Keys::Unordered).await
}

async fn fill_keyed(
    queue: &Queue,
    source: &str,
    sink_name: &str,
    round: usize,
    hooks: usize,
    keys: Keys,
) -> anyhow::Result<()> {
    for chunk in 0..hooks / 500 {
        let entries = (0..500)
            .map(|i| {
                let envelope = Envelope::new(
                    format!("hook-{round}-{chunk}-{i}"),
                    source.into(),
                    "default".into(),
                    now_ms(),
                    body(),
                );
                let mut entry = Entry::new(envelope, vec![(0, sink_name.to_string())]);
                if let Keys::Ordered(keys) = keys {
                    let key = format!("customer-{}", (chunk * 500 + i) % keys);
                    entry.lines.push((0, Line { key, hold: false }));
                }
                entry
            })
            .collect();
        queue.intake().enqueue(entries, None).await?;
    }
    Ok(())
}

async fn undelivered(queue: &Queue) -> anyhow::Result<i64> {
    Ok(queue.counter(None, "pending")? + queue.counter(None, "inflight")?)
}

async fn drained(queue: &Queue) -> anyhow::Result<()> {
    while undelivered(queue).await? > 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}

/// A drain's rate and CPU per delivery.
struct Drain {
    rate: f64,
    cpu_per: Duration,
}

/// Fill a backlog on `queue` and drain it through `sink`.
async fn drain(queue: &Arc<Queue>, name: &str, sink: &Arc<Sink>, round: usize) -> anyhow::Result<Drain> {
    drain_through(queue, name, sink, &[], round).await
}

/// Fill a backlog on `queue` and drain it through `transforms` and `sink`.
async fn drain_through(
    queue: &Arc<Queue>,
    name: &str,
    sink: &Arc<Sink>,
    transforms: &[Arc<Transform>],
    round: usize,
) -> anyhow::Result<Drain> {
    fill(queue, name, &sink.label().sink, round).await?;
    let cpu_before = cpu();
    let started = Instant::now();
    let directory = transformed(name, sink.clone(), transforms);
    let dispatcher = Dispatcher::start(queue.deliveries(), directory, DispatchConfig::default())?;
    drained(queue).await?;
    let elapsed = started.elapsed();
    let cpu_per = (cpu() - cpu_before) / BACKLOG as u32;
    dispatcher.stop().await;
    let dead = queue.counter(None, "dead")?;
    anyhow::ensure!(dead == 0, "{dead} deliveries failed");
    Ok(Drain { rate: BACKLOG as f64 / elapsed.as_secs_f64(), cpu_per })
}

/// Fill `hooks` over `keys` of an ordered binding on a fresh store and
/// drain them through `sink`.
async fn ordered_drain(name: &str, sink: &Arc<Sink>, hooks: usize, keys: usize) -> anyhow::Result<Drain> {
    let dir = tempfile::tempdir()?;
    let queue = open(dir.path())?;
    fill_keyed(&queue, name, &sink.label().sink, 0, hooks, Keys::Ordered(keys)).await?;
    let cpu_before = cpu();
    let started = Instant::now();
    let dispatcher = Dispatcher::start(queue.deliveries(), directory(name, sink.clone()), DispatchConfig::default())?;
    drained(&queue).await?;
    let elapsed = started.elapsed();
    let cpu_per = (cpu() - cpu_before) / hooks as u32;
    dispatcher.stop().await;
    close(queue).await?;
    Ok(Drain { rate: hooks as f64 / elapsed.as_secs_f64(), cpu_per })
}

fn print_drain(name: &str, drain: &Drain) {
    report(&format!("{name}.deliveries_per_sec"), drain.rate, "deliveries/s");
    report(&format!("{name}.cpu_per_delivery"), drain.cpu_per.as_secs_f64() * 1e6, "us");
}

/// Close the queue once nothing else holds it (the settler lets go once
/// its last outcome is written).
async fn close(mut queue: Arc<Queue>) -> anyhow::Result<()> {
    for _ in 0..500 {
        match Arc::try_unwrap(queue) {
            Ok(alone) => {
                alone.close().await;
                return Ok(());
            }
            Err(shared) => queue = shared,
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    anyhow::bail!("the queue is still held after 5 s")
}

fn open(dir: &Path) -> anyhow::Result<Arc<Queue>> {
    let queue = Queue::open(dir, QueueConfig::default())?;
    queue.recover_inflight(now_ms())?;
    Ok(Arc::new(queue))
}

/// Drain, refill and drain on the same store, then again after a restart.
async fn drains_on_one_store(noop: &Arc<Sink>) -> anyhow::Result<Drain> {
    let dir = tempfile::tempdir()?;
    let queue = open(dir.path())?;
    let first = drain(&queue, "noop", noop, 0).await?;
    print_drain("dispatch.noop.drain_100k", &first);
    let refill = drain(&queue, "noop", noop, 1).await?;
    print_drain("dispatch.noop.refill_100k", &refill);
    close(queue).await?;
    let queue = open(dir.path())?;
    let restarted = drain(&queue, "noop", noop, 2).await?;
    print_drain("dispatch.noop.after_restart_100k", &restarted);
    ratio("dispatch.noop.refill_vs_first_drain", refill.rate, first.rate);
    ratio("dispatch.noop.after_restart_vs_first_drain", restarted.rate, first.rate);
    close(queue).await?;
    Ok(first)
}

/// The transforms a benchmark runs: the shipped `jsonfilter`, keeping
/// every invoice (so every hook still reaches the sink), and `reshape`,
/// picking, setting and writing the body again; and the Python transform
/// `ankusa sink new --kind transform --lang python` writes (it reads the
/// body and sets a header), built with componentize-py.
async fn transforms(runtime: &Runtime, work: &Path) -> anyhow::Result<Vec<(&'static str, Arc<Transform>)>> {
    let python = python_transform(work)?;
    let mut loaded = Vec::new();
    for (name, component, options) in [
        (
            "jsonfilter",
            ComponentSource::Builtin("jsonfilter".into()),
            serde_json::json!({"keep": {"pointer": "/type", "prefix": "invoice."}}),
        ),
        (
            "reshape",
            ComponentSource::Builtin("reshape".into()),
            serde_json::json!({"pick": ["/type", "/data/amount"], "set": [{"pointer": "/via", "value": "ankusa"}]}),
        ),
        ("python", ComponentSource::Path(python), serde_json::json!({"drop_when": "no such text"})),
    ] {
        let mut spec = TransformSpec::new(name, component);
        spec.options = options;
        spec.limits.max_uses = u64::MAX;
        loaded.push((name, Arc::new(runtime.load_transform(spec).await?)));
    }
    Ok(loaded)
}

/// The Python transform of the authoring kit's template, built in `work`.
fn python_transform(work: &Path) -> anyhow::Result<std::path::PathBuf> {
    let dir = work.join("python-transform");
    template::create(&dir, "tagger", Language::Python, Kind::Transform)?;
    let project = Project::open(&dir)?;
    let built = build::build(&project, &ToolCache::new(None), &|line| eprintln!("{line}"))?;
    Ok(built.wasm)
}

/// CPU of one warm call of `transform` on the benchmark's hook.
async fn direct_transform_cpu(transform: &Transform) -> anyhow::Result<Duration> {
    let hook = TestHook::new().body(body()).build();
    for _ in 0..2_000 {
        transform.apply(&mut hook.clone()).await.map_err(|f| anyhow::anyhow!("{f}"))?;
    }
    let calls = 20_000;
    let before = cpu();
    for _ in 0..calls {
        transform.apply(&mut hook.clone()).await.map_err(|f| anyhow::anyhow!("{f}"))?;
    }
    Ok((cpu() - before) / calls)
}

/// The backlog through each sink with no transform and with each one, on
/// fresh stores, in this run; and each transform called directly.
async fn transform_costs(runtime: &Runtime, sinks: &[(&str, &Arc<Sink>)]) -> anyhow::Result<()> {
    let work = tempfile::tempdir()?;
    let transforms = transforms(runtime, work.path()).await?;
    for (name, transform) in &transforms {
        let direct = direct_transform_cpu(transform).await?;
        report(&format!("transform.{name}.call_cpu"), direct.as_secs_f64() * 1e6, "us");
    }
    for (sink_name, sink) in sinks {
        let mut runs = vec![("none", Vec::new())];
        runs.extend(transforms.iter().map(|(name, t)| (*name, vec![t.clone()])));
        let mut baseline = None;
        for (transform, chain) in runs {
            let dir = tempfile::tempdir()?;
            let queue = open(dir.path())?;
            let drained = drain_through(&queue, sink_name, sink, &chain, 0).await?;
            close(queue).await?;
            print_drain(&format!("dispatch.{sink_name}.transform_{transform}.drain_100k"), &drained);
            match &baseline {
                None => baseline = Some(drained),
                Some(none) => {
                    ratio(&format!("dispatch.{sink_name}.transform_{transform}_vs_none"), drained.rate, none.rate);
                    let added = drained.cpu_per.as_secs_f64() - none.cpu_per.as_secs_f64();
                    report(&format!("dispatch.{sink_name}.transform_{transform}.added_cpu"), added * 1e6, "us");
                }
            }
        }
    }
    Ok(())
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

/// The closed-loop load generator (64 connections, 1 KiB bodies) on a
/// runtime of its own; returns what it measured and the CPU its threads
/// took (read before they exit).
fn load(addr: std::net::SocketAddr, path: &str) -> anyhow::Result<(LoadReport, Duration)> {
    let config = LoadConfig {
        addr,
        path: path.into(),
        connections: 64,
        rate: None,
        duration: Duration::from_secs(INGEST_SECONDS),
        body_bytes: 1024,
    };
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).thread_name(LOAD_THREADS).enable_all().build()?;
    let report = rt.block_on(run(config))?;
    Ok((report, cpu_of_threads(LOAD_THREADS)))
}

/// What one ingest run measured.
struct Ingest {
    acks_per_sec: f64,
    /// Server CPU per ack (the load generator's left out).
    cpu_per_ack: Duration,
    /// Hooks delivered while ingest ran, per second.
    delivered_per_sec: f64,
    /// Hooks acked and not yet delivered when ingest stopped.
    backlog: i64,
}

/// Ingest for [`INGEST_SECONDS`] into a fresh store, with dispatch through
/// `sink` running alongside (or not), and drain what is left.
async fn ingest(name: &str, sink: &Arc<Sink>, dispatching: bool) -> anyhow::Result<Ingest> {
    let dir = tempfile::tempdir()?;
    let queue = open(dir.path())?;
    let directory = directory(name, sink.clone());
    let dispatcher = match dispatching {
        true => Some(Dispatcher::start(queue.deliveries(), directory.clone(), DispatchConfig::default())?),
        false => None,
    };
    let edge_config = EdgeConfig {
        rate_limits: ankusa::edge::RateLimits {
            default: ankusa::edge::rate::Rate { per_second: 1e9, burst: u32::MAX },
            ..Default::default()
        },
        ..EdgeConfig::default()
    };
    let edge = Arc::new(Edge::new(edge_config, directory, Some(&queue)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(ankusa::edge::serve(listener, edge, std::future::pending()));
    let cpu_before = cpu();
    let path = format!("/webhooks/{name}");
    let (report, load_cpu) = tokio::task::spawn_blocking(move || load(addr, &path)).await??;
    let server_cpu = (cpu() - cpu_before).saturating_sub(load_cpu);
    let acked = report.acks.len() as i64;
    let backlog = undelivered(&queue).await?;
    let delivered_per_sec = (acked - backlog) as f64 / INGEST_SECONDS as f64;
    if let Some(dispatcher) = dispatcher {
        drained(&queue).await?;
        dispatcher.stop().await;
    }
    server.abort();
    let _ = server.await;
    close(queue).await?;
    Ok(Ingest {
        acks_per_sec: report.acks_per_sec(),
        cpu_per_ack: server_cpu / acked.max(1) as u32,
        delivered_per_sec: if dispatching { delivered_per_sec } else { 0.0 },
        backlog,
    })
}

/// The http sink, posting to `receiver`.
fn http_spec(receiver: &Receiver) -> SinkSpec {
    let mut spec = SinkSpec::new(SinkLabel::new("http", "http"), ComponentSource::Builtin("http".into()));
    spec.options = serde_json::json!({ "url": format!("http://{}/in", receiver.addr) });
    spec.egress.allow = vec![format!("http://{}", receiver.addr)];
    spec
}

fn main() -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        let runtime = Runtime::new(EngineConfig::default(), None)?;
        let mut noop_spec =
            SinkSpec::new(SinkLabel::new("noop", "noop"), ComponentSource::Path(artifact_dir().join("noop.wasm")));
        noop_spec.limits.max_uses = u64::MAX;
        let noop = Arc::new(runtime.load(noop_spec).await?);

        // The ordered drains alone, against an unordered drain on a fresh
        // store: ANKUSA_BENCH_ONLY=ordered.
        if std::env::var("ANKUSA_BENCH_ONLY").is_ok_and(|only| only == "ordered") {
            let dir = tempfile::tempdir()?;
            let queue = open(dir.path())?;
            let unordered = drain(&queue, "noop", &noop, 0).await?;
            close(queue).await?;
            print_drain("dispatch.noop.drain_100k", &unordered);
            let ordered = ordered_drain("noop", &noop, BACKLOG, 1_000).await?;
            print_drain("dispatch.noop.ordered_1000_keys_drain_100k", &ordered);
            ratio("dispatch.noop.ordered_1000_keys_vs_unordered", ordered.rate, unordered.rate);
            print_drain("dispatch.noop.ordered_1_key_drain_5k", &ordered_drain("noop", &noop, ONE_KEY_HOOKS, 1).await?);
            return Ok(());
        }
        // The transforms' costs alone: ANKUSA_BENCH_ONLY=transforms.
        if std::env::var("ANKUSA_BENCH_ONLY").is_ok_and(|only| only == "transforms") {
            let receiver = Receiver::start()?;
            let http = Arc::new(runtime.load(http_spec(&receiver)).await?);
            return transform_costs(&runtime, &[("noop", &noop), ("http", &http)]).await;
        }
        let first = drains_on_one_store(&noop).await?;
        let wasm_cpu = direct_noop_cpu(&noop).await?;
        report("dispatch.noop.wasm_call_cpu", wasm_cpu.as_secs_f64() * 1e6, "us");
        ratio("dispatch.noop.wasm_share_of_cpu", wasm_cpu.as_secs_f64(), first.cpu_per.as_secs_f64());

        // Ordered bindings: the same backlog over 1 000 keys, and a
        // smaller one over a single key (one delivery in flight at a time,
        // set against a direct call's round trip).
        let ordered = ordered_drain("noop", &noop, BACKLOG, 1_000).await?;
        print_drain("dispatch.noop.ordered_1000_keys_drain_100k", &ordered);
        ratio("dispatch.noop.ordered_1000_keys_vs_unordered", ordered.rate, first.rate);
        let one_key = ordered_drain("noop", &noop, ONE_KEY_HOOKS, 1).await?;
        print_drain("dispatch.noop.ordered_1_key_drain_5k", &one_key);
        report("dispatch.noop.ordered_1_key_us_per_delivery", 1e6 / one_key.rate, "us");
        ratio(
            "dispatch.noop.ordered_1_key_round_trip_vs_direct_call",
            1e6 / one_key.rate,
            wasm_cpu.as_secs_f64() * 1e6,
        );

        let receiver = Receiver::start()?;
        let http = Arc::new(runtime.load(http_spec(&receiver)).await?);
        let http_drain = {
            let dir = tempfile::tempdir()?;
            let queue = open(dir.path())?;
            let drain = drain(&queue, "http", &http, 0).await?;
            close(queue).await?;
            drain
        };
        print_drain("dispatch.http.drain_100k", &http_drain);
        ratio("dispatch.http_vs_noop.deliveries_per_sec", http_drain.rate, first.rate);
        transform_costs(&runtime, &[("noop", &noop), ("http", &http)]).await?;

        // The baseline: durable ingest alone, then ingest with dispatch.
        let alone = ingest("noop", &noop, false).await?;
        report("ingest.alone.acks_per_sec", alone.acks_per_sec, "acks/s");
        report("ingest.alone.cpu_per_ack", alone.cpu_per_ack.as_secs_f64() * 1e6, "us");
        ratio("dispatch.noop.cpu_per_delivery_vs_ack", first.cpu_per.as_secs_f64(), alone.cpu_per_ack.as_secs_f64());
        for (name, sink) in [("noop", &noop), ("http", &http)] {
            let both = ingest(name, sink, true).await?;
            report(&format!("end_to_end.{name}.acks_per_sec"), both.acks_per_sec, "acks/s");
            report(
                &format!("end_to_end.{name}.delivered_during_ingest_per_sec"),
                both.delivered_per_sec,
                "deliveries/s",
            );
            report(&format!("end_to_end.{name}.backlog_when_ingest_stopped"), both.backlog as f64, "hooks");
            ratio(&format!("end_to_end.{name}.delivered_vs_acked"), both.delivered_per_sec, both.acks_per_sec);
            ratio(&format!("end_to_end.{name}.acks_vs_ingest_alone"), both.acks_per_sec, alone.acks_per_sec);
        }
        anyhow::Ok(())
    })
}
