//! `ankusa run`: start the node.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;

use crate::dispatch::{DispatchConfig, Dispatcher};
use crate::edge::dedupe_key::DedupeRule;
use crate::edge::{Edge, EdgeConfig};
use crate::queue::{Queue, QueueConfig, SinkDurability, SourceDurability, validate_config};
use crate::runtime::{ComponentSource, EngineConfig, Runtime, SinkLabel, SinkSpec};
use crate::source::{SinkBinding, Source, StaticDirectory};

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Where the node keeps its state (the store, compiled components).
    #[arg(long, env = "ANKUSA_DATA_DIR", default_value = "./data")]
    data_dir: PathBuf,
    /// Where providers POST hooks.
    #[arg(long, env = "ANKUSA_INGEST_LISTEN", default_value = "0.0.0.0:4000")]
    ingest: SocketAddr,
}

pub async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("cannot create the data directory {}", args.data_dir.display()))?;
    let store_path = args.data_dir.join("store");
    let config = QueueConfig::default();
    let queue = Arc::new(
        Queue::open(&store_path, config.clone())
            .with_context(|| format!("cannot open the store at {}", store_path.display()))?,
    );
    let recovered = queue.recover_inflight(crate::queue::now_ms())?;
    let stats = queue.stats()?;
    let runtime = Runtime::new(EngineConfig::default(), Some(args.data_dir.join("components")))?;

    // The embedded default: one `demo` source delivering to the `log` sink.
    let spec = SinkSpec::new(SinkLabel::new("demo", "log"), ComponentSource::Builtin("log".into()));
    let sink = runtime.load(spec).await?;
    let durability = SourceDurability {
        source: "demo".into(),
        sinks: vec![SinkDurability { name: "log".into(), durable: sink.durable() }],
    };
    validate_config(config.wal, &[durability])?;
    let sink = Arc::new(sink);

    let mut directory = StaticDirectory::default();
    directory.add(Source {
        name: "demo".into(),
        tenant: "default".into(),
        verifier: None,
        on_verify_failure: Default::default(),
        dedupe: Some(DedupeRule::header("idempotency-key")),
        sinks: vec![SinkBinding { index: 0, sink: sink.clone() }],
    });
    let directory = Arc::new(directory);
    let dispatcher = Dispatcher::start(queue.clone(), directory.clone(), DispatchConfig::default());
    let replays = crate::replay::resume_all(queue.clone(), directory.clone())?;
    let sweeper = Queue::sweep_in_background(queue.clone(), std::time::Duration::from_secs(60));
    let edge = Arc::new(Edge::new(EdgeConfig::default(), directory, Some(queue.clone())));
    let listener = tokio::net::TcpListener::bind(args.ingest)
        .await
        .with_context(|| format!("cannot listen for hooks on {}", args.ingest))?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(crate::edge::serve(listener, edge, async {
        let _ = stopped.await;
    }));

    println!("ankusa {} (ankusa:sink@{})", env!("CARGO_PKG_VERSION"), crate::runtime::WIT_VERSION);
    println!("data: {}", args.data_dir.display());
    println!(
        "wal: {} — store {} (RocksDB, {} bytes on disk, next seq {}, {recovered} inflight rows due again)",
        queue.label(),
        store_path.display(),
        stats.disk_bytes,
        stats.next_seq
    );
    println!("durability: an acked hook is fsynced to this host's disk: durable to power loss on THIS host only");
    println!("sink: {} → built-in `log` sha256:{} durable={}", sink.label(), &sink.sha256()[..16], sink.durable());
    println!("ingest: http://{}/webhooks/demo", args.ingest);
    println!("ready; Ctrl-C to stop");
    wait_for_shutdown().await?;
    let _ = stop.send(());
    let _ = server.await;
    dispatcher.stop().await;
    for task in replays.into_iter().chain([sweeper]) {
        task.abort();
        let _ = task.await;
    }
    // Open connections and the batcher let go of the queue as they wind
    // down; a queue closed cleanly leaves nothing to replay at the next start.
    let mut queue = queue;
    for _ in 0..50 {
        match Arc::try_unwrap(queue) {
            Ok(alone) => {
                alone.close().await;
                break;
            }
            Err(shared) => {
                queue = shared;
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
    println!("stopped");
    Ok(ExitCode::SUCCESS)
}

async fn wait_for_shutdown() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("cannot listen for SIGTERM")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("cannot listen for Ctrl-C"),
        _ = term.recv() => Ok(()),
    }
}
