//! The kill soak, 10 rounds in each WAL mode, against the binary this
//! build made: every acked hook delivered with the bytes that were acked,
//! duplicates within their bound. (200-round runs: `ankusa-soak`, figures
//! in the README.)

use std::path::PathBuf;
use std::time::Duration;

use ankusa_bench::soak::{Mode, SoakConfig, run};

fn ankusa_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>/deps");
    let bin = dir.join("ankusa");
    assert!(bin.is_file(), "{} is missing: run `cargo test --workspace`", bin.display());
    bin
}

async fn soak(mode: Mode, seed: u64) {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = SoakConfig {
        bin: ankusa_bin(),
        mode,
        rounds: 10,
        seed,
        clients: 8,
        round_ms: (200, 1500),
        dir: dir.path().to_path_buf(),
        stall_limit: Duration::from_secs(60),
    };
    let report = run(config).await.unwrap_or_else(|e| panic!("the soak could not run (seed {seed}): {e}"));
    report.print();
    let failures = report.evidence.failures(report.kills);
    assert!(failures.is_empty(), "seed {seed}: {failures:?}");
    assert_eq!(report.kills, 10);
    assert!(report.evidence.acked > 100, "too little load to mean anything: {:?}", report.evidence);
}

fn seed() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_kills_lose_nothing_in_disk_mode() {
    soak(Mode::Disk, seed()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_kills_lose_nothing_in_dual_mode() {
    soak(Mode::Dual, seed()).await;
}
