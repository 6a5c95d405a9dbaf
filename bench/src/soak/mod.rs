//! The kill soak: the real binary under ingest load, delivering to a
//! receiver that fails a share of attempts, with DLQ replays and tenant
//! erases started now and then, killed with SIGKILL at a random moment of
//! every round and started again on the same store. A last run drains
//! everything; the checker then counts, hook by hook, what was acked
//! against what was delivered.

mod evidence;
mod node;
mod recorder;
mod rng;
mod traffic;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub use evidence::Evidence;
use node::{Node, NodeError};
use recorder::{Failures, Recorder};
use rng::Rng;
use traffic::{Admin, Ledger, Observed};

/// The WAL mode under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    Disk,
    Dual,
}

#[derive(Clone, Debug)]
pub struct SoakConfig {
    /// The `ankusa` binary.
    pub bin: PathBuf,
    pub mode: Mode,
    pub rounds: u32,
    pub seed: u64,
    /// Keep-alive clients posting hooks.
    pub clients: usize,
    /// How long a round runs before its kill: uniform in this range.
    pub round_ms: (u64, u64),
    /// Where the store, the intake log and the config go.
    pub dir: PathBuf,
    /// The last run delivers everything; it fails if nothing moves for
    /// this long.
    pub stall_limit: Duration,
}

/// Kills that landed while each kind of work was under way.
#[derive(Clone, Debug, Default)]
pub struct KillsDuring {
    /// Requests were waiting for their commit.
    pub commits: u32,
    /// The receiver was answering deliveries.
    pub deliveries: u32,
    /// A replay job was running.
    pub replays: u32,
    /// The scratch tenant was being erased.
    pub erases: u32,
    /// `dual`: an intake checkpoint finished within the last 100 ms.
    pub checkpoints: u32,
}

#[derive(Clone, Debug)]
pub struct SoakReport {
    pub mode: Mode,
    pub kills: u32,
    pub during: KillsDuring,
    pub evidence: Evidence,
    /// Attempts the receiver failed on purpose (`503`, `400`).
    pub failed_attempts: (u64, u64),
    pub replays_started: u32,
    pub erases_started: u32,
    /// Intake checkpoints seen (the node's counter restarts with it).
    pub checkpoints: u64,
    pub drain: Duration,
    pub elapsed: Duration,
}

impl SoakReport {
    /// `name: value unit` lines.
    pub fn print(&self) {
        let mode = match self.mode {
            Mode::Disk => "disk",
            Mode::Dual => "dual",
        };
        let line = |name: &str, value: f64, unit: &str| crate::report(&format!("soak.{mode}.{name}"), value, unit);
        let e = &self.evidence;
        line("kills", self.kills.into(), "rounds");
        line("acked", e.acked as f64, "hooks");
        line("delivered", e.delivered as f64, "hooks");
        line("lost", e.lost as f64, "hooks");
        line("other_bytes", e.other_bytes as f64, "deliveries");
        line("duplicates", e.duplicates as f64, "deliveries");
        line("duplicate_bound", Evidence::duplicate_bound(self.kills) as f64, "deliveries");
        line("unacked_delivered", e.unacked_delivered as f64, "hooks");
        line("scratch_acked", e.scratch_acked as f64, "hooks");
        line("scratch_delivered", e.scratch_delivered as f64, "hooks");
        line("failed_attempts_503", self.failed_attempts.0 as f64, "attempts");
        line("failed_attempts_400", self.failed_attempts.1 as f64, "attempts");
        line("replays_started", self.replays_started.into(), "jobs");
        line("erases_started", self.erases_started.into(), "jobs");
        line("checkpoints", self.checkpoints as f64, "checkpoints");
        line("kills_during_commits", self.during.commits.into(), "kills");
        line("kills_during_deliveries", self.during.deliveries.into(), "kills");
        line("kills_during_replays", self.during.replays.into(), "kills");
        line("kills_during_erases", self.during.erases.into(), "kills");
        line("kills_after_checkpoint", self.during.checkpoints.into(), "kills");
        line("drain", self.drain.as_secs_f64(), "s");
        line("elapsed", self.elapsed.as_secs_f64(), "s");
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SoakError {
    #[error("round {round}: {source}")]
    Node { round: u32, source: NodeError },
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("the last run stopped delivering ({limit:?} without progress): {left}")]
    Stalled { limit: Duration, left: String },
}

const FAILURES: Failures = Failures { transient_permille: 200, permanent_permille: 20 };

/// Run the soak.
pub async fn run(config: SoakConfig) -> Result<SoakReport, SoakError> {
    let started = Instant::now();
    let mut rng = Rng::new(config.seed);
    let recorder = Recorder::start(FAILURES, rng.next_u64())?;
    std::fs::create_dir_all(&config.dir)?;
    let config_file = config.dir.join("ankusa.yml");
    std::fs::write(&config_file, node::config(config.mode, &recorder))?;
    let data = config.dir.join("data");
    let (ingest, admin_addr) = (node::free_port()?, node::free_port()?);
    let admin = Admin::new(admin_addr);
    let start = |round: u32| {
        let (bin, config_file, data) = (config.bin.clone(), config_file.clone(), data.clone());
        async move {
            tokio::task::spawn_blocking(move || Node::start(&bin, &config_file, &data, ingest, admin_addr))
                .await
                .map_err(|e| SoakError::Io(std::io::Error::other(e)))?
                .map_err(|source| SoakError::Node { round, source })
        }
    };

    let ledger = Arc::new(Ledger::default());
    let stop = Arc::new(AtomicBool::new(false));
    let clients = traffic::post_hooks(ingest, config.clients, rng.next_u64(), ledger.clone(), stop.clone());
    let mut report = SoakReport {
        mode: config.mode,
        kills: 0,
        during: KillsDuring::default(),
        evidence: Evidence::default(),
        failed_attempts: (0, 0),
        replays_started: 0,
        erases_started: 0,
        checkpoints: 0,
        drain: Duration::ZERO,
        elapsed: Duration::ZERO,
    };

    for round in 0..config.rounds {
        let node = start(round).await?;
        let length = Duration::from_millis(rng.range(config.round_ms.0, config.round_ms.1));
        let replay_at = rng.chance(0.5).then(|| length.mul_f64(rng.range(0, 1000) as f64 / 1000.0));
        let erase_at = rng.chance(0.3).then(|| length.mul_f64(rng.range(0, 1000) as f64 / 1000.0));
        let round_start = Instant::now();
        let (mut seen, mut checkpoint_at) = (Observed::default(), None);
        let (mut replayed, mut erased) = (false, false);
        while round_start.elapsed() < length {
            let now = round_start.elapsed();
            if !replayed && replay_at.is_some_and(|at| now >= at) {
                replayed = true;
                // Slow enough that a kill often lands while it runs.
                report.replays_started += u32::from(admin.replay_dlq(200.0).await);
            }
            if !erased && erase_at.is_some_and(|at| now >= at) {
                erased = true;
                report.erases_started += u32::from(admin.erase_scratch().await);
            }
            if let Some(observed) = admin.observe().await {
                if observed.checkpoints > seen.checkpoints {
                    report.checkpoints += observed.checkpoints - seen.checkpoints;
                    checkpoint_at = Some(Instant::now());
                }
                seen = observed;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let during = &mut report.during;
        during.commits += u32::from(ledger.posting.load(Ordering::Relaxed) > 0);
        during.deliveries += u32::from(recorder.inflight() > 0);
        during.replays += u32::from(seen.replaying);
        during.erases += u32::from(seen.erasing);
        during.checkpoints += u32::from(checkpoint_at.is_some_and(|at| at.elapsed() < Duration::from_millis(100)));
        node.kill();
        report.kills += 1;
        if report.kills.is_multiple_of(20) {
            let acked = ledger.acked.lock().map(|a| a.len()).unwrap_or(0);
            eprintln!("{} rounds, {acked} acked, {:.0} s", report.kills, started.elapsed().as_secs_f64());
        }
    }

    // The last run: no more load, no more failures; replay the DLQ until
    // every acked hook is delivered and nothing is left in the queue.
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        let _ = client.await;
    }
    recorder.set_failures(Failures { transient_permille: 0, permanent_permille: 0 });
    let node = start(config.rounds).await?;
    let drain_start = Instant::now();
    let outcome = drain(&admin, &ledger, &recorder, config.stall_limit).await;
    report.drain = drain_start.elapsed();
    let log = node.kill();
    if let Err(left) = outcome {
        return Err(SoakError::Stalled { limit: config.stall_limit, left: format!("{left}\nnode log:\n{log}") });
    }
    let acked = ledger.acked.lock().map(|a| a.clone()).unwrap_or_default();
    report.evidence = Evidence::weigh(&acked, &recorder.delivered());
    report.failed_attempts = recorder.failed();
    report.elapsed = started.elapsed();
    Ok(report)
}

/// Wait until every acked hook was delivered, the queue holds no row of
/// either tenant and no erase is running, replaying the DLQ while it has
/// rows. A large backlog takes its time: this gives up only when nothing
/// moves for `stall_limit`.
async fn drain(admin: &Admin, ledger: &Ledger, recorder: &Recorder, stall_limit: Duration) -> Result<(), String> {
    let mut last_move = Instant::now();
    let mut least_left = usize::MAX;
    let mut left = String::new();
    while last_move.elapsed() < stall_limit {
        // Counted under the locks: the maps hold every hook of the run.
        let undelivered = match ledger.acked.lock() {
            Ok(acked) => recorder.undelivered(acked.iter().filter(|(_, a)| a.tenant == node::TENANT).map(|(id, _)| id)),
            Err(_) => usize::MAX,
        };
        let (main, scratch) = (admin.usage(node::TENANT).await, admin.usage(node::SCRATCH_TENANT).await);
        let observed = admin.observe().await;
        let rows = |usage: &Option<serde_json::Value>, state: &str| {
            usage.as_ref().and_then(|u| u[state].as_i64()).unwrap_or(i64::MAX)
        };
        let dead = rows(&main, "dead").saturating_add(rows(&scratch, "dead"));
        let open = ["pending", "inflight"]
            .iter()
            .fold(0i64, |sum, s| sum.saturating_add(rows(&main, s)).saturating_add(rows(&scratch, s)));
        let busy = observed.is_none_or(|o| o.replaying || o.erasing);
        if undelivered == 0 && dead == 0 && open == 0 && !busy {
            return Ok(());
        }
        if dead > 0 && !busy {
            admin.replay_dlq(100_000.0).await;
        }
        let now_left = undelivered.saturating_add(usize::try_from(open.saturating_add(dead)).unwrap_or(usize::MAX));
        if now_left < least_left {
            least_left = now_left;
            last_move = Instant::now();
        }
        left = format!("{undelivered} acked hooks undelivered, {open} rows open, {dead} dead, busy: {busy}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(left)
}
