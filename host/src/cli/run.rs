//! `ankusa run`: start the node.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use crate::runtime::{ComponentSource, EngineConfig, Runtime, SinkLabel, SinkSpec};
use crate::store::{RocksStore, Store, StoreOptions};

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
    let store = RocksStore::open(&StoreOptions::new(&store_path))?;
    let stats = store.stats()?;
    let runtime = Runtime::new(EngineConfig::default(), Some(args.data_dir.join("components")))?;

    // The embedded default: one `demo` source delivering to the `log` sink.
    let spec = SinkSpec::new(SinkLabel::new("demo", "log"), ComponentSource::Builtin("log".into()));
    let sink = runtime.load(spec).await?;

    println!("ankusa {} (ankusa:sink@{})", env!("CARGO_PKG_VERSION"), crate::runtime::WIT_VERSION);
    println!("data: {}", args.data_dir.display());
    println!("store: {} (RocksDB, {} bytes on disk)", store_path.display(), stats.disk_bytes);
    println!("sink: {} → built-in `log` sha256:{} durable={}", sink.label(), &sink.sha256()[..16], sink.durable());
    println!("ready; Ctrl-C to stop");
    wait_for_shutdown().await?;
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
