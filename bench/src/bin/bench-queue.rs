//! The durable queue: enqueue throughput and commit latency at 1 / 16 /
//! 64 / 256 concurrent callers in `disk` and `dual` mode (1 KiB hooks, 2
//! sinks each), DLQ page latency over 1 000 000 dead rows, and
//! restart-to-ready over 1 000 000 pending rows.
//!
//! The baseline, measured in the same run on the same disk: how many
//! synced 4 KiB appends per second the disk takes (`fdatasync` in a loop).
//!
//! `cargo run --release -p ankusa-bench --bin bench-queue`
//! (`ANKUSA_BENCH_ONLY=enqueue|dlq|restart` runs one part;
//! `ANKUSA_BENCH_DIR` picks the disk, default the system temp dir.)

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ankusa::error_class::ErrorClass;
use ankusa::queue::{DeadQuery, EntryOutcome, Queue, QueueConfig, SinkSelector, WalMode};
use ankusa_bench::{fill, ratio, report};

const CALLERS: [usize; 4] = [1, 16, 64, 256];
/// Hooks per enqueue call: one (a caller per request) and eight (a caller
/// like the edge's batcher, which hands the writer what has accumulated).
const HOOKS_PER_CALL: [usize; 2] = [1, 8];
const RUN_FOR: Duration = Duration::from_secs(4);
const DEAD_ROWS: usize = 1_000_000;
const PENDING_ROWS: usize = 1_000_000;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn bench_dir() -> anyhow::Result<tempfile::TempDir> {
    Ok(match std::env::var_os("ANKUSA_BENCH_DIR") {
        Some(dir) => tempfile::tempdir_in(dir)?,
        None => tempfile::tempdir()?,
    })
}

fn config(mode: WalMode, dir: &Path) -> QueueConfig {
    QueueConfig { wal: mode, intake_dir: Some(dir.join("intake")), ..QueueConfig::default() }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1e3
}

/// Synced 4 KiB appends per second on the bench disk.
fn fsync_baseline(dir: &Path) -> anyhow::Result<f64> {
    let path: PathBuf = dir.join("fsync-baseline");
    let mut file = std::fs::File::create(&path)?;
    let block = vec![7u8; 4096];
    let started = Instant::now();
    let mut n = 0u64;
    while started.elapsed() < Duration::from_secs(2) {
        file.write_all(&block)?;
        file.sync_data()?;
        n += 1;
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    std::fs::remove_file(path)?;
    Ok(rate)
}

async fn enqueue_run(mode: WalMode, callers: usize, per_call: usize, baseline: f64) -> anyhow::Result<f64> {
    let dir = bench_dir()?;
    let queue = Arc::new(Queue::open(&dir.path().join("store"), config(mode, dir.path()))?);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for caller in 0..callers {
        let queue = queue.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut n = caller as u64 * 1_000_000_000;
            while started.elapsed() < RUN_FOR {
                let entries = (0..per_call as u64).map(|i| fill::entry(n + i, "acme", "github")).collect();
                let sent = Instant::now();
                let outcomes = queue.intake().enqueue(entries, None).await?;
                if !outcomes.iter().all(|o| matches!(o, EntryOutcome::Committed(_))) {
                    anyhow::bail!("enqueue did not commit: {outcomes:?}");
                }
                let took = sent.elapsed();
                latencies.extend(std::iter::repeat_n(took, per_call));
                n += per_call as u64;
            }
            Ok(latencies)
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await??);
    }
    let elapsed = started.elapsed().as_secs_f64();
    latencies.sort_unstable();
    let stats = queue.commit_stats();
    let hooks_per_sec = latencies.len() as f64 / elapsed;
    let fsyncs_per_commit = if mode == WalMode::Dual { 2.0 } else { 1.0 };
    let name = format!("queue.enqueue.{}.callers_{callers}.hooks_per_call_{per_call}", mode.label());
    report(&format!("{name}.hooks_per_sec"), hooks_per_sec, "hooks/s");
    report(&format!("{name}.commit_p50"), percentile(&latencies, 0.50), "ms");
    report(&format!("{name}.commit_p99"), percentile(&latencies, 0.99), "ms");
    report(&format!("{name}.fsyncs_per_sec"), stats.commits as f64 * fsyncs_per_commit / elapsed, "fsyncs/s");
    report(
        &format!("{name}.hooks_per_fsync"),
        stats.hooks as f64 / (stats.commits.max(1) as f64 * fsyncs_per_commit),
        "hooks",
    );
    report(&format!("{name}.mean_group"), stats.hooks as f64 / stats.commits.max(1) as f64, "hooks/commit");
    ratio(&format!("{name}.hooks_per_sec_vs_raw_fsyncs_per_sec"), hooks_per_sec, baseline);
    if let Ok(queue) = Arc::try_unwrap(queue) {
        queue.close().await;
    }
    Ok(hooks_per_sec)
}

async fn dlq() -> anyhow::Result<()> {
    let dir = bench_dir()?;
    let queue = Arc::new(Queue::open(&dir.path().join("store"), QueueConfig::default())?);
    let built = Instant::now();
    fill::dead(&queue, DEAD_ROWS, 50).await?;
    report("queue.dlq.build_1m_dead_rows", built.elapsed().as_secs_f64(), "s");
    let dead = queue.counter(None, "dead")?;
    report("queue.dlq.dead_rows", dead as f64, "rows");

    let cases: [(&str, DeadQuery); 4] = [
        ("first_page", DeadQuery::default()),
        ("rare_source_filter", DeadQuery { source_id: Some("rare".into()), ..DeadQuery::default() }),
        ("one_tenant", DeadQuery { tenants: Some(vec!["tenant-7".into()]), ..DeadQuery::default() }),
        (
            "sink_and_class_filter",
            DeadQuery {
                sink: Some(SinkSelector::Index(1)),
                error_class: Some(ErrorClass::Permanent),
                ..DeadQuery::default()
            },
        ),
    ];
    let mut first_p99 = 0.0;
    for (name, query) in cases {
        let mut latencies = Vec::new();
        let mut cursor = None;
        for _ in 0..200 {
            let q = DeadQuery { cursor: cursor.clone(), ..query.clone() };
            let started = Instant::now();
            let page = queue.dead_letters().dead(&q)?;
            latencies.push(started.elapsed());
            // Walk deeper pages, wrapping around at the end.
            cursor = page.next_cursor;
        }
        latencies.sort_unstable();
        let p99 = percentile(&latencies, 0.99);
        report(&format!("queue.dlq.{name}.p50"), percentile(&latencies, 0.50), "ms");
        report(&format!("queue.dlq.{name}.p99"), p99, "ms");
        if name == "first_page" {
            first_p99 = p99;
        } else {
            ratio(&format!("queue.dlq.{name}.p99_vs_first_page_p99"), p99, first_p99);
        }
    }
    if let Ok(queue) = Arc::try_unwrap(queue) {
        queue.close().await;
    }
    Ok(())
}

async fn restart() -> anyhow::Result<()> {
    let dir = bench_dir()?;
    let path = dir.path().join("store");
    let queue = Arc::new(Queue::open(&path, QueueConfig::default())?);
    fill::pending(&queue, PENDING_ROWS / 2, 50).await?;
    // A tenth of the rows were inflight when the node stopped.
    let claimed = queue.deliveries().claim_due(u64::MAX / 4, PENDING_ROWS / 10)?.len();
    if let Ok(queue) = Arc::try_unwrap(queue) {
        queue.close().await;
    }

    let cold = Instant::now();
    let empty = bench_dir()?;
    let queue = Queue::open(&empty.path().join("store"), QueueConfig::default())?;
    queue.recover_inflight(0)?;
    let empty_ms = cold.elapsed().as_secs_f64() * 1e3;
    queue.close().await;

    let started = Instant::now();
    let queue = Queue::open(&path, QueueConfig::default())?;
    let open_ms = started.elapsed().as_secs_f64() * 1e3;
    let recovered = queue.recover_inflight(1_900_000_000_000)?;
    let ready_ms = started.elapsed().as_secs_f64() * 1e3;
    report("queue.restart.open", open_ms, "ms");
    report("queue.restart.recover_inflight", ready_ms - open_ms, "ms");
    anyhow::ensure!(recovered == claimed, "recovered {recovered} inflight rows of {claimed}");
    let pending = queue.counter(None, "pending")?;
    report("queue.restart.pending_rows", pending as f64, "rows");
    report("queue.restart.inflight_rows_recovered", recovered as f64, "rows");
    report("queue.restart.ready", ready_ms, "ms");
    report("queue.restart.ready_empty_store", empty_ms, "ms");
    ratio("queue.restart.ready_vs_empty_store", ready_ms, empty_ms);
    queue.close().await;
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let only = std::env::var("ANKUSA_BENCH_ONLY").ok();
    let runs = |part: &str| only.as_deref().is_none_or(|o| o == part);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        if runs("enqueue") {
            let dir = bench_dir()?;
            let baseline = fsync_baseline(dir.path())?;
            report("queue.baseline.raw_fsyncs_per_sec", baseline, "fsyncs/s");
            for per_call in HOOKS_PER_CALL {
                let mut at_64 = [0.0; 2];
                for (m, mode) in [WalMode::Disk, WalMode::Dual].into_iter().enumerate() {
                    for callers in CALLERS {
                        let rate = enqueue_run(mode, callers, per_call, baseline).await?;
                        if callers == 64 {
                            at_64[m] = rate;
                        }
                    }
                }
                ratio(&format!("queue.enqueue.dual_vs_disk.callers_64.hooks_per_call_{per_call}"), at_64[1], at_64[0]);
            }
        }
        if runs("dlq") {
            dlq().await?;
        }
        if runs("restart") {
            restart().await?;
        }
        anyhow::Ok(())
    })
}
