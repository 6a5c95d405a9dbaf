//! `ankusa run`: start the node.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use crate::queue::{Queue, QueueConfig, SinkDurability, SourceDurability, validate_config};
use crate::runtime::{ComponentSource, EngineConfig, Runtime, SinkLabel, SinkSpec};

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Where the node keeps its state (the store, compiled components).
    #[arg(long, env = "ANKUSA_DATA_DIR", default_value = "./data")]
    data_dir: PathBuf,
}

pub async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("cannot create the data directory {}", args.data_dir.display()))?;
    let store_path = args.data_dir.join("store");
    let config = QueueConfig::default();
    let queue = Queue::open(&store_path, config.clone())
        .with_context(|| format!("cannot open the store at {}", store_path.display()))?;
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
    println!("ready; Ctrl-C to stop");
    wait_for_shutdown().await?;
    queue.close().await;
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
