//! The fleet's fault checker over many seeds (`ankusa_tests::nemesis`):
//! for each seed, a fresh 3-server JetStream cluster, two nodes behind
//! fault proxies, a provider retrying every refusal until acked, and a
//! schedule of faults from the seed; then every acked hook must have
//! arrived with its bytes, with duplicates within the documented bound.
//! Prints one line per seed and the totals.
//!
//! `cargo build --release --workspace --bins && target/release/bench-fleet-faults [seeds] [first-seed] [faults]`
//! (defaults: 50 seeds from 1, 8 faults each).

use ankusa_bench::{ankusa_bin, report};
use ankusa_tests::nemesis::{Schedule, run};

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() -> anyhow::Result<()> {
    let arg = |i: usize, default: u64| -> anyhow::Result<u64> {
        std::env::args().nth(i).map_or(Ok(default), |a| a.parse().map_err(anyhow::Error::from))
    };
    let (seeds, first, faults) = (arg(1, 50)?, arg(2, 1)?, arg(3, 8)?);
    let bin = ankusa_bin(None)?;
    let (mut acked, mut lost, mut wrong, mut duplicates, mut bound, mut failed) = (0, 0, 0, 0, 0, Vec::new());
    for seed in first..first + seeds {
        let verdict = run(Schedule::from_seed(seed, faults as usize), Some(bin.clone())).await;
        println!("{verdict}");
        if let Some(evidence) = &verdict.evidence {
            println!("  evidence: {}", evidence.display());
        }
        acked += verdict.acked;
        lost += verdict.lost.len();
        wrong += verdict.wrong_bytes.len();
        duplicates += verdict.duplicates;
        bound += verdict.bound;
        if !verdict.holds() {
            failed.push(seed);
        }
    }
    report("fleet.faults.schedules", seeds as f64, "schedules");
    report("fleet.faults.acked", acked as f64, "hooks");
    report("fleet.faults.lost", lost as f64, "hooks");
    report("fleet.faults.wrong_bytes", wrong as f64, "hooks");
    report("fleet.faults.duplicates", duplicates as f64, "deliveries");
    report("fleet.faults.duplicate_bound", bound as f64, "deliveries");
    report("fleet.faults.failed", failed.len() as f64, "schedules");
    anyhow::ensure!(failed.is_empty(), "schedules failed: seeds {failed:?}");
    Ok(())
}
