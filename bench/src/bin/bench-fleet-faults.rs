//! The fleet's fault checker over many seeds (`ankusa_tests::nemesis`):
//! for each seed and each NATS server (Debian's packaged one and a current
//! release), a fresh 3-server JetStream cluster, two or three nodes behind
//! fault proxies, a provider retrying every refusal until acked, and a
//! schedule of overlapping faults from the seed; then each acked hook must
//! have arrived with its bytes (or, doomed, be dead-lettered), each ordered
//! key in order on each deliverer, and each lapse's duplicates within the
//! documented bound. Prints one line per schedule and the totals.
//!
//! `cargo build --release --workspace --bins && target/release/bench-fleet-faults [seeds] [first-seed] [faults] [servers]`
//! (defaults: 50 seeds from 1, 8 faults each, `both` servers; or
//! `packaged` / `current`).

use ankusa_bench::{ankusa_bin, report};
use ankusa_tests::nats_cluster::NatsServer;
use ankusa_tests::nemesis::{Schedule, per_lapse, run};

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() -> anyhow::Result<()> {
    let arg = |i: usize, default: u64| -> anyhow::Result<u64> {
        std::env::args().nth(i).map_or(Ok(default), |a| a.parse().map_err(anyhow::Error::from))
    };
    let (seeds, first, faults) = (arg(1, 50)?, arg(2, 1)?, arg(3, 8)?);
    let servers = match std::env::args().nth(4).as_deref() {
        None | Some("both") => vec![NatsServer::Packaged, NatsServer::Current],
        Some("packaged") => vec![NatsServer::Packaged],
        Some("current") => vec![NatsServer::Current],
        Some(other) => anyhow::bail!("servers: both, packaged or current, not {other}"),
    };
    let bin = ankusa_bin(None)?;
    for server in servers {
        let version = server.version();
        let mut totals = Totals::default();
        for seed in first..first + seeds {
            let verdict = run(Schedule::from_seed(seed, faults as usize, server), Some(bin.clone())).await;
            println!("{verdict}");
            if let Some(evidence) = &verdict.evidence {
                println!("  evidence: {}", evidence.display());
            }
            totals.add(&verdict);
        }
        totals.report(&version.replace('.', "_"), seeds);
        anyhow::ensure!(totals.failed.is_empty(), "nats {version}: schedules failed: seeds {:?}", totals.failed);
    }
    Ok(())
}

#[derive(Default)]
struct Totals {
    acked: usize,
    lost: usize,
    wrong: usize,
    dead: usize,
    dead_lost: usize,
    duplicates: usize,
    lapses: usize,
    logged: usize,
    only_logged_explain: usize,
    worst_lapse: usize,
    unexplained: usize,
    out_of_order: usize,
    ordered_runs: usize,
    overlaps: usize,
    longest_refusal: f64,
    failed: Vec<u64>,
}

impl Totals {
    fn add(&mut self, v: &ankusa_tests::nemesis::Verdict) {
        self.acked += v.acked;
        self.lost += v.lost.len();
        self.wrong += v.wrong_bytes.len();
        self.dead += v.dead_letters;
        self.dead_lost += v.dead_lost.len();
        self.duplicates += v.duplicates;
        self.lapses += v.lapses;
        self.logged += v.logged;
        self.only_logged_explain += v.only_logged_explain;
        self.worst_lapse = self.worst_lapse.max(v.worst_lapse);
        self.unexplained += v.unexplained.len();
        self.out_of_order += v.out_of_order.len();
        self.ordered_runs += v.ordered_runs;
        self.overlaps += v.overlaps;
        self.longest_refusal = self.longest_refusal.max(v.longest_refusal.as_secs_f64());
        if !v.holds() {
            self.failed.push(v.seed);
        }
    }

    fn report(&self, server: &str, seeds: u64) {
        let name = |what: &str| format!("fleet.faults.{server}.{what}");
        report(&name("schedules"), seeds as f64, "schedules");
        report(&name("overlapping_pairs"), self.overlaps as f64, "pairs");
        report(&name("acked"), self.acked as f64, "hooks");
        report(&name("lost"), self.lost as f64, "hooks");
        report(&name("wrong_bytes"), self.wrong as f64, "hooks");
        report(&name("dead_letters"), self.dead as f64, "hooks");
        report(&name("dead_letters_lost"), self.dead_lost as f64, "hooks");
        report(&name("ordered_runs"), self.ordered_runs as f64, "runs");
        report(&name("out_of_order"), self.out_of_order as f64, "runs");
        report(&name("duplicates"), self.duplicates as f64, "deliveries");
        report(&name("lapses"), self.lapses as f64, "lapses");
        report(&name("lapses_logged"), self.logged as f64, "lapses");
        report(&name("duplicates_only_logged_explain"), self.only_logged_explain as f64, "deliveries");
        report(&name("worst_lapse"), self.worst_lapse as f64, "deliveries");
        report(&name("lapse_bound"), per_lapse() as f64, "deliveries");
        report(&name("unexplained_duplicates"), self.unexplained as f64, "deliveries");
        report(&name("longest_refusal"), self.longest_refusal, "s");
        report(&name("failed"), self.failed.len() as f64, "schedules");
    }
}
