//! The fleet under seeded schedules of overlapping faults
//! (`ankusa_tests::nemesis`), on Debian's nats-server and a current one:
//! links cut, hung, one-way and slowed, publish rounds cut midway, nodes
//! killed (with their disks, or their taker mid-import), paused, restarted
//! one by one or all in turn, NATS servers killed or paused, leaders
//! stepping down, the sink down, hooks over `max_payload`. Each acked hook
//! must arrive with its bytes or be dead-lettered, each ordered key in
//! order on each deliverer, each lapse's duplicates within the documented
//! bound. A few schedules here; `bench-fleet-faults` runs many.
//!
//! `ANKUSA_FLEET_SEEDS=7,8` runs those seeds (to replay a failure).

use ankusa_tests::nats_cluster::NatsServer;
use ankusa_tests::nemesis::{Schedule, Verdict, run};

/// Faults per schedule.
const FAULTS: usize = 6;

/// Schedules run on every pass, on each server (`bench-fleet-faults`
/// explores new seeds): 13 (two nodes; one node's links hung, one-way and
/// cut, overlapping: publish rounds fail and their hooks, ordered ones
/// among them, are committed later by the settle; it once left keys
/// stopped for good), 16 (three nodes, the stream's retention short: a
/// NATS server killed and paused, a node slowed and hung, a graceful
/// rolling restart of all three) and 20 (three nodes: a bucket leader
/// stepping down, a graceful rolling restart during it, a node hung and
/// paused while another is cut off).
const SEEDS: [u64; 3] = [13, 16, 20];

fn seeds() -> Vec<u64> {
    match std::env::var("ANKUSA_FLEET_SEEDS") {
        Ok(list) => list.split(',').map(|s| s.trim().parse().expect("ANKUSA_FLEET_SEEDS: numbers")).collect(),
        Err(_) => SEEDS.to_vec(),
    }
}

async fn schedules_hold(server: NatsServer) {
    check(server, seeds()).await;
}

async fn check(server: NatsServer, seeds: Vec<u64>) {
    let mut failed: Vec<Verdict> = Vec::new();
    for seed in seeds {
        let verdict = run(Schedule::from_seed(seed, FAULTS, server), None).await;
        println!("{verdict}");
        if !verdict.holds() {
            failed.push(verdict);
        }
    }
    for verdict in &failed {
        eprintln!(
            "FAILED {verdict}\n  lost: {:?}\n  wrong bytes: {:?}\n  dead letters lost: {:?}\n  unexplained: {:?}\n  \
             over the bound: {:?}\n  out of order: {:?}\n  late acks: {:?}\n  crashes: {:?}\n  evidence: {:?}\n  logged around the unexplained:\n    {}",
            verdict.lost.iter().take(10).collect::<Vec<_>>(),
            verdict.wrong_bytes.iter().take(10).collect::<Vec<_>>(),
            verdict.dead_lost.iter().take(10).collect::<Vec<_>>(),
            verdict.unexplained.iter().take(10).collect::<Vec<_>>(),
            verdict.over_bound,
            verdict.out_of_order.iter().take(10).collect::<Vec<_>>(),
            verdict.late_acks.iter().take(10).collect::<Vec<_>>(),
            verdict.crashes,
            verdict.evidence,
            verdict.context.join("\n    ")
        );
    }
    assert!(failed.is_empty(), "{} schedule(s) failed; replay with ANKUSA_FLEET_SEEDS", failed.len());
}

ankusa_tests::on_both_servers!(
    seeded_overlapping_faults_lose_nothing_on_the_packaged_server,
    seeded_overlapping_faults_lose_nothing_on_a_current_server
        => schedules_hold
);
