//! Seeded schedules of faults that overlap: each fault starts at its own
//! time and lasts its own span, so a node may be paused while a NATS
//! server is down, or restarted during a leader election.

use std::fmt;

use ankusa_fuzz_targets::mutate::Rng;

use crate::fleet::LEASE_TTL_MS;
use crate::nats_cluster::NatsServer;

/// Node ids, in the order a schedule's `nodes` takes them.
pub const NODE_IDS: [&str; 3] = ["a", "b", "c"];

/// One fault: applied at its step's time, healed after its span.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// A node's links to NATS cut, and new ones refused, for `ms`.
    Partition { node: usize, ms: u64 },
    /// A node's links hang (nothing flows either way) for `ms`.
    Hang { node: usize, ms: u64 },
    /// A node's bytes reach NATS, nothing comes back, for `ms`.
    OneWay { node: usize, ms: u64 },
    /// Every chunk each way waits `by_ms`, for `ms`.
    Slow { node: usize, by_ms: u64, ms: u64 },
    /// The node's next round of hook publishes cut after `publishes`.
    CutRound { node: usize, publishes: usize },
    /// `kill -9`, its data directory deleted when `wipe`, started again
    /// after `down_ms`.
    Kill { node: usize, wipe: bool, down_ms: u64 },
    /// A node killed, and the peer that begins taking it over killed
    /// mid-import; both started again on their disks.
    KillTaker { node: usize },
    /// `SIGSTOP` for `ms`, then `SIGCONT`.
    Pause { node: usize, ms: u64 },
    /// Stopped (`SIGTERM` when `graceful`, else `kill -9`) and started
    /// again on its disk at once.
    Restart { node: usize, graceful: bool },
    /// Every node restarted in turn, each back before the next goes.
    RollingRestart { graceful: bool },
    /// NATS server `server` killed, started again after `down_ms`.
    KillServer { server: usize, down_ms: u64 },
    /// NATS server `server` paused (`SIGSTOP`) for `ms`.
    PauseServer { server: usize, ms: u64 },
    /// The leader of the hooks' stream (or of the leases' bucket) steps down.
    StepDown { bucket: bool },
    /// The sink answers `503` to everything for `ms`: backlogs grow.
    SinkDown { ms: u64 },
    /// A hook of 2 MiB, over the servers' `max_payload`, posted.
    BigHook,
}

impl Fault {
    /// How long it lasts once applied (a restart: about its time back).
    pub fn span_ms(&self) -> u64 {
        match self {
            Fault::Partition { ms, .. }
            | Fault::Hang { ms, .. }
            | Fault::OneWay { ms, .. }
            | Fault::Slow { ms, .. }
            | Fault::Pause { ms, .. }
            | Fault::PauseServer { ms, .. }
            | Fault::SinkDown { ms } => *ms,
            Fault::Kill { down_ms, .. } | Fault::KillServer { down_ms, .. } => *down_ms,
            Fault::KillTaker { .. } => 3 * LEASE_TTL_MS,
            Fault::Restart { .. } => 1_000,
            Fault::RollingRestart { .. } => 3_000,
            Fault::CutRound { .. } | Fault::StepDown { .. } | Fault::BigHook => 300,
        }
    }

    /// The nodes it may cost their lease (or an attempt in flight): each
    /// such lapse may repeat deliveries, within the documented bound.
    /// `None`: none; `Some(None)`: any node (a fault of NATS itself).
    pub fn lapses(&self) -> Option<Option<usize>> {
        let half = LEASE_TTL_MS / 2;
        match self {
            Fault::Partition { node, ms } | Fault::Hang { node, ms } | Fault::OneWay { node, ms } => {
                (*ms >= half / 2).then_some(Some(*node))
            }
            Fault::Slow { node, by_ms, .. } => (*by_ms * 4 >= half).then_some(Some(*node)),
            Fault::Kill { node, .. } | Fault::Pause { node, .. } | Fault::CutRound { node, .. } => Some(Some(*node)),
            Fault::KillTaker { .. } => Some(None),
            Fault::Restart { node, graceful } => (!graceful).then_some(Some(*node)),
            Fault::RollingRestart { graceful } => (!graceful).then_some(None),
            Fault::KillServer { .. } | Fault::PauseServer { .. } | Fault::StepDown { .. } => Some(None),
            Fault::SinkDown { .. } | Fault::BigHook => None,
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let id = |node: &usize| NODE_IDS[*node];
        match self {
            Fault::Partition { node, ms } => write!(f, "partition {} {ms}ms", id(node)),
            Fault::Hang { node, ms } => write!(f, "hang {} {ms}ms", id(node)),
            Fault::OneWay { node, ms } => write!(f, "one-way {} {ms}ms", id(node)),
            Fault::Slow { node, by_ms, ms } => write!(f, "slow {} +{by_ms}ms for {ms}ms", id(node)),
            Fault::CutRound { node, publishes } => write!(f, "cut {}'s round after {publishes}", id(node)),
            Fault::Kill { node, wipe, down_ms } => {
                write!(f, "kill -9 {}{} {down_ms}ms", id(node), if *wipe { " +disk" } else { "" })
            }
            Fault::KillTaker { node } => write!(f, "kill -9 {} and its taker mid-import", id(node)),
            Fault::Pause { node, ms } => write!(f, "SIGSTOP {} {ms}ms", id(node)),
            Fault::Restart { node, graceful } => {
                write!(f, "restart {} ({})", id(node), if *graceful { "SIGTERM" } else { "kill -9" })
            }
            Fault::RollingRestart { graceful } => {
                write!(f, "rolling restart ({})", if *graceful { "SIGTERM" } else { "kill -9" })
            }
            Fault::KillServer { server, down_ms } => write!(f, "kill nats n{server} {down_ms}ms"),
            Fault::PauseServer { server, ms } => write!(f, "SIGSTOP nats n{server} {ms}ms"),
            Fault::StepDown { bucket } => write!(f, "{} leader steps down", if *bucket { "bucket" } else { "stream" }),
            Fault::SinkDown { ms } => write!(f, "sink down {ms}ms"),
            Fault::BigHook => write!(f, "2 MiB hook"),
        }
    }
}

/// A fault and when it starts (ms from the schedule's start).
#[derive(Clone, Debug)]
pub struct Step {
    pub at_ms: u64,
    pub fault: Fault,
}

/// A seed's fleet and faults.
#[derive(Clone, Debug)]
pub struct Schedule {
    pub seed: u64,
    /// Nodes in the fleet: 2 or 3.
    pub nodes: usize,
    pub server: NatsServer,
    /// The stream keeps hooks this long: short in some schedules, so
    /// copies age out while nodes still hold them. (A node's disk is then
    /// never deleted: a hook older than the stream's retention has only
    /// its node's copy, as the docs say.)
    pub retention_ms: u64,
    pub steps: Vec<Step>,
}

/// The stream's retention when a schedule keeps it short.
pub const SHORT_RETENTION_MS: u64 = 15_000;

impl Schedule {
    pub fn from_seed(seed: u64, faults: usize, server: NatsServer) -> Schedule {
        let mut rng = Rng::new(seed);
        let lease = LEASE_TTL_MS;
        let nodes = if rng.chance(0.5) { 3 } else { 2 };
        let short = rng.chance(0.3);
        let mut at_ms = 500;
        let mut steps = Vec::with_capacity(faults);
        for _ in 0..faults {
            let node = rng.below(nodes);
            let fault = match rng.below(16) {
                0 => Fault::Partition { node, ms: rng.range(300, lease * 3) },
                1 => Fault::Hang { node, ms: rng.range(300, lease * 3) },
                2 => Fault::OneWay { node, ms: rng.range(300, lease * 2) },
                3 => Fault::Slow { node, by_ms: rng.range(5, 400), ms: rng.range(500, lease * 2) },
                4 => Fault::CutRound { node, publishes: rng.below(8) },
                5 => Fault::Kill { node, wipe: !short && rng.chance(0.5), down_ms: rng.range(0, lease * 2) },
                6 => Fault::KillTaker { node },
                7 => Fault::Pause { node, ms: rng.range(lease / 2, lease * 3) },
                8 => Fault::Restart { node, graceful: rng.chance(0.5) },
                9 => Fault::RollingRestart { graceful: rng.chance(0.7) },
                10 => Fault::KillServer { server: rng.below(3), down_ms: rng.range(500, lease * 3) },
                11 => Fault::PauseServer { server: rng.below(3), ms: rng.range(300, lease * 2) },
                12 => Fault::StepDown { bucket: rng.chance(0.5) },
                13 => Fault::SinkDown { ms: rng.range(500, lease * 3) },
                14 => Fault::Slow { node, by_ms: rng.range(5, 60), ms: rng.range(500, lease) },
                _ => Fault::BigHook,
            };
            steps.push(Step { at_ms, fault });
            // The next fault starts while this one may still last.
            at_ms += rng.range(100, 1_500);
        }
        let retention_ms = if short { SHORT_RETENTION_MS } else { 600_000 };
        Schedule { seed, nodes, server, retention_ms, steps }
    }

    /// Pairs of steps whose spans overlap.
    pub fn overlaps(&self) -> usize {
        let span = |s: &Step| (s.at_ms, s.at_ms + s.fault.span_ms());
        let mut count = 0;
        for (i, a) in self.steps.iter().enumerate() {
            for b in &self.steps[i + 1..] {
                let ((a0, a1), (b0, b1)) = (span(a), span(b));
                count += usize::from(a0 < b1 && b0 < a1);
            }
        }
        count
    }
}
