//! The fleet a schedule runs on, and each fault applied to it. Faults run
//! at once, each in its own task: a node's process is held by one fault at
//! a time (its slot's lock), the NATS cluster likewise, and everything else
//! is shared.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

// How long a node's log tallies repeated failures before it tells them.
use ankusa::telemetry::logs::WINDOW as TALLY_WINDOW;

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
    /// A lapse the node logged of itself (a stall, attempts withdrawn or
    /// timed out), not a fault the nemesis applied.
    pub logged: bool,
}

/// What a node logs when its lease loop wakes a whole turn late.
const STALL_LINE: &str = "the lease loop ran late";
/// What a fleet node logs when it drops attempts in flight (its lease's
/// proof ended): the receiver may have had them.
const WITHDRAWN_LINE: &str = "attempts withdrawn in flight";
/// What a node logs of a failed attempt it retries (the first of a quiet
/// window), and of the rest of a window (with their count).
const RETRIED_LINE: &str = "delivery failed";
const TALLIED: &str = "more times in the last";
/// The nodes' attempt timeout (half the lease in fleet mode).
const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(LEASE_TTL_MS / 2);

/// When a line was logged (nodes log without colours here: `NO_COLOR`,
/// see `binary.rs`).
fn logged_at(line: &str) -> Option<std::time::SystemTime> {
    humantime::parse_rfc3339_weak(line.split_whitespace().next()?).ok()
}

/// When a stall line was logged, and how late the loop was (`late_ms`).
fn stall(line: &str) -> Option<(std::time::SystemTime, Duration)> {
    let late = line.split("late_ms=").nth(1)?.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()?;
    Some((logged_at(line)?, Duration::from_millis(late)))
}

/// What a node said of itself in one log line that makes its recent
/// deliveries unsure: how long before the line they began, and what it
/// was. A stall (its lease loop woke late: a pause or a held disk no fault
/// applied) withdraws its attempts as a paused node does; an attempt
/// withdrawn or timed out may have reached the receiver all the same.
fn unsure(line: &str) -> Option<(std::time::SystemTime, Duration, String)> {
    if line.contains(STALL_LINE) {
        let (at, late) = stall(line)?;
        return Some((at, late, format!("stalled {} ms", late.as_millis())));
    }
    if line.contains(WITHDRAWN_LINE) {
        return Some((logged_at(line)?, ATTEMPT_TIMEOUT, "withdrew attempts in flight".into()));
    }
    let timed_out = line.contains("class=timeout") || line.contains("class=\"timeout\"");
    if line.contains(RETRIED_LINE) && timed_out {
        let (before, what) = if line.contains(TALLIED) {
            (TALLY_WINDOW + ATTEMPT_TIMEOUT, "timed out attempts (a tally)")
        } else {
            (ATTEMPT_TIMEOUT, "timed out an attempt")
        };
        return Some((logged_at(line)?, before, what.into()));
    }
    None
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

    /// Lapses the nodes logged of themselves (see [`unsure`]), each a
    /// lapse of that node from when its unsure deliveries began.
    pub async fn logged_lapses(&self) -> Vec<Lapse> {
        let mut lapses = Vec::new();
        for (node, log) in self.all_logs().await {
            for (said, before, what) in log.lines().filter_map(unsure) {
                let Ok(said) = said.duration_since(self.t0_wall) else { continue };
                lapses.push(Lapse {
                    node: Some(node),
                    at: said.saturating_sub(before),
                    until: lapse_until(said, 0),
                    fault: format!("{} {what} (its own log)", NODE_IDS[node]),
                    logged: true,
                });
            }
        }
        // A process stopped by `SIGTERM` has its log kept twice (as it is
        // taken, and whole once it exited): one line, one lapse.
        lapses.sort_by(|a, b| (a.node, a.at, &a.fault).cmp(&(b.node, b.at, &b.fault)));
        lapses.dedup_by(|a, b| (a.node, a.at, &a.fault) == (b.node, b.at, &b.fault));
        lapses
    }

    /// What every process of each node logged so far (a process stopped
    /// by `SIGTERM` is in it twice: as it was taken, and whole).
    async fn all_logs(&self) -> Vec<(usize, String)> {
        let mut logs = self.logs.lock().expect("logs").clone();
        for (i, slot) in self.slots.iter().enumerate() {
            if let Some(node) = slot.lock().await.running.as_ref() {
                logs.push((i, node.log()));
            }
        }
        logs
    }

    /// The lines `node` logged from `from` to `to` (since the schedule
    /// began), debug lines left out, each once, in order.
    pub async fn lines_near(&self, node: &str, from: Duration, to: Duration) -> Vec<String> {
        let Some(i) = NODE_IDS.iter().position(|n| *n == node) else { return Vec::new() };
        let mut lines: Vec<(Duration, String)> = Vec::new();
        for (_, log) in self.all_logs().await.into_iter().filter(|(n, _)| *n == i) {
            for line in log.lines().filter(|l| !l.contains(" DEBUG ") && !l.contains(" TRACE ")) {
                let Some(at) = logged_at(line).and_then(|t| t.duration_since(self.t0_wall).ok()) else { continue };
                if (from..=to).contains(&at) {
                    lines.push((at, format!("{node} {:.3} s: {line}", at.as_secs_f64())));
                }
            }
        }
        lines.sort();
        lines.dedup();
        lines.into_iter().map(|(_, line)| line).collect()
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
        let (_, before, what) = unsure(line).expect("a stall is a lapse");
        assert_eq!((before, what.as_str()), (late, "stalled 2550 ms"));
    }

    #[test]
    fn attempts_withdrawn_or_timed_out_are_read_from_log_lines() {
        let at = humantime::parse_rfc3339("2026-12-07T22:02:31.147647Z").expect("a time");
        let timed_out = "2026-12-07T22:02:31.147647Z  INFO ankusa::telemetry::logs: delivery failed; it will be \
                         retried source=orders sink=out class=\"timeout\" seq=1 attempt=1 reason=\"attempt exceeded \
                         its deadline of 1s\"";
        assert_eq!(unsure(timed_out).map(|(said, before, _)| (said, before)), Some((at, ATTEMPT_TIMEOUT)));
        let tally = "2026-12-07T22:02:31.147647Z  INFO ankusa::telemetry::logs: delivery failed 5 more times in the \
                     last 10s; retried source=orders sink=out class=\"timeout\" count=5";
        assert_eq!(unsure(tally).map(|(_, before, _)| before), Some(TALLY_WINDOW + ATTEMPT_TIMEOUT));
        let withdrawn = "2026-12-07T22:02:31.147647Z  WARN ankusa::dispatch::attempt: attempts withdrawn in flight: \
                         the lease's proof ended; their rows are due again once claims open rows=2 sink=out";
        assert_eq!(unsure(withdrawn).map(|(said, before, _)| (said, before)), Some((at, ATTEMPT_TIMEOUT)));
        // A refusal by the sink is an answer: nothing unsure.
        let refused = timed_out.replace("class=\"timeout\"", "class=\"permanent\"");
        assert!(unsure(&refused).is_none());
    }
}
