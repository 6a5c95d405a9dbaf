//! The fleet a schedule runs on, and each fault applied to it. Faults run
//! at once, each in its own task: a node's process is held by one fault at
//! a time (its slot's lock), the NATS cluster likewise, and everything else
//! is shared.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::provider::Provider;
use super::schedule::{Fault, NODE_IDS};
use crate::binary::RunningNode;
use crate::fault_proxy::{FaultProxy, Mode};
use crate::fleet::{Fleet, LEASE_TTL_MS};
use crate::nats_cluster::Cluster;
use crate::receiver::Receiver;

/// A time a node may have lost its lease (or its attempts in flight):
/// deliveries it made just before may be repeated, within the bound.
#[derive(Clone, Debug)]
pub struct Lapse {
    /// `None`: any node (a fault of NATS itself).
    pub node: Option<usize>,
    /// Since the schedule began.
    pub at: Duration,
    /// Until when a delivery may still be repeated by it: the fault's span
    /// and half a lease (when a node cut off withdraws its attempts).
    pub until: Duration,
    pub fault: String,
    /// A stall the node logged of itself, not a fault the nemesis applied.
    pub logged: bool,
}

/// What a node logs when its lease loop wakes a whole turn late.
const STALL_LINE: &str = "the lease loop ran late";

/// When a stall line was logged, and how late the loop was (`late_ms`).
/// Nodes log without colours here (`NO_COLOR`, see `binary.rs`).
fn stall(line: &str) -> Option<(std::time::SystemTime, Duration)> {
    let at = humantime::parse_rfc3339_weak(line.split_whitespace().next()?).ok()?;
    let late = line.split("late_ms=").nth(1)?.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()?;
    Some((at, Duration::from_millis(late)))
}

/// Until when a lapse from `at` may repeat a delivery: the fault's span,
/// half a lease (when a node cut off withdraws its attempts) and a second.
fn lapse_until(at: Duration, span_ms: u64) -> Duration {
    at + Duration::from_millis(span_ms + LEASE_TTL_MS / 2 + 1_000)
}

/// One node's process, held by one fault at a time.
#[derive(Default)]
pub struct Slot {
    /// `None` while a fault keeps it down.
    pub running: Option<RunningNode>,
}

pub struct World {
    pub t0: Instant,
    /// The wall clock at `t0`, to line the nodes' logs up with it.
    pub t0_wall: std::time::SystemTime,
    pub nodes: usize,
    pub cluster: tokio::sync::Mutex<Cluster>,
    pub proxies: Vec<FaultProxy>,
    pub slots: Vec<tokio::sync::Mutex<Slot>>,
    /// Where the provider reaches each node (`None` while down).
    pub ingest: Arc<Mutex<Vec<Option<SocketAddr>>>>,
    pub fleet: Fleet,
    pub receiver: Receiver,
    pub sink_down: Arc<AtomicBool>,
    pub lapses: Mutex<Vec<Lapse>>,
    /// Exits with status 75 (a node that found it was taken over).
    pub fenced: Mutex<Vec<String>>,
    /// Exits no fault explains (any status but 75, or a failed stop).
    pub crashes: Mutex<Vec<String>>,
    /// What each process of a node logged, in order.
    pub logs: Mutex<Vec<(usize, String)>>,
}

impl World {
    pub fn since(&self) -> Duration {
        self.t0.elapsed()
    }

    fn lapse(&self, node: Option<usize>, fault: &Fault) {
        let at = self.since();
        let lapse =
            Lapse { node, at, until: lapse_until(at, fault.span_ms()), fault: fault.to_string(), logged: false };
        self.lapses.lock().expect("lapses").push(lapse);
    }

    /// Stalls the nodes logged of themselves (their lease loop woke a
    /// whole turn late: a pause or a held disk no fault applied), each a
    /// lapse of that node from when it began: it withdraws and repeats its
    /// attempts in flight as a paused node does.
    pub async fn stalls(&self) -> Vec<Lapse> {
        let mut logs = self.logs.lock().expect("logs").clone();
        for (i, slot) in self.slots.iter().enumerate() {
            if let Some(node) = slot.lock().await.running.as_ref() {
                logs.push((i, node.log()));
            }
        }
        let mut stalls = Vec::new();
        for (node, log) in logs {
            for line in log.lines().filter(|l| l.contains(STALL_LINE)) {
                let Some((woke, late)) = stall(line) else { continue };
                let Ok(woke) = woke.duration_since(self.t0_wall) else { continue };
                stalls.push(Lapse {
                    node: Some(node),
                    at: woke.saturating_sub(late),
                    until: lapse_until(woke, 0),
                    fault: format!("{} stalled {} ms (its own log)", NODE_IDS[node], late.as_millis()),
                    logged: true,
                });
            }
        }
        // A process stopped by `SIGTERM` has its log kept twice (as it is
        // taken, and whole once it exited): one stall, one lapse.
        stalls.sort_by_key(|l| (l.node, l.at));
        stalls.dedup_by_key(|l| (l.node, l.at));
        stalls
    }

    fn set_ingest(&self, i: usize, node: Option<&RunningNode>) {
        self.ingest.lock().expect("ingest")[i] = node.map(|n| n.ingest);
    }

    /// Start node `i` on its data directory, as a supervisor would.
    pub async fn start(&self, i: usize, slot: &mut Slot) {
        let node = self.fleet.start_supervised(&self.proxies[i].yaml_urls(), NODE_IDS[i], &self.receiver).await;
        self.set_ingest(i, Some(&node));
        slot.running = Some(node);
    }

    /// Take node `i` out of its slot (the provider stops reaching it) and
    /// keep its log.
    fn take(&self, i: usize, slot: &mut Slot) -> Option<RunningNode> {
        let node = slot.running.take()?;
        self.set_ingest(i, None);
        self.logs.lock().expect("logs").push((i, node.log()));
        Some(node)
    }

    /// A node whose process ended by itself is started again: status 75
    /// (taken over while cut off or paused) is what the docs promise;
    /// anything else is a crash the verdict reports.
    pub async fn restart_if_exited(&self, i: usize) {
        let Ok(mut slot) = self.slots[i].try_lock() else { return };
        let Some(node) = slot.running.as_mut() else { return };
        let Some(status) = node.exited_within(Duration::ZERO).await else { return };
        let at = self.since().as_secs_f64();
        let what = format!("{} exited with {status} at {at:.1} s", NODE_IDS[i]);
        if status.code() == Some(75) {
            self.fenced.lock().expect("fenced").push(what);
        } else {
            self.crashes.lock().expect("crashes").push(what);
        }
        self.take(i, &mut slot);
        self.start(i, &mut slot).await;
    }

    /// `kill -9` node `i` (a lapse), its disk deleted when `wipe`.
    async fn kill(&self, i: usize, wipe: bool, fault: &Fault) -> tokio::sync::MutexGuard<'_, Slot> {
        let mut slot = self.slots[i].lock().await;
        if let Some(node) = self.take(i, &mut slot) {
            self.lapse(Some(i), fault);
            node.kill();
        }
        if wipe {
            let _ = std::fs::remove_dir_all(self.fleet.data(NODE_IDS[i]));
        }
        slot
    }

    /// Stop node `i` and start it again on its disk at once.
    async fn restart(&self, i: usize, graceful: bool, fault: &Fault) {
        let mut slot = if graceful {
            let mut slot = self.slots[i].lock().await;
            if let Some(mut node) = self.take(i, &mut slot) {
                node.signal("TERM");
                let status = node.exited_within(Duration::from_secs(30)).await;
                self.logs.lock().expect("logs").push((i, node.log()));
                let at = self.since().as_secs_f64();
                match status.and_then(|s| s.code()) {
                    Some(0) => {}
                    // Taken over while it stopped (cut off meanwhile): it
                    // exits as any node that finds it was taken over.
                    Some(75) => {
                        let what = format!("{} exited with 75 while it stopped, at {at:.1} s", NODE_IDS[i]);
                        self.fenced.lock().expect("fenced").push(what);
                    }
                    _ => {
                        let what = format!("{} did not stop cleanly on SIGTERM: {status:?}", NODE_IDS[i]);
                        self.crashes.lock().expect("crashes").push(what);
                    }
                }
            }
            slot
        } else {
            self.kill(i, false, fault).await
        };
        self.start(i, &mut slot).await;
    }

    /// Apply `fault`, and heal it after its span.
    pub async fn apply(&self, fault: &Fault, provider: &Provider) {
        let wait = |ms: u64| tokio::time::sleep(Duration::from_millis(ms));
        // A kill notes its lapse as it kills (a node already down has
        // none), a pause as it stops the node (it waits for the node's slot,
        // which another fault may hold for seconds); every other fault as
        // it begins.
        let on_the_node = matches!(
            fault,
            Fault::Kill { .. }
                | Fault::KillTaker { .. }
                | Fault::Restart { .. }
                | Fault::RollingRestart { .. }
                | Fault::Pause { .. }
        );
        if let Some(node) = fault.lapses().filter(|_| !on_the_node) {
            self.lapse(node, fault);
        }
        match fault {
            Fault::Partition { node, ms } => {
                self.proxies[*node].set(Mode::Refuse);
                self.proxies[*node].cut();
                wait(*ms).await;
                self.proxies[*node].set(Mode::Pass);
            }
            // Bytes dropped on the way leave a connection's protocol stream
            // torn: healing cuts it, and the client reconnects.
            Fault::Hang { node, ms } | Fault::OneWay { node, ms } => {
                let mode = if matches!(fault, Fault::Hang { .. }) { Mode::Hold } else { Mode::OneWay };
                self.proxies[*node].set(mode);
                wait(*ms).await;
                self.proxies[*node].set(Mode::Pass);
                self.proxies[*node].cut();
            }
            Fault::Slow { node, by_ms, ms } => {
                self.proxies[*node].set(Mode::Delay(Duration::from_millis(*by_ms)));
                wait(*ms).await;
                self.proxies[*node].set(Mode::Pass);
            }
            Fault::CutRound { node, publishes } => {
                let subject_contains = format!(".hook.{}", NODE_IDS[*node]);
                self.proxies[*node].set(Mode::CutAfter { publishes: *publishes, subject_contains });
                let cut_by = Instant::now() + Duration::from_secs(5);
                while self.proxies[*node].mode() != Mode::Refuse && Instant::now() < cut_by {
                    wait(20).await;
                }
                wait(300).await;
                self.proxies[*node].set(Mode::Pass);
            }
            Fault::Kill { node, wipe, down_ms } => {
                let mut slot = self.kill(*node, *wipe, fault).await;
                wait(*down_ms).await;
                self.start(*node, &mut slot).await;
            }
            Fault::KillTaker { node } => self.kill_taker(*node, fault).await,
            Fault::Pause { node, ms } => {
                {
                    let slot = self.slots[*node].lock().await;
                    if let Some(running) = &slot.running {
                        self.lapse(Some(*node), fault);
                        running.signal("STOP");
                        wait(*ms).await;
                        running.signal("CONT");
                    }
                }
                wait(LEASE_TTL_MS).await;
                self.restart_if_exited(*node).await;
            }
            Fault::Restart { node, graceful } => self.restart(*node, *graceful, fault).await,
            Fault::RollingRestart { graceful } => {
                for i in 0..self.nodes {
                    self.restart(i, *graceful, fault).await;
                }
            }
            Fault::KillServer { server, down_ms } => {
                self.cluster.lock().await.kill_server(*server);
                wait(*down_ms).await;
                self.cluster.lock().await.start_server(*server);
            }
            Fault::PauseServer { server, ms } => {
                self.cluster.lock().await.signal_server(*server, "STOP");
                wait(*ms).await;
                self.cluster.lock().await.signal_server(*server, "CONT");
            }
            Fault::StepDown { bucket } => {
                let stream = if *bucket { "KV_ANKUSA-fleet" } else { "ANKUSA" };
                let client = self.cluster.lock().await.client().await.client();
                let subject = format!("$JS.API.STREAM.LEADER.STEPDOWN.{stream}");
                // Refused while another fault holds the cluster: that is fine.
                let _ = tokio::time::timeout(Duration::from_secs(2), client.request(subject, "".into())).await;
            }
            Fault::SinkDown { ms } => {
                self.sink_down.store(true, Ordering::SeqCst);
                wait(*ms).await;
                self.sink_down.store(false, Ordering::SeqCst);
            }
            Fault::BigHook => provider.post_big(),
        }
    }

    /// Kill `node`; once a peer logs that it is taking it over, kill that
    /// peer mid-import; start both again on their disks.
    async fn kill_taker(&self, node: usize, fault: &Fault) {
        let mut slot = self.kill(node, false, fault).await;
        let id = NODE_IDS[node];
        let deadline = Instant::now() + Duration::from_millis(4 * LEASE_TTL_MS);
        let mut taker = None;
        while taker.is_none() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(25)).await;
            for peer in (0..self.nodes).filter(|p| *p != node) {
                let Ok(peer_slot) = self.slots[peer].try_lock() else { continue };
                let taking = peer_slot.running.as_ref().is_some_and(|n| {
                    n.log().lines().any(|l| {
                        l.contains("taking over a node whose lease lapsed")
                            && (l.contains(&format!("node={id} ")) || l.contains(&format!("node=\"{id}\"")))
                    })
                });
                if taking {
                    taker = Some(peer);
                }
            }
        }
        if let Some(peer) = taker {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let mut peer_slot = self.kill(peer, false, fault).await;
            self.start(node, &mut slot).await;
            self.start(peer, &mut peer_slot).await;
        } else {
            self.start(node, &mut slot).await;
        }
    }

    /// Every fault healed, every server and node running.
    pub async fn heal(&self) {
        for proxy in &self.proxies {
            proxy.set(Mode::Pass);
        }
        self.sink_down.store(false, Ordering::SeqCst);
        {
            let mut cluster = self.cluster.lock().await;
            for i in 0..cluster.servers.len() {
                cluster.signal_server(i, "CONT");
                if !cluster.running(i) {
                    cluster.start_server(i);
                }
            }
        }
        for i in 0..self.nodes {
            self.restart_if_exited(i).await;
            let mut slot = self.slots[i].lock().await;
            if slot.running.is_none() {
                self.start(i, &mut slot).await;
            }
        }
    }

    /// Stop every node (`kill -9`: the verdict is taken), keeping logs.
    pub async fn end(&self) {
        for i in 0..self.nodes {
            let mut slot = self.slots[i].lock().await;
            if let Some(node) = self.take(i, &mut slot) {
                node.kill();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stall_is_read_from_a_log_line() {
        let line = "2026-12-07T18:30:37.318509Z  WARN ankusa::fleet::lease: the lease loop ran late: this process \
                    or its host stalled late_ms=2550";
        let (at, late) = stall(line).expect("a stall line");
        let expected = humantime::parse_rfc3339("2026-12-07T18:30:37.318509Z").expect("a time");
        assert_eq!(at, expected);
        assert_eq!(late, Duration::from_millis(2550));
        assert!(stall("2026-12-07T18:30:37Z  WARN the lease loop ran late").is_none(), "no late_ms: no stall");
    }
}
