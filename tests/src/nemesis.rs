//! Seeded fault schedules against a real fleet, and the checker that
//! judges them (a nemesis and a checker, after Jepsen).
//!
//! Two nodes, each reaching a 3-server JetStream cluster only through its
//! own [`FaultProxy`]; a provider posting hooks and retrying every refusal
//! until it is acked, as Stripe or GitHub would, at either node; and a
//! nemesis applying a seed's faults one after another: links cut, hung,
//! one-way or slowed, a publish round cut midway, `kill -9` of a node with
//! or without its disk, `SIGSTOP` past the lease, NATS servers killed and
//! started again, hooks over the servers' `max_payload`. At the end every
//! fault is healed, every node runs, and the checker compares what the
//! receiver got with every acked hook's bytes.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ankusa_fuzz_targets::mutate::Rng;

use crate::binary::RunningNode;
use crate::fault_proxy::{FaultProxy, Mode};
use crate::fleet::{Acked, Fleet, LEASE_TTL_MS, deliveries, try_post};
use crate::nats_cluster::Cluster;
use crate::receiver::{Receiver, Reply};

const NODES: [&str; 2] = ["a", "b"];
/// Each node's `dispatch.concurrency` (see `fleet::node_yaml`).
const CONCURRENCY: usize = 2;
/// The receiver's time per delivery: a node delivers at most
/// `CONCURRENCY / RECEIVER_DELAY` hooks a second.
const RECEIVER_DELAY: Duration = Duration::from_millis(5);
/// How often a node publishes its delivery outcomes (`fleet::outcomes`).
const OUTCOME_FLUSH: Duration = Duration::from_millis(100);
const BIG_BYTES: usize = 2 << 20;

/// One fault, applied and then healed.
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
    /// `SIGSTOP` for `ms`, then `SIGCONT` (and a restart if it stopped
    /// itself on finding it was taken over).
    Pause { node: usize, ms: u64 },
    /// NATS server `server` killed, started again after `down_ms`.
    KillServer { server: usize, down_ms: u64 },
    /// A hook of 2 MiB, over the servers' `max_payload`, posted.
    BigHook,
}

impl Fault {
    /// Whether it may cost a node its lease (a takeover, or attempts
    /// withdrawn), each of which may repeat deliveries within the bound.
    fn may_lapse(&self) -> bool {
        let half = LEASE_TTL_MS / 2;
        match self {
            Fault::Partition { ms, .. } | Fault::Hang { ms, .. } | Fault::OneWay { ms, .. } => *ms >= half / 2,
            Fault::Slow { by_ms, .. } => *by_ms * 4 >= half,
            Fault::Kill { .. } | Fault::Pause { .. } | Fault::CutRound { .. } | Fault::KillServer { .. } => true,
            Fault::BigHook => false,
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Partition { node, ms } => write!(f, "partition {} {ms}ms", NODES[*node]),
            Fault::Hang { node, ms } => write!(f, "hang {} {ms}ms", NODES[*node]),
            Fault::OneWay { node, ms } => write!(f, "one-way {} {ms}ms", NODES[*node]),
            Fault::Slow { node, by_ms, ms } => write!(f, "slow {} +{by_ms}ms for {ms}ms", NODES[*node]),
            Fault::CutRound { node, publishes } => write!(f, "cut {}'s round after {publishes}", NODES[*node]),
            Fault::Kill { node, wipe, down_ms } => {
                write!(f, "kill -9 {}{} {down_ms}ms", NODES[*node], if *wipe { " +disk" } else { "" })
            }
            Fault::Pause { node, ms } => write!(f, "SIGSTOP {} {ms}ms", NODES[*node]),
            Fault::KillServer { server, down_ms } => write!(f, "kill nats n{server} {down_ms}ms"),
            Fault::BigHook => write!(f, "2 MiB hook"),
        }
    }
}

/// A seed's faults, with the pause before each.
#[derive(Clone, Debug)]
pub struct Schedule {
    pub seed: u64,
    pub steps: Vec<(u64, Fault)>,
}

impl Schedule {
    pub fn from_seed(seed: u64, faults: usize) -> Schedule {
        let mut rng = Rng::new(seed);
        let lease = LEASE_TTL_MS;
        let steps = (0..faults)
            .map(|_| {
                let node = rng.below(NODES.len());
                let fault = match rng.below(9) {
                    0 => Fault::Partition { node, ms: rng.range(300, lease * 3) },
                    1 => Fault::Hang { node, ms: rng.range(300, lease * 3) },
                    2 => Fault::OneWay { node, ms: rng.range(300, lease * 2) },
                    3 => Fault::Slow { node, by_ms: rng.range(5, 400), ms: rng.range(500, lease * 2) },
                    4 => Fault::CutRound { node, publishes: rng.below(8) },
                    5 => Fault::Kill { node, wipe: rng.chance(0.5), down_ms: rng.range(0, lease * 2) },
                    6 => Fault::Pause { node, ms: rng.range(lease / 2, lease * 3) },
                    7 => Fault::KillServer { server: rng.below(3), down_ms: rng.range(500, lease * 3) },
                    _ => Fault::BigHook,
                };
                (rng.range(200, 1500), fault)
            })
            .collect();
        Schedule { seed, steps }
    }
}

/// What a schedule came to.
#[derive(Clone, Debug)]
pub struct Verdict {
    pub schedule: Schedule,
    /// Hooks answered 201 (accepted or duplicate), by id.
    pub acked: usize,
    /// Hooks the provider gave up on (never acked: not owed).
    pub unacked: usize,
    /// Acked hooks never delivered.
    pub lost: Vec<String>,
    /// Acked hooks delivered with other bytes.
    pub wrong_bytes: Vec<String>,
    /// Deliveries beyond the first of each hook.
    pub duplicates: usize,
    /// What the documented bound allows: per fault that may cost a lease,
    /// a node's last outcome flush of deliveries plus its attempts in flight.
    pub bound: usize,
    /// Deliveries of hooks no one acked (answered 503, then settled).
    pub unowed: usize,
    /// Times a node stopped itself on finding it was taken over.
    pub fenced: usize,
    /// Where a failed schedule's evidence was written (the provider's
    /// answers, every node process's log, the NATS servers' log).
    pub evidence: Option<PathBuf>,
    pub took: Duration,
}

impl Verdict {
    pub fn holds(&self) -> bool {
        self.lost.is_empty() && self.wrong_bytes.is_empty() && self.duplicates <= self.bound
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let faults: Vec<String> = self.schedule.steps.iter().map(|(_, fault)| fault.to_string()).collect();
        write!(
            f,
            "seed {}: {} acked, {} lost, {} wrong bytes, {} duplicates (bound {}), {} unacked, {} unowed deliveries, \
             {} fenced exits, {:.1} s; {}",
            self.schedule.seed,
            self.acked,
            self.lost.len(),
            self.wrong_bytes.len(),
            self.duplicates,
            self.bound,
            self.unacked,
            self.unowed,
            self.fenced,
            self.took.as_secs_f64(),
            faults.join(", ")
        )
    }
}

/// The nodes as the nemesis runs them: their processes and where the
/// provider reaches them (`None` while down).
struct Nodes {
    running: Vec<Option<RunningNode>>,
    ingest: Arc<Mutex<Vec<Option<SocketAddr>>>>,
    /// Nodes that stopped themselves (status 75: taken over while cut
    /// off or paused) and were started again.
    fenced: usize,
    /// What each process of a node logged, in order: the evidence of a
    /// failed schedule.
    logs: Vec<(usize, String)>,
}

impl Nodes {
    fn set(&mut self, i: usize, node: Option<RunningNode>) {
        self.ingest.lock().expect("ingest")[i] = node.as_ref().map(|n| n.ingest);
        self.running[i] = node;
    }
}

/// Run one schedule on a fresh cluster and fleet; `bin`: the `ankusa`
/// binary (default: the test build's).
pub async fn run(schedule: Schedule, bin: Option<PathBuf>) -> Verdict {
    let started = Instant::now();
    let mut cluster = Cluster::start(3).await;
    let receiver = Receiver::start(Reply::status(200).delay(RECEIVER_DELAY)).await;
    let fleet = match bin {
        Some(bin) => Fleet::with_binary(bin),
        None => Fleet::new(),
    };
    let mut proxies = Vec::new();
    for _ in NODES {
        proxies.push(FaultProxy::start(&cluster.addrs()).await);
    }
    let mut nodes =
        Nodes { running: Vec::new(), ingest: Arc::new(Mutex::new(Vec::new())), fenced: 0, logs: Vec::new() };
    for (i, id) in NODES.iter().enumerate() {
        let node = fleet.start_via(&proxies[i].yaml_urls(), id, &receiver).await;
        nodes.ingest.lock().expect("ingest").push(Some(node.ingest));
        nodes.running.push(Some(node));
    }

    let provider = Provider::start(schedule.seed, nodes.ingest.clone());
    for (pause, fault) in &schedule.steps {
        tokio::time::sleep(Duration::from_millis(*pause)).await;
        // A node that stopped itself (it found it was taken over while cut
        // off) is started again, as a supervisor would.
        for i in 0..NODES.len() {
            restart_if_stopped(i, &mut nodes, &fleet, &proxies, &receiver).await;
        }
        apply(fault, &mut cluster, &proxies, &mut nodes, &fleet, &receiver, &provider).await;
    }

    // Heal everything; every node runs; the provider finishes what it
    // started; then everything acked must arrive.
    for proxy in &proxies {
        proxy.set(Mode::Pass);
    }
    for i in 0..NODES.len() {
        restart_if_stopped(i, &mut nodes, &fleet, &proxies, &receiver).await;
    }
    let (acked, unacked, answers) = provider.finish().await;
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        let got = deliveries(&receiver);
        if acked.keys().all(|id| got.contains_key(id)) {
            break;
        }
        // A node that found it was taken over while the provider finished
        // stops: start it again, as an operator's supervisor would.
        for i in 0..NODES.len() {
            restart_if_stopped(i, &mut nodes, &fleet, &proxies, &receiver).await;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Late duplicates have a moment to show.
    tokio::time::sleep(OUTCOME_FLUSH * 5).await;
    let got = deliveries(&receiver);
    let mut lost = Vec::new();
    let mut wrong_bytes = Vec::new();
    for (id, body) in &acked {
        match got.get(id) {
            None => lost.push(id.clone()),
            Some(copies) if copies.iter().any(|c| c != body.as_bytes()) => wrong_bytes.push(id.clone()),
            Some(_) => {}
        }
    }
    let duplicates = got.values().map(|c| c.len() - 1).sum();
    let unowed = got.keys().filter(|id| !acked.contains_key(*id)).count();
    let per_lapse =
        CONCURRENCY + (OUTCOME_FLUSH.as_micros() * CONCURRENCY as u128 / RECEIVER_DELAY.as_micros()) as usize;
    let lapses = schedule.steps.iter().filter(|(_, fault)| fault.may_lapse()).count();
    for (i, slot) in nodes.running.iter_mut().enumerate() {
        if let Some(node) = slot.take() {
            nodes.logs.push((i, node.log()));
            node.kill();
        }
    }
    let bound = lapses * per_lapse;
    let evidence = if lost.is_empty() && wrong_bytes.is_empty() && duplicates <= bound {
        None
    } else {
        let stream = stream_evidence(&cluster, &lost).await;
        Some(write_evidence(schedule.seed, &lost, &acked, &answers, &nodes.logs, &cluster, &stream))
    };
    Verdict {
        schedule,
        acked: acked.len(),
        unacked,
        lost,
        wrong_bytes,
        duplicates,
        bound,
        unowed,
        fenced: nodes.fenced,
        took: started.elapsed(),
        evidence,
    }
}

/// Where the stream holds each lost hook (its subject, position, store,
/// seq and message id), the outcomes published for those, and the
/// takeover records.
async fn stream_evidence(cluster: &Cluster, lost: &[String]) -> String {
    use async_nats::jetstream::consumer::pull::OrderedConfig;
    use futures_util::StreamExt;
    let mut out = Vec::new();
    let js = cluster.client().await;
    let Ok(mut stream) = js.get_stream("ANKUSA").await else { return "no stream".into() };
    let last = stream.info().await.map(|info| info.state.last_sequence).unwrap_or(0);
    let Ok(consumer) = stream.create_consumer(OrderedConfig::default()).await else { return "no consumer".into() };
    let Ok(mut messages) = consumer.messages().await else { return "no messages".into() };
    let mut of_lost: Vec<(String, u64)> = Vec::new();
    let mut outcomes = Vec::new();
    while let Ok(Some(Ok(message))) = tokio::time::timeout(Duration::from_secs(3), messages.next()).await {
        let Ok(info) = message.info() else { break };
        let position = info.stream_sequence;
        let header = |name: &str| {
            message.headers.as_ref().and_then(|h| h.get(name)).map(|v| v.as_str().to_string()).unwrap_or_default()
        };
        if message.subject.contains(".hook.") {
            let id = ankusa::queue::handoff::decode(&message.payload).map(|h| h.envelope.id).unwrap_or_default();
            if lost.contains(&id) || (id.is_empty() && !header("Ankusa-Body").is_empty()) {
                out.push(format!(
                    "{position} {} store={} seq={} msg-id={} body={} id={id}",
                    message.subject,
                    header("Ankusa-Store"),
                    header("Ankusa-Seq"),
                    header("Nats-Msg-Id"),
                    header("Ankusa-Body")
                ));
                of_lost.push((header("Ankusa-Store"), header("Ankusa-Seq").parse().unwrap_or(0)));
            }
        } else if let Ok(decoded) = ankusa::fleet::outcomes::decode(&message.payload) {
            outcomes.push((position, message.subject.to_string(), decoded));
        }
        if position >= last {
            break;
        }
    }
    for (position, subject, decoded) in outcomes {
        for (seq, sink, outcome) in decoded.rows {
            if of_lost.contains(&(decoded.store.clone(), seq)) {
                out.push(format!("{position} {subject} store={} seq={seq} sink={sink} {outcome:?}", decoded.store));
            }
        }
    }
    if let Ok(bucket) = js.get_key_value("ANKUSA-fleet").await {
        for node in NODES {
            if let Ok(Some(value)) = bucket.get(format!("taken.{node}")).await {
                out.push(format!("taken.{node}: {}", String::from_utf8_lossy(&value)));
            }
        }
    }
    out.join("\n")
}

fn write_evidence(
    seed: u64,
    lost: &[String],
    acked: &Acked,
    answers: &[String],
    logs: &[(usize, String)],
    cluster: &Cluster,
    stream: &str,
) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ankusa-nemesis-{seed}"));
    let _ = std::fs::create_dir_all(&dir);
    let lost: Vec<String> =
        lost.iter().map(|id| format!("{id} {}", acked.get(id).map_or("", |b| &b[..b.len().min(80)]))).collect();
    let _ = std::fs::write(dir.join("lost.txt"), lost.join("\n"));
    let _ = std::fs::write(dir.join("answers.txt"), answers.join("\n"));
    let _ = std::fs::write(dir.join("stream.txt"), stream);
    for (n, (node, log)) in logs.iter().enumerate() {
        let _ = std::fs::write(dir.join(format!("{n:02}-{}.log", NODES[*node])), log);
    }
    let _ = std::fs::write(dir.join("nats.log"), cluster.log.lock().map(|l| l.clone()).unwrap_or_default());
    dir
}

async fn apply(
    fault: &Fault,
    cluster: &mut Cluster,
    proxies: &[FaultProxy],
    nodes: &mut Nodes,
    fleet: &Fleet,
    receiver: &Receiver,
    provider: &Provider,
) {
    let wait = |ms: u64| tokio::time::sleep(Duration::from_millis(ms));
    match fault {
        Fault::Partition { node, ms } => {
            proxies[*node].set(Mode::Refuse);
            proxies[*node].cut();
            wait(*ms).await;
            proxies[*node].set(Mode::Pass);
        }
        // Bytes dropped on the way leave a connection's protocol stream
        // torn: healing cuts it, and the client reconnects.
        Fault::Hang { node, ms } | Fault::OneWay { node, ms } => {
            proxies[*node].set(if matches!(fault, Fault::Hang { .. }) { Mode::Hold } else { Mode::OneWay });
            wait(*ms).await;
            proxies[*node].set(Mode::Pass);
            proxies[*node].cut();
        }
        Fault::Slow { node, by_ms, ms } => {
            proxies[*node].set(Mode::Delay(Duration::from_millis(*by_ms)));
            wait(*ms).await;
            proxies[*node].set(Mode::Pass);
        }
        Fault::CutRound { node, publishes } => {
            let subject_contains = format!(".hook.{}", NODES[*node]);
            proxies[*node].set(Mode::CutAfter { publishes: *publishes, subject_contains });
            let cut_by = Instant::now() + Duration::from_secs(5);
            while proxies[*node].mode() != Mode::Refuse && Instant::now() < cut_by {
                wait(20).await;
            }
            wait(300).await;
            proxies[*node].set(Mode::Pass);
        }
        Fault::Kill { node, wipe, down_ms } => {
            if let Some(running) = nodes.running[*node].take() {
                nodes.set(*node, None);
                nodes.logs.push((*node, running.log()));
                running.kill();
            }
            if *wipe {
                let _ = std::fs::remove_dir_all(fleet.data(NODES[*node]));
            }
            wait(*down_ms).await;
            restart_if_stopped(*node, nodes, fleet, proxies, receiver).await;
        }
        Fault::Pause { node, ms } => {
            if let Some(running) = &nodes.running[*node] {
                running.signal("STOP");
                wait(*ms).await;
                running.signal("CONT");
            }
            wait(LEASE_TTL_MS).await;
            restart_if_stopped(*node, nodes, fleet, proxies, receiver).await;
        }
        Fault::KillServer { server, down_ms } => {
            cluster.kill_server(*server);
            wait(*down_ms).await;
            cluster.start_server(*server);
        }
        Fault::BigHook => provider.post_big(),
    }
}

/// Start node `i` again if it is not running (killed, or stopped itself
/// after a takeover), on the same data directory.
async fn restart_if_stopped(i: usize, nodes: &mut Nodes, fleet: &Fleet, proxies: &[FaultProxy], receiver: &Receiver) {
    if let Some(node) = nodes.running[i].as_mut() {
        match node.exited_within(Duration::ZERO).await {
            None => return,
            Some(status) if status.code() == Some(75) => nodes.fenced += 1,
            Some(status) => panic!("node {} exited with {status}:\n{}", NODES[i], node.log()),
        }
        let log = node.log();
        nodes.logs.push((i, log));
    }
    nodes.set(i, None);
    let node = fleet.start_supervised(&proxies[i].yaml_urls(), NODES[i], receiver).await;
    nodes.set(i, Some(node));
}

/// Posts hooks and retries each until it is acked, as a provider does.
struct Provider {
    answers: Arc<Mutex<Vec<String>>>,
    started: Instant,
    acked: Arc<Mutex<Acked>>,
    unacked: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    ingest: Arc<Mutex<Vec<Option<SocketAddr>>>>,
    seed: u64,
    next: Arc<AtomicUsize>,
}

/// Posting workers.
const WORKERS: usize = 8;
/// A refused hook is retried this often, up to [`RETRIES`] times.
const RETRY_EVERY: Duration = Duration::from_millis(250);
const RETRIES: usize = 240;

impl Provider {
    fn start(seed: u64, ingest: Arc<Mutex<Vec<Option<SocketAddr>>>>) -> Provider {
        let provider = Provider {
            answers: Arc::default(),
            started: Instant::now(),
            acked: Arc::default(),
            unacked: Arc::default(),
            stop: Arc::default(),
            tasks: Mutex::default(),
            ingest,
            seed,
            next: Arc::default(),
        };
        for w in 0..WORKERS {
            let mut rng = Rng::new(seed ^ (w as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let (stop, next) = (provider.stop.clone(), provider.next.clone());
            let handle = provider.handle();
            provider.tasks.lock().expect("tasks").push(tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    let n = next.fetch_add(1, Ordering::SeqCst);
                    let body = format!("{{\"seed\":{seed},\"n\":{n},\"pad\":\"{}\"}}", "x".repeat(rng.below(400)));
                    handle.deliver(&mut rng, format!("{seed}-{n}"), body).await;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }));
        }
        provider
    }

    fn handle(&self) -> Posting {
        Posting {
            acked: self.acked.clone(),
            unacked: self.unacked.clone(),
            ingest: self.ingest.clone(),
            answers: self.answers.clone(),
            started: self.started,
        }
    }

    /// Post a hook over the servers' message limit, retried like any other.
    fn post_big(&self) {
        let n = self.next.fetch_add(1, Ordering::SeqCst);
        let seed = self.seed;
        let body = format!("{{\"seed\":{seed},\"n\":{n},\"big\":\"{}\"}}", "b".repeat(BIG_BYTES));
        let handle = self.handle();
        let mut rng = Rng::new(seed ^ n as u64);
        self.tasks
            .lock()
            .expect("tasks")
            .push(tokio::spawn(async move { handle.deliver(&mut rng, format!("{seed}-{n}"), body).await }));
    }

    /// Stop posting new hooks, let every started one be acked or given
    /// up; what was acked, and how many were given up.
    async fn finish(self) -> (Acked, usize, Vec<String>) {
        self.stop.store(true, Ordering::SeqCst);
        let tasks = std::mem::take(&mut *self.tasks.lock().expect("tasks"));
        for task in tasks {
            let _ = task.await;
        }
        let acked = std::mem::take(&mut *self.acked.lock().expect("acked"));
        let answers = std::mem::take(&mut *self.answers.lock().expect("answers"));
        (acked, self.unacked.load(Ordering::SeqCst), answers)
    }
}

#[derive(Clone)]
struct Posting {
    acked: Arc<Mutex<Acked>>,
    unacked: Arc<AtomicUsize>,
    ingest: Arc<Mutex<Vec<Option<SocketAddr>>>>,
    /// Every answer the provider got, for the evidence of a failure.
    answers: Arc<Mutex<Vec<String>>>,
    started: Instant,
}

impl Posting {
    /// Post until acked, at a node picked at random each time.
    async fn deliver(&self, rng: &mut Rng, key: String, body: String) {
        for _ in 0..RETRIES {
            let up: Vec<SocketAddr> = self.ingest.lock().expect("ingest").iter().flatten().copied().collect();
            let Some(addr) = up.get(rng.below(up.len())).copied() else {
                tokio::time::sleep(RETRY_EVERY).await;
                continue;
            };
            let answer = try_post(addr, &key, &body).await;
            let at = self.started.elapsed().as_secs_f64();
            let said = match &answer {
                Some((status, answer, _)) => format!("{status} {answer}"),
                None => "no answer".to_string(),
            };
            self.answers.lock().expect("answers").push(format!("{at:.3} {key} via {addr}: {said}"));
            if let Some((201, answer, _)) = answer
                && let Some(id) = answer["id"].as_str()
            {
                self.acked.lock().expect("acked").insert(id.to_string(), body);
                return;
            }
            tokio::time::sleep(RETRY_EVERY).await;
        }
        self.unacked.fetch_add(1, Ordering::SeqCst);
    }
}
