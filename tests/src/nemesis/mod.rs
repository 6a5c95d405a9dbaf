//! Seeded fault schedules against a real fleet, and the checker that
//! judges them (a nemesis and a checker, after Jepsen).
//!
//! Two or three nodes, each reaching a 3-server JetStream cluster (Debian's
//! nats-server or a current one) only through its own [`FaultProxy`]; a
//! provider posting hooks, keyless and ordered by key, and retrying every
//! refusal until it is acked, at any node up; a sink that is slow, down at
//! times, and refuses a few hooks for good (dead letters); and a nemesis
//! whose faults overlap (`schedule`): links cut, hung, one-way or slowed, a
//! publish round cut midway, nodes killed (with their disks, or their taker
//! mid-import), paused, restarted or restarted in turn, NATS servers killed
//! or paused, leaders stepping down, the sink down, hooks over the servers'
//! `max_payload`; some schedules keep the stream's retention short. At the
//! end every fault is healed, every node runs, and the checker judges each
//! hook, each ordered key and each lapse (`checker`).

mod checker;
mod provider;
mod schedule;
mod world;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use checker::{Verdict, per_lapse};
pub use schedule::{Fault, NODE_IDS, Schedule, Step};

use crate::binary::RunningNode;
use crate::fault_proxy::FaultProxy;
use crate::fleet::Fleet;
use crate::nats_cluster::Cluster;
use crate::receiver::{Receiver, Reply};
use checker::{LEASE, RECEIVER_DELAY, deliveries};
use provider::{ORDER_HEADER, Posted, Provider};
use world::{Slot, World};

/// What a doomed hook's body holds: the sink refuses it for good.
const DOOMED: &[u8] = b"\"doomed\":true,";

/// How long every acked hook has to arrive once the faults are healed.
const DRAIN: Duration = Duration::from_secs(120);

/// Run one schedule on a fresh cluster and fleet; `bin`: the `ankusa`
/// binary (default: the test build's).
pub async fn run(schedule: Schedule, bin: Option<PathBuf>) -> Verdict {
    let (t0, t0_wall) = (Instant::now(), std::time::SystemTime::now());
    let cluster = Cluster::start_on(3, schedule.server).await;
    let sink_down = Arc::new(AtomicBool::new(false));
    let down = sink_down.clone();
    let receiver = Receiver::judging(move |_, request| {
        if request.body.windows(DOOMED.len()).any(|w| w == DOOMED) {
            Reply::status(400)
        } else if down.load(Ordering::SeqCst) {
            Reply::status(503)
        } else {
            Reply::status(200).delay(RECEIVER_DELAY)
        }
    })
    .await;
    let dedupe_ms = (schedule.retention_ms / 2).min(300_000);
    let config = format!("  retention_ms: {}\ndedupe: {{ttl_ms: {dedupe_ms}}}", schedule.retention_ms);
    let fleet = bin.map_or_else(Fleet::new, Fleet::with_binary).and_ordered(&format!("header:{ORDER_HEADER}"));
    let fleet = fleet.and_config(&config);
    let mut proxies = Vec::new();
    for _ in 0..schedule.nodes {
        proxies.push(FaultProxy::start(&cluster.addrs()).await);
    }
    let world = Arc::new(World {
        t0,
        t0_wall,
        nodes: schedule.nodes,
        cluster: tokio::sync::Mutex::new(cluster),
        proxies,
        slots: (0..schedule.nodes).map(|_| tokio::sync::Mutex::new(Slot::default())).collect(),
        ingest: Arc::new(Mutex::new(vec![None; schedule.nodes])),
        fleet,
        receiver,
        sink_down,
        lapses: Mutex::default(),
        fenced: Mutex::default(),
        crashes: Mutex::default(),
        logs: Mutex::default(),
    });
    for i in 0..schedule.nodes {
        let mut slot = world.slots[i].lock().await;
        world.start(i, &mut slot).await;
    }

    let provider_t0 = world.since();
    let provider = Arc::new(Provider::start(schedule.seed, world.ingest.clone()));
    let supervising = Arc::new(AtomicBool::new(true));
    let supervisor = tokio::spawn(supervise(world.clone(), supervising.clone()));
    let begun = Instant::now();
    let mut faults = Vec::new();
    for step in &schedule.steps {
        let (world, provider, step) = (world.clone(), provider.clone(), step.clone());
        faults.push(tokio::spawn(async move {
            tokio::time::sleep_until((begun + Duration::from_millis(step.at_ms)).into()).await;
            world.apply(&step.fault, &provider).await;
        }));
    }
    for fault in faults {
        let _ = fault.await;
    }
    world.heal().await;
    let healed_at = world.since();
    let provider = Arc::try_unwrap(provider).unwrap_or_else(|_| panic!("the provider is still shared"));
    let posted = provider.finish().await;

    // Everything acked arrives (or, doomed, is dead); then no delivery for
    // two leases, so late duplicates show.
    let owed: Vec<&String> = posted.acked.iter().filter(|(_, s)| !s.doomed).map(|(id, _)| id).collect();
    let deadline = Instant::now() + DRAIN;
    while Instant::now() < deadline {
        let got: HashSet<String> = deliveries(&world.receiver.received(), t0).into_iter().map(|d| d.id).collect();
        if owed.iter().all(|id| got.contains(*id)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    quiet_for(&world, 2 * LEASE, Duration::from_secs(30)).await;
    supervising.store(false, Ordering::SeqCst);
    let _ = supervisor.await;
    let dead = dead_letters(&world).await;
    let logged = world.logged_lapses().await;
    world.lapses.lock().expect("lapses").extend(logged.iter().cloned());

    let mut verdict = Verdict::judge(
        &schedule,
        &posted,
        &deliveries(&world.receiver.received(), t0),
        &dead,
        &world.lapses.lock().expect("lapses"),
        healed_at,
        provider_t0,
    );
    verdict.server = schedule.server.version();
    verdict.logged = logged.len();
    verdict.fenced = world.fenced.lock().expect("fenced").len();
    verdict.crashes = world.crashes.lock().expect("crashes").clone();
    // What the deliverers of the first unexplained duplicates logged
    // around them: the reason, in the failure's own output.
    for (by, first, last) in verdict.unexplained_spans.clone().into_iter().take(3) {
        for node in by {
            let from = first.saturating_sub(Duration::from_secs(3));
            let lines = world.lines_near(&node, from, last + Duration::from_secs(1)).await;
            verdict.context.extend(lines.into_iter().take(40));
        }
    }
    if !verdict.holds() {
        verdict.evidence = Some(write_evidence(&world, &verdict, &posted, provider_t0).await);
    }
    world.end().await;
    verdict.took = t0.elapsed();
    verdict
}

/// Nodes that exit by themselves are started again, as a supervisor would.
async fn supervise(world: Arc<World>, running: Arc<AtomicBool>) {
    while running.load(Ordering::SeqCst) {
        for i in 0..world.nodes {
            world.restart_if_exited(i).await;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Until the receiver has had no delivery for `quiet` (at most `within`).
async fn quiet_for(world: &World, quiet: Duration, within: Duration) {
    let started = Instant::now();
    while started.elapsed() < within {
        let last = world.receiver.received().iter().map(|r| r.at).max();
        if last.is_none_or(|at| at.elapsed() >= quiet) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The ids of every dead letter in every node's DLQ.
async fn dead_letters(world: &World) -> HashSet<String> {
    let mut ids = HashSet::new();
    for slot in &world.slots {
        let slot = slot.lock().await;
        let Some(node) = slot.running.as_ref() else { continue };
        ids.extend(dlq_ids(node).await);
    }
    ids
}

async fn dlq_ids(node: &RunningNode) -> Vec<String> {
    let mut ids = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/dlq?limit=1000&cursor={c}"),
            None => "/v1/dlq?limit=1000".to_string(),
        };
        let (_, page) = node.admin("GET", &path, None, None).await;
        let entries = page["entries"].as_array().cloned().unwrap_or_default();
        ids.extend(entries.iter().filter_map(|e| e["id"].as_str().map(str::to_string)));
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_string()),
            None => return ids,
        }
    }
}

/// Write a failed schedule's evidence: the verdict's lists, when it began,
/// the provider's answers, every node process's log, the NATS servers' log
/// and what the stream holds of the lost hooks.
async fn write_evidence(world: &World, verdict: &Verdict, posted: &Posted, provider_t0: Duration) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ankusa-nemesis-{}", verdict.seed));
    let _ = std::fs::create_dir_all(&dir);
    let lists = [
        ("lost", &verdict.lost),
        ("wrong-bytes", &verdict.wrong_bytes),
        ("dead-lost", &verdict.dead_lost),
        ("unexplained", &verdict.unexplained),
        ("over-bound", &verdict.over_bound),
        ("out-of-order", &verdict.out_of_order),
        ("late-acks", &verdict.late_acks),
        ("crashes", &verdict.crashes),
    ];
    let mut summary = vec![
        verdict.to_string(),
        format!(
            "t0: {} (lapses and deliveries count from it; answers.txt from {:.3} s after it)",
            humantime::format_rfc3339_millis(world.t0_wall),
            provider_t0.as_secs_f64()
        ),
    ];
    for (name, list) in lists {
        summary.push(format!("{name}:"));
        summary.extend(list.iter().map(|l| format!("  {l}")));
    }
    summary.push("logged around the unexplained:".into());
    summary.extend(verdict.context.iter().map(|l| format!("  {l}")));
    let lapses = world.lapses.lock().expect("lapses").clone();
    summary.push("lapses:".into());
    summary.extend(lapses.iter().map(|l| format!("  {l:?}")));
    let _ = std::fs::write(dir.join("verdict.txt"), summary.join("\n"));
    let _ = std::fs::write(dir.join("answers.txt"), posted.answers.join("\n"));
    // What each node running says of itself (its rows by state, its view
    // of the fleet), and everything it logged so far.
    for (i, slot) in world.slots.iter().enumerate() {
        let slot = slot.lock().await;
        let Some(node) = slot.running.as_ref() else { continue };
        let (_, fleet) = node.admin("GET", "/v1/fleet", None, None).await;
        let (_, metrics) = node.admin("GET", "/metrics", None, None).await;
        let state = format!("{fleet:#}\n\n{}", metrics.as_str().unwrap_or_default());
        let _ = std::fs::write(dir.join(format!("state-{}.txt", NODE_IDS[i])), state);
        let _ = std::fs::write(dir.join(format!("last-{}.log", NODE_IDS[i])), node.log());
    }
    let cluster = world.cluster.lock().await;
    let _ = std::fs::write(dir.join("stream.txt"), stream_evidence(&cluster, &verdict.lost).await);
    for (n, (node, log)) in world.logs.lock().expect("logs").iter().enumerate() {
        let _ = std::fs::write(dir.join(format!("{n:02}-{}.log", NODE_IDS[*node])), log);
    }
    let _ = std::fs::write(dir.join("nats.log"), cluster.log.lock().map(|l| l.clone()).unwrap_or_default());
    dir
}

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
        for node in NODE_IDS {
            if let Ok(Some(value)) = bucket.get(format!("taken.{node}")).await {
                out.push(format!("taken.{node}: {}", String::from_utf8_lossy(&value)));
            }
        }
    }
    out.join("\n")
}
