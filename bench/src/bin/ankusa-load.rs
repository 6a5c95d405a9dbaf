//! `ankusa-load`: drive an edge with webhooks and record every ack.
//!
//! ```sh
//! cargo run --release -p ankusa-bench --bin ankusa-load -- \
//!     --addr 127.0.0.1:4000 --path /webhooks/demo --connections 64 --seconds 10 --acks acks.csv
//! cargo run --release -p ankusa-bench --bin ankusa-load -- --rate 5000 ...   # open loop
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use ankusa_bench::load::{LoadConfig, run};
use ankusa_bench::report;
use clap::Parser;

#[derive(Debug, Parser)]
#[command(about = "Load generator for an Ankusa edge; only 201 counts as success.")]
struct Args {
    #[arg(long, default_value = "127.0.0.1:4000")]
    addr: SocketAddr,
    #[arg(long, default_value = "/webhooks/demo")]
    path: String,
    /// Keep-alive connections.
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// Requests per second (open loop); without it, closed loop.
    #[arg(long)]
    rate: Option<f64>,
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    #[arg(long, default_value_t = 1024)]
    body_bytes: usize,
    /// Write `id,sha256` of every ack here.
    #[arg(long)]
    acks: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let report_ = rt.block_on(run(LoadConfig {
        addr: args.addr,
        path: args.path,
        connections: args.connections,
        rate: args.rate,
        duration: Duration::from_secs(args.seconds),
        body_bytes: args.body_bytes,
    }))?;
    report("load.acks_per_sec", report_.acks_per_sec(), "acks/s");
    report("load.p50", report_.percentile_ms(0.50), "ms");
    report("load.p99", report_.percentile_ms(0.99), "ms");
    for (status, count) in &report_.failures {
        report(&format!("load.failures.status_{status}"), *count as f64, "requests");
    }
    if let Some(path) = args.acks {
        std::fs::write(&path, report_.ack_lines())?;
        println!("acks written to {}", path.display());
    }
    Ok(())
}
