//! `bench-hostile`: honest clients beside hostile ones at the edge of the
//! real binary. First the honest load alone (the baseline), then the same
//! load while 10 000 connections sit idle or dribble half a request head
//! (each one reopened as soon as the node closes it) and flooders send
//! request heads far over the limits. Prints the honest clients' p50/p99
//! and acks in both phases, the node's peak RSS after each, and what the
//! node did with the hostile connections.
//!
//! ```sh
//! cargo build --release -p ankusa -p ankusa-bench
//! target/release/bench-hostile                      # --idle 10000 --flooders 8 --seconds 10
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ankusa_bench::hostile::{Flood, Node};
use ankusa_bench::load::{LoadConfig, LoadReport, run};
use ankusa_bench::{ratio, report};
use clap::Parser;

#[derive(Debug, Parser)]
#[command(about = "Honest clients' latency and the node's memory beside idle, slow and flooding connections.")]
struct Args {
    /// Connections held idle or half-open during the hostile phase.
    #[arg(long, default_value_t = 10_000)]
    idle: usize,
    /// Connections sending oversized request heads in a loop.
    #[arg(long, default_value_t = 8)]
    flooders: usize,
    /// Honest requests per second (open loop, 1 KiB bodies).
    #[arg(long, default_value_t = 2000.0)]
    rate: f64,
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// The binary under test (default: `ankusa` beside this one).
    #[arg(long)]
    bin: Option<PathBuf>,
}

fn honest(addr: SocketAddr, args: &Args) -> LoadConfig {
    LoadConfig {
        addr,
        path: "/webhooks/demo".into(),
        connections: 32,
        rate: Some(args.rate),
        duration: Duration::from_secs(args.seconds),
        body_bytes: 1024,
    }
}

fn print(phase: &str, load: &LoadReport, peak_rss_mib: f64) {
    report(&format!("hostile.{phase}.honest_acks_per_sec"), load.acks_per_sec(), "acks/s");
    report(&format!("hostile.{phase}.honest_p50"), load.percentile_ms(0.50), "ms");
    report(&format!("hostile.{phase}.honest_p99"), load.percentile_ms(0.99), "ms");
    let failed: u64 = load.failures.iter().map(|(_, n)| n).sum();
    report(&format!("hostile.{phase}.honest_failures"), failed as f64, "requests");
    report(&format!("hostile.{phase}.node_peak_rss"), peak_rss_mib, "MiB");
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let bin = ankusa_bench::ankusa_bin(args.bin.clone())?;
    ankusa_bench::hostile::raise_fd_limit(args.idle as u64 + 4096)?;
    let dir = tempfile::tempdir()?;
    let node = Node::start(&bin, dir.path())?;
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    runtime.block_on(async {
        // Warm up (the sink's first instances, the store's first files).
        run(LoadConfig { duration: Duration::from_secs(2), ..honest(node.ingest, &args) }).await?;
        let baseline = run(honest(node.ingest, &args)).await?;
        let baseline_rss = node.peak_rss_mib();
        print("baseline", &baseline, baseline_rss);

        let stop = Arc::new(AtomicBool::new(false));
        let idle = ankusa_bench::hostile::hold_idle(node.ingest, args.idle, stop.clone());
        let flood = Flood::start(node.ingest, args.flooders, stop.clone());
        let opened = idle.wait_open(args.idle, Duration::from_secs(30)).await;
        report("hostile.idle_connections_open", opened as f64, "connections");
        let loaded = run(honest(node.ingest, &args)).await?;
        let hostile_rss = node.peak_rss_mib();
        stop.store(true, Ordering::Relaxed);
        print("hostile", &loaded, hostile_rss);
        report("hostile.idle_closed_by_node", idle.closed.load(Ordering::Relaxed) as f64, "connections");
        report("hostile.idle_refused", idle.refused.load(Ordering::Relaxed) as f64, "connects");
        flood.report();
        ratio("hostile.p99_vs_baseline", loaded.percentile_ms(0.99), baseline.percentile_ms(0.99));
        ratio("hostile.acks_vs_baseline", loaded.acks_per_sec(), baseline.acks_per_sec());
        ratio("hostile.peak_rss_vs_baseline", hostile_rss, baseline_rss);
        anyhow::Ok(())
    })?;
    node.stop();
    Ok(())
}
