//! `ankusa-soak`: kill -9 the real binary at random moments under load,
//! replays and tenant erases, then count the evidence: every acked hook
//! delivered with the bytes that were acked, duplicates within their bound.
//!
//! ```sh
//! cargo build --release -p ankusa -p ankusa-bench
//! target/release/ankusa-soak --mode disk --rounds 200
//! target/release/ankusa-soak --mode dual --rounds 200 --seed 7
//! ```
//!
//! Exits 1 when a hook was lost, delivered with other bytes, or duplicated
//! past the bound.

use std::path::PathBuf;
use std::time::Duration;

use ankusa_bench::soak::{Mode, SoakConfig, run};
use clap::Parser;

#[derive(Debug, Parser)]
#[command(about = "Kill soak of the ankusa binary with an evidence-counting checker.")]
struct Args {
    #[arg(long, value_enum, default_value = "disk")]
    mode: Mode,
    #[arg(long, default_value_t = 10)]
    rounds: u32,
    /// Every random choice follows from it; a failing run is repeated with
    /// the same seed.
    #[arg(long)]
    seed: Option<u64>,
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Shortest and longest round before its kill, ms.
    #[arg(long, default_value_t = 200)]
    min_round_ms: u64,
    #[arg(long, default_value_t = 2500)]
    max_round_ms: u64,
    /// The binary under test (default: `ankusa` beside this one).
    #[arg(long)]
    bin: Option<PathBuf>,
    /// Where the store goes (default: a temporary directory, removed after).
    #[arg(long)]
    dir: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let bin = ankusa_bench::ankusa_bin(args.bin)?;
    let temp = tempfile::tempdir()?;
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1)
    });
    println!("seed: {seed}");
    let config = SoakConfig {
        bin,
        mode: args.mode,
        rounds: args.rounds,
        seed,
        clients: args.clients,
        round_ms: (args.min_round_ms, args.max_round_ms),
        dir: args.dir.unwrap_or_else(|| temp.path().to_path_buf()),
        stall_limit: Duration::from_secs(60),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let report = runtime.block_on(run(config))?;
    report.print();
    let failures = report.evidence.failures(report.kills);
    for failure in &failures {
        eprintln!("FAILED: {failure} (seed {seed})");
    }
    if !failures.is_empty() {
        std::process::exit(1);
    }
    Ok(())
}
