//! `wal.mode: fleet` against real `nats-server` processes: a 3-server
//! JetStream cluster on free loopback ports and Ankusa nodes from the real
//! binary. An acked hook survives losing its node and its disk; a retry on
//! another node is a duplicate; a node back after its takeover delivers
//! nothing twice; losing NATS servers costs acks, never a false one; a
//! publish round cut midway, a hook over the servers' message limit, a
//! stream made again, a node paused past its lease and a takeover during a
//! bucket leader election lose nothing; a taker killed mid-import costs no
//! duplicate; a taker delivers each ordering
//! key's hooks in order; bad fleet config is refused by name.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use ankusa_tests::ankusa_bin;
use ankusa_tests::binary::{RunningNode, collect, eventually, write_config};
use ankusa_tests::fault_proxy::{FaultProxy, Mode};
use ankusa_tests::fleet::{
    Acked, Fleet, GatedPair, LEASE_TTL_MS, all_delivered, check_delivered, deliveries, gated_receiver, load, node_yaml,
    try_post, wait_taken,
};
use ankusa_tests::nats_cluster::{Cluster, NatsServer};
use ankusa_tests::receiver::{Receiver, Reply};
use serde_json::Value;

ankusa_tests::on_both_servers!(
    an_acked_hook_survives_losing_its_node_and_its_disk,
    an_acked_hook_survives_losing_its_node_and_its_disk_on_a_current_server
        => on_an_acked_hook_survives_losing_its_node_and_its_disk
);

async fn on_an_acked_hook_survives_losing_its_node_and_its_disk(server: NatsServer) {
    let cluster = Cluster::start_on(3, server).await;
    // Slow enough that node a still holds most of its hooks when it dies.
    let receiver = Receiver::start(Reply::status(200).delay(Duration::from_millis(20))).await;
    let fleet = Fleet::new();
    let a = fleet.start(&cluster, "a", &receiver).await;
    let b = fleet.start(&cluster, "b", &receiver).await;
    assert!(
        a.banner().contains("an ack survives: the loss of this host; quorum of 3 JetStream servers"),
        "{}",
        a.banner()
    );

    // A provider's retry that reaches the other node is a duplicate.
    let (status, first, _) = try_post(a.ingest, "retried-1", "{\"retry\":1}").await.expect("answer");
    assert_eq!(status, 201);
    let (status, again, _) = try_post(b.ingest, "retried-1", "{\"retry\":1}").await.expect("answer");
    assert_eq!((status, again["duplicate"].as_bool()), (201, Some(true)), "{again}");
    assert_eq!(again["id"], first["id"], "the duplicate names the original");

    // Load on both nodes; a is killed under it and its disk deleted.
    let (a_ingest, b_ingest) = (a.ingest, b.ingest);
    let on_a = tokio::spawn(load(a_ingest, "a", 600, 8));
    let on_b = tokio::spawn(load(b_ingest, "b", 300, 4));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let killed = Instant::now();
    a.kill();
    std::fs::remove_dir_all(fleet.data("a")).expect("delete a's data directory");
    let (acked_a, _) = on_a.await.expect("load on a");
    let (acked_b, refused_b) = on_b.await.expect("load on b");
    assert!(refused_b.is_empty(), "node b refused hooks while a died: {refused_b:?}");
    assert!(acked_a.len() > 50, "a acked only {} hooks before it died", acked_a.len());

    let taken = wait_taken(&b, "b", "a", Duration::from_secs(60)).await;
    let mut acked: Acked = acked_a.clone();
    acked.extend(acked_b);
    acked.insert(first["id"].as_str().expect("id").to_string(), "{\"retry\":1}".to_string());
    all_delivered("every acked hook delivered", &acked, &receiver, Duration::from_secs(120)).await;
    let first_delivery_after = killed.elapsed();
    let duplicates = check_delivered(&acked, &receiver);
    if std::env::var("FLEET_DEBUG").is_ok() {
        let log = b.log();
        eprintln!(
            "{}",
            log.lines()
                .filter(|l| !l.contains("async_nats") && !l.contains("due index entry"))
                .take(200)
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    println!(
        "fleet takeover ({}): a acked {} hooks, b took over {} ({} already delivered), all {} acked hooks delivered \
         within {:.1} s of the kill; duplicate deliveries: {duplicates}",
        server.version(),
        acked_a.len(),
        taken["imported"],
        taken["delivered"],
        acked.len(),
        first_delivery_after.as_secs_f64()
    );
    // The bound the README states: what a delivered in the last outcome
    // flush (100 ms at 2 x 50/s) plus what it had in flight.
    assert!(duplicates <= 12, "{duplicates} duplicate deliveries");
}

/// Lines of a node's log that say a takeover ran, of it or by it.
fn takeover_lines(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| {
            l.contains("taking over a node whose lease lapsed")
                || l.contains("took this node over")
                || l.contains("lease was claimed by a peer")
                || l.contains("waiting for this node id")
        })
        .map(str::to_string)
        .collect()
}

ankusa_tests::on_both_servers!(
    a_rolling_restart_within_the_lease_moves_nothing,
    a_rolling_restart_within_the_lease_moves_nothing_on_a_current_server
        => on_a_rolling_restart_within_the_lease_moves_nothing
);

/// A rolling restart of both nodes under load, each back on its own disk
/// at once, a by SIGTERM and b by `kill -9`: each takes its lease up again
/// (no takeover runs, no row is dropped), nothing acked is lost, every
/// hook arrives with its bytes, and a hook is delivered twice only where
/// b was killed with it in flight (at most `dispatch.concurrency`, 2).
async fn on_a_rolling_restart_within_the_lease_moves_nothing(server: NatsServer) {
    let cluster = Cluster::start_on(3, server).await;
    // Slow enough that both nodes hold backlogs when they restart.
    let receiver = Receiver::start(Reply::status(200).delay(Duration::from_millis(10))).await;
    let fleet = Fleet::new();
    let a = fleet.start(&cluster, "a", &receiver).await;
    let b = fleet.start(&cluster, "b", &receiver).await;
    let mut acked = Acked::new();
    let mut logs = Vec::new();
    for round in 0..2 {
        let (tag_a, tag_b) = (format!("a{round}"), format!("b{round}"));
        let (on_a, on_b) = tokio::join!(load(a.ingest, &tag_a, 200, 8), load(b.ingest, &tag_b, 200, 8));
        for (got, refused) in [on_a, on_b] {
            assert!(refused.is_empty(), "round {round}: {refused:?}");
            acked.extend(got);
        }
    }
    // a: a graceful stop and a start on its own disk, while b takes hooks.
    let beside = tokio::spawn(load(b.ingest, "during-a", 200, 4));
    let stopping = Instant::now();
    let (status, log) = a.stop();
    assert!(status.success(), "{log}");
    logs.push(log);
    let a = fleet.start(&cluster, "a", &receiver).await;
    let a_back = stopping.elapsed();
    let (got, refused) = beside.await.expect("load on b");
    assert!(refused.is_empty(), "b refused hooks while a restarted: {refused:?}");
    acked.extend(got);
    // b: killed, and started on its own disk, while a takes hooks.
    let beside = tokio::spawn(load(a.ingest, "during-b", 200, 4));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let killing = Instant::now();
    logs.push(b.log());
    b.kill();
    let b = fleet.start(&cluster, "b", &receiver).await;
    let b_back = killing.elapsed();
    let (got, refused) = beside.await.expect("load on a");
    assert!(refused.is_empty(), "a refused hooks while b restarted: {refused:?}");
    acked.extend(got);

    all_delivered("every acked hook delivered", &acked, &receiver, Duration::from_secs(120)).await;
    // Two leases more, for a late takeover or a late duplicate.
    tokio::time::sleep(Duration::from_millis(2 * LEASE_TTL_MS)).await;
    let duplicates = check_delivered(&acked, &receiver);
    logs.push(a.log());
    logs.push(b.log());
    let takeovers: Vec<String> = logs.iter().flat_map(|log| takeover_lines(log)).collect();
    for node in [&a, &b] {
        let (_, status) = node.admin("GET", "/v1/fleet", None, None).await;
        for peer in status["nodes"].as_array().into_iter().flatten() {
            // A peer that judged a restarting node lapsed may have begun a
            // claim and lost the lease to it: its record took nothing.
            let taken = &peer["taken"];
            let took = taken["through"].as_u64().unwrap_or(0) >= taken["from"].as_u64().unwrap_or(1);
            assert!(taken.is_null() || !took, "a takeover that took hooks: {peer}");
        }
    }
    println!(
        "rolling restart ({}): {} acked hooks delivered; a back in {:.2} s, b in {:.2} s; duplicates {duplicates}",
        server.version(),
        acked.len(),
        a_back.as_secs_f64(),
        b_back.as_secs_f64()
    );
    assert!(takeovers.is_empty(), "a restart was taken over: {takeovers:?}");
    assert!(duplicates <= 2, "{duplicates} duplicate deliveries");
}

/// A node back after a takeover drops exactly the hooks its peer read,
/// no more: a dead letter whose stream copy aged out before the takeover
/// (short `retention_ms`) was never read by the peer, and stays in the
/// node's DLQ. (A node used to drop every row at or below the highest seq
/// its peer took, that dead letter with them: its only copy.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_back_after_a_takeover_keeps_what_its_peer_never_read() {
    let cluster = Cluster::start(3).await;
    let open = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let gate = open.clone();
    let receiver = Receiver::judging(move |_, request| match request.body.windows(6).any(|w| w == b"doomed") {
        true => Reply::status(400),
        false => Reply::status(if gate.load(Ordering::SeqCst) { 200 } else { 503 }),
    })
    .await;
    let fleet = Fleet::with_config("  retention_ms: 4000\ndedupe: {ttl_ms: 2000}");
    let a = fleet.start(&cluster, "a", &receiver).await;
    let b = fleet.start(&cluster, "b", &receiver).await;
    let (status, doomed, _) = try_post(a.ingest, "doomed", "{\"doomed\":true}").await.expect("answer");
    assert_eq!(status, 201, "{doomed}");
    let dead_on = async |node: &ankusa_tests::binary::RunningNode| {
        let (_, page) = node.admin("GET", "/v1/dlq", None, None).await;
        page["entries"].as_array().is_some_and(|e| e.iter().any(|e| e["id"] == doomed["id"]))
    };
    eventually("the doomed hook dead on a", Duration::from_secs(20), async || dead_on(&a).await).await;
    // Past the stream's retention: the dead letter's stream copy is gone.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let (backlog, refused) = load(a.ingest, "backlog", 20, 4).await;
    assert!(refused.is_empty(), "{refused:?}");
    a.kill();
    let taken = wait_taken(&b, "b", "a", Duration::from_secs(60)).await;
    assert_eq!(taken["imported"], 20, "{taken}");

    let a = fleet.start(&cluster, "a", &receiver).await;
    assert!(a.log().contains("took this node over while it was away"), "{}", a.log());
    assert!(dead_on(&a).await, "the dead letter its peer never read is still in a's DLQ");
    open.store(true, Ordering::SeqCst);
    all_delivered("the backlog, by b", &backlog, &receiver, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(check_delivered(&backlog, &receiver), 0, "a delivered none of what b took");
}

/// A tenant erased on a node whose hooks still wait in the stream: the
/// erase tells the fleet its rows are done, so the takeover of that node
/// passes them over instead of bringing the tenant back. (Before, b
/// delivered all 30 erased hooks.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tenant_erased_on_a_node_stays_erased_through_its_takeover() {
    let cluster = Cluster::start(3).await;
    let GatedPair { receiver, open, fleet: _fleet, a, b } = GatedPair::start(&cluster).await;
    let (erased, refused) = load(a.ingest, "erased", 30, 4).await;
    assert!(refused.is_empty(), "{refused:?}");
    let (status, erase) = a.admin("DELETE", "/v1/tenants/default", None, None).await;
    assert_eq!(status, 202, "{erase}");
    eventually("the erase to finish on a", Duration::from_secs(30), async || {
        let (_, erase) = a.admin("GET", "/v1/tenants/default", None, None).await;
        erase["phase"] == "done"
    })
    .await;
    // The erase's outcomes are published within a tenth of a second. The
    // sink answers from now on: whatever b takes, it delivers at once.
    tokio::time::sleep(Duration::from_millis(500)).await;
    open.store(true, Ordering::SeqCst);
    a.kill();
    let taken = wait_taken(&b, "b", "a", Duration::from_secs(60)).await;
    let (after, refused) = load(b.ingest, "after", 10, 2).await;
    assert!(refused.is_empty(), "{refused:?}");
    all_delivered("the hooks posted after the erase", &after, &receiver, Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_millis(2 * LEASE_TTL_MS)).await;
    let delivered = deliveries(&receiver);
    let back: Vec<_> = erased.keys().filter(|key| delivered.contains_key(*key)).collect();
    assert!(back.is_empty(), "{} erased hooks delivered after the takeover ({taken}): {back:?}", back.len());
    assert_eq!(taken["imported"], 0, "{taken}");
}

/// Two nodes, a backlog of 6 000 hooks on a (the sink down; an import
/// of that takes about a second), a killed: once b begins its takeover of
/// a, what a acked and b.
async fn backlog_being_taken(cluster: &Cluster, fleet: &Fleet, receiver: &Receiver) -> (Acked, RunningNode) {
    let a = fleet.start(cluster, "a", receiver).await;
    let b = fleet.start(cluster, "b", receiver).await;
    let (acked, refused) = load(a.ingest, "backlog", 6000, 16).await;
    assert!(refused.is_empty(), "{refused:?}");
    a.kill();
    eventually("b begins its takeover of a", Duration::from_secs(30), async || {
        b.log().contains("taking over a node whose lease lapsed")
    })
    .await;
    (acked, b)
}

/// The taker dies mid-import and the node comes back on its own disk
/// first: the node keeps its hooks and closes the takeover having taken
/// nothing, and the taker, back too, drops what it had imported of them,
/// so no hook is delivered twice. (A node used to take its own hooks back
/// into the store that still held them: every hook of the backlog twice.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_taker_killed_mid_import_costs_no_duplicate() {
    let cluster = Cluster::start(3).await;
    let (receiver, open) = gated_receiver().await;
    let fleet = Fleet::new();
    let (acked, b) = backlog_being_taken(&cluster, &fleet, &receiver).await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    let b_log = b.log();
    b.kill();
    assert!(!b_log.contains("takeover done"), "b finished its import before it was killed: {b_log}");

    let a = fleet.start(&cluster, "a", &receiver).await;
    assert!(a.log().contains("died mid-import"), "{}", a.log());
    let b = fleet.start(&cluster, "b", &receiver).await;
    open.store(true, Ordering::SeqCst);
    all_delivered("every acked hook delivered", &acked, &receiver, Duration::from_secs(120)).await;
    tokio::time::sleep(Duration::from_millis(2 * LEASE_TTL_MS)).await;
    let duplicates = check_delivered(&acked, &receiver);
    let dropped = b.log().lines().any(|line| line.contains("what it had imported is dropped here"));
    println!(
        "a taker killed mid-import: {} hooks delivered, {duplicates} twice; b dropped its part: {dropped}",
        acked.len()
    );
    assert_eq!(duplicates, 0, "hooks delivered twice");
}

/// As above, but the sink is up while the taker imports: it delivers part
/// of the backlog before it is killed. The node, back on its store first,
/// settles as delivered what the taker's published outcomes say it
/// delivered, so a hook comes twice only within the bound of the taker's
/// lapse: its attempts in flight and its last outcome flush (deliveries
/// in the 150 ms before the kill). (Before, the node delivered again
/// everything the taker had delivered of its imports.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_taker_killed_mid_import_after_delivering_some_repeats_only_its_last_moment() {
    let cluster = Cluster::start(3).await;
    let (receiver, open) = gated_receiver().await;
    let fleet = Fleet::new();
    let (acked, b) = backlog_being_taken(&cluster, &fleet, &receiver).await;
    open.store(true, Ordering::SeqCst);
    eventually("b delivers some of what it imports", Duration::from_secs(30), async || {
        deliveries(&receiver).len() >= 50
    })
    .await;
    let b_log = b.log();
    let killed = Instant::now();
    b.kill();
    let by_b: Vec<Instant> = receiver
        .received()
        .into_iter()
        .filter(|r| (200..300).contains(&r.status) && r.path.ends_with("/b"))
        .map(|r| r.at)
        .collect();
    assert!(!b_log.contains("takeover done"), "b finished its import before it was killed: {b_log}");
    let last_moment = by_b.iter().filter(|at| killed.duration_since(**at) <= Duration::from_millis(150)).count();
    let a = fleet.start(&cluster, "a", &receiver).await;
    assert!(a.log().contains("died mid-import"), "{}", a.log());
    let _b = fleet.start(&cluster, "b", &receiver).await;
    all_delivered("every acked hook delivered", &acked, &receiver, Duration::from_secs(120)).await;
    tokio::time::sleep(Duration::from_millis(2 * LEASE_TTL_MS)).await;
    let duplicates = check_delivered(&acked, &receiver);
    println!(
        "a taker killed mid-import after delivering {} hooks: {} hooks delivered, {duplicates} twice \
         (bound: 2 in flight + {last_moment} in its last 150 ms)",
        by_b.len(),
        acked.len()
    );
    assert!(duplicates <= 2 + last_moment, "{duplicates} delivered twice");
    drop(a);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_publish_round_cut_midway_leaves_no_ack_undelivered() {
    let cluster = Cluster::start(3).await;
    let receiver = Receiver::start(Reply::status(200)).await;
    let proxy = FaultProxy::start(&cluster.addrs()).await;
    let fleet = Fleet::new();
    // Node a reaches NATS only through the proxy; b directly.
    let a = fleet.start_via(&proxy.yaml_urls(), "a", &receiver).await;
    let b = fleet.start(&cluster, "b", &receiver).await;
    let body = |i: usize| format!("{{\"cut\":{i}}}");
    let (status, _, _) = try_post(a.ingest, "warm-up", &body(999)).await.expect("answer");
    assert_eq!(status, 201);

    // The next round of a's hook publishes is cut after its 4th: the
    // servers hold those four, their acks never come back, the rest never
    // leave.
    proxy.set(Mode::CutAfter { publishes: 4, subject_contains: ".hook.a".into() });
    let posts: Vec<_> = (0..24)
        .map(|i| {
            let ingest = a.ingest;
            tokio::spawn(async move { try_post(ingest, &format!("cut-{i}"), &format!("{{\"cut\":{i}}}")).await })
        })
        .collect();
    let mut first: Vec<Option<(u16, Value)>> = Vec::new();
    for post in posts {
        first.push(post.await.expect("poster").map(|(status, answer, _)| (status, answer)));
    }
    assert_eq!(proxy.mode(), Mode::Refuse, "the round was cut");
    let refused = first.iter().filter(|f| !matches!(f, Some((201, _)))).count();
    assert!(refused > 0, "the cut refused hooks: {first:?}");
    proxy.set(Mode::Pass);

    // The provider retries each refused hook, at b and at a by turns,
    // until it is acked; every ack, accepted or duplicate, must then be
    // delivered with its bytes.
    let mut acked = Acked::new();
    let mut duplicates = 0;
    for (i, answer) in first.into_iter().enumerate() {
        let mut answer = answer;
        let mut attempt = 0;
        while !matches!(answer, Some((201, _))) {
            assert!(attempt < 60, "hook cut-{i} was never acked: {answer:?}");
            tokio::time::sleep(Duration::from_millis(250)).await;
            let node = if attempt % 2 == 0 { b.ingest } else { a.ingest };
            answer = try_post(node, &format!("cut-{i}"), &body(i)).await.map(|(status, answer, _)| (status, answer));
            attempt += 1;
        }
        let (_, answer) = answer.expect("acked");
        duplicates += usize::from(answer["duplicate"] == true);
        acked.insert(answer["id"].as_str().expect("an ack names its hook").to_string(), body(i));
    }
    assert!(duplicates > 0, "some retries met the hooks the cut round left in the stream");
    all_delivered("every acked hook delivered", &acked, &receiver, Duration::from_secs(60)).await;
    let repeated = check_delivered(&acked, &receiver);
    println!(
        "a round cut after 4 publishes: {refused} of 24 refused, {duplicates} retries acked as duplicates, all 24 delivered ({repeated} delivered twice)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_back_after_its_takeover_delivers_nothing_twice() {
    let cluster = Cluster::start(3).await;
    let receiver = Receiver::start(Reply::status(200).delay(Duration::from_millis(20))).await;
    let fleet = Fleet::new();
    let a = fleet.start(&cluster, "a", &receiver).await;
    let b = fleet.start(&cluster, "b", &receiver).await;
    let (acked, refused) = load(a.ingest, "a", 300, 8).await;
    assert!(refused.is_empty(), "{refused:?}");
    a.kill();

    let taken = wait_taken(&b, "b", "a", Duration::from_secs(60)).await;
    assert_eq!(taken["by"], "b");
    all_delivered("b delivers what it took", &acked, &receiver, Duration::from_secs(60)).await;
    let before = receiver.received().len();
    let duplicates_before = check_delivered(&acked, &receiver);

    // a comes back with the same id and the same disk, still holding the
    // rows b took: it drops them.
    let a = fleet.start(&cluster, "a", &receiver).await;
    assert!(a.log().contains("took this node over while it was away"), "{}", a.log());
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(receiver.received().len(), before, "node a delivered hooks b had taken over");
    assert_eq!(check_delivered(&acked, &receiver), duplicates_before);
    let (_, levels) = a.admin("GET", "/v1/fleet", None, None).await;
    let own = levels["nodes"].as_array().into_iter().flatten().find(|n| n["node"] == "a").cloned().expect("a listed");
    assert_eq!(own["alive"], true);

    // And it takes hooks again.
    let (status, answer, _) = try_post(a.ingest, "after-return", "{\"back\":true}").await.expect("answer");
    assert_eq!(status, 201, "{answer}");
    let id = answer["id"].as_str().expect("id").to_string();
    eventually("a delivers again", Duration::from_secs(10), async || deliveries(&receiver).contains_key(&id)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn losing_nats_servers_costs_acks_never_a_false_one() {
    let mut cluster = Cluster::start(3).await;
    let receiver = Receiver::start(Reply::status(200)).await;
    let fleet = Fleet::new();
    let a = fleet.start(&cluster, "a", &receiver).await;

    // One of three servers gone: a quorum remains, ingest goes on (a
    // publish caught in the stream's leader election is a 503, retried by
    // the provider like any other).
    let under_load = tokio::spawn(load(a.ingest, "one-down", 300, 8));
    tokio::time::sleep(Duration::from_millis(300)).await;
    cluster.kill_server(0);
    let (mut acked, refused) = under_load.await.expect("load");
    assert!(refused.iter().all(|s| *s == 503), "only 503s: {refused:?}");
    // The load may end before the stream has elected a new leader; once it
    // has, every hook is acked.
    let electing = Instant::now();
    let mut probes = 0;
    let mut refused_probes = 0;
    eventually("the stream's new leader", Duration::from_secs(30), async || {
        probes += 1;
        let body = format!("{{\"probe\":{probes}}}");
        match try_post(a.ingest, &format!("probe-{probes}"), &body).await {
            Some((201, answer, _)) => {
                acked.insert(answer["id"].as_str().expect("a 201 names its hook").to_string(), body);
                true
            }
            Some((status, answer, _)) => {
                assert_eq!(status, 503, "during the election: {answer}");
                refused_probes += 1;
                false
            }
            None => {
                refused_probes += 1;
                false
            }
        }
    })
    .await;
    println!("fleet: acks resumed {:.1} s after the load ended", electing.elapsed().as_secs_f64());
    let (after, refused_after) = load(a.ingest, "after-one-down", 200, 8).await;
    assert!(refused_after.is_empty(), "with two of three servers every hook is acked: {refused_after:?}");
    println!(
        "fleet: one NATS server killed under load: {} acked, {} answered 503 during the election",
        acked.len(),
        refused.len()
    );
    acked.extend(after);

    // Two gone: no quorum, so no ack; a 503 that says when to retry. The
    // node then withdraws its attempts in flight, which are delivered
    // again later (the duplicates a cut-off node may cause), so every hook
    // so far is delivered first: here no delivery may repeat.
    all_delivered("every hook acked so far delivered", &acked, &receiver, Duration::from_secs(30)).await;
    let mut seen = deliveries(&receiver).values().map(Vec::len).sum::<usize>();
    eventually("deliveries settle", Duration::from_secs(30), async || {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let now = deliveries(&receiver).values().map(Vec::len).sum::<usize>();
        std::mem::replace(&mut seen, now) == now
    })
    .await;
    cluster.kill_server(1);
    let mut answers = Vec::new();
    for i in 0..5 {
        answers.push(try_post(a.ingest, &format!("no-quorum-{i}"), "{\"q\":0}").await.expect("an answer"));
    }
    for (status, body, retry_after) in &answers {
        assert_eq!(*status, 503, "no quorum must not be acked: {body}");
        assert!(retry_after.is_some(), "a 503 carries Retry-After");
    }

    // Both back: ingest resumes by itself.
    cluster.start_server(0);
    cluster.start_server(1);
    let mut resumed = None;
    let mut refused_resuming = 0;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(60) {
        if let Some((201, answer, _)) =
            try_post(a.ingest, &format!("resumed-{}", started.elapsed().as_millis()), "{\"q\":1}").await
        {
            resumed = Some(answer);
            break;
        }
        refused_resuming += 1;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let resumed = resumed.expect("ingest resumed once the servers returned");
    println!("fleet: ingest resumed {:.1} s after two of three NATS servers returned", started.elapsed().as_secs_f64());
    let mut all = acked;
    all.insert(resumed["id"].as_str().expect("id").to_string(), "{\"q\":1}".into());
    all_delivered("every acked hook delivered", &all, &receiver, Duration::from_secs(30)).await;
    let repeated = check_delivered(&all, &receiver);
    let twice: Vec<String> = deliveries(&receiver).into_iter().filter(|(_, c)| c.len() > 1).map(|(id, _)| id).collect();
    // On a failure, what the node logged of those hooks.
    let log = a.log();
    let mentions: Vec<&str> = log.lines().filter(|line| twice.iter().any(|id| line.contains(id.as_str()))).collect();
    assert_eq!(
        repeated,
        0,
        "no hook delivered twice: {twice:?} (acked: {:?}); the node's lines naming them: {mentions:#?}",
        twice.iter().map(|id| all.contains_key(id)).collect::<Vec<_>>()
    );
    // A hook answered 503 after the stream may have taken it is settled and
    // delivered (a provider's retry is then a duplicate of it), so the only
    // deliveries beyond the acked hooks are of hooks answered 503.
    let got = deliveries(&receiver);
    let answered_503 = refused.len() + refused_probes + answers.len() + refused_resuming;
    let settled = got.len() - all.len();
    assert!(
        settled <= answered_503,
        "{settled} deliveries beyond the {} acked hooks, {answered_503} answered 503",
        all.len()
    );
    println!("fleet: {settled} of the {answered_503} hooks answered 503 were settled from the stream and delivered");
}

ankusa_tests::on_both_servers!(
    a_quorum_lost_for_three_leases_with_backlogs_takes_no_node_over,
    a_quorum_lost_for_three_leases_with_backlogs_takes_no_node_over_on_a_current_server
        => on_a_quorum_lost_for_three_leases_with_backlogs_takes_no_node_over
);

/// Two of three NATS servers gone for three leases while both nodes hold
/// backlogs, then back: neither node is taken over or fenced (a peer
/// judges a lapse only by a lease it watched unmoved while it could read
/// it, and a node reconnects within an eighth of a lease of the servers'
/// return), nothing acked is lost, and a hook is delivered twice only
/// where an attempt in flight was withdrawn when the lease's proof ran
/// out (at most `dispatch.concurrency`, 2, a node). (A node used to judge
/// by when it last saw a lease move, before its own outage: the first
/// node back took its peer over, and the peer exited.)
async fn on_a_quorum_lost_for_three_leases_with_backlogs_takes_no_node_over(server: NatsServer) {
    let mut cluster = Cluster::start_on(3, server).await;
    // Slow enough that both nodes still hold backlogs when the quorum goes.
    let receiver = Receiver::start(Reply::status(200).delay(Duration::from_millis(30))).await;
    let fleet = Fleet::new();
    let mut a = fleet.start(&cluster, "a", &receiver).await;
    let mut b = fleet.start(&cluster, "b", &receiver).await;
    let (on_a, on_b) = tokio::join!(load(a.ingest, "a", 400, 8), load(b.ingest, "b", 400, 8));
    let mut acked = Acked::new();
    for (got, refused) in [on_a, on_b] {
        assert!(refused.is_empty(), "{refused:?}");
        acked.extend(got);
    }
    let delivered_before = deliveries(&receiver).len();
    assert!(delivered_before < acked.len() / 2, "both nodes hold backlogs ({delivered_before} delivered)");

    cluster.kill_server(0);
    cluster.kill_server(1);
    tokio::time::sleep(Duration::from_millis(3 * LEASE_TTL_MS)).await;
    cluster.start_server(0);
    cluster.start_server(1);

    all_delivered("every acked hook delivered", &acked, &receiver, Duration::from_secs(120)).await;
    tokio::time::sleep(Duration::from_millis(2 * LEASE_TTL_MS)).await;
    for (name, node) in [("a", &mut a), ("b", &mut b)] {
        let exited = node.exited_within(Duration::from_millis(10)).await;
        assert!(exited.is_none(), "node {name} exited ({exited:?}): {}", node.log());
    }
    let takeovers: Vec<String> = [a.log(), b.log()].iter().flat_map(|log| takeover_lines(log)).collect();
    let duplicates = check_delivered(&acked, &receiver);
    println!(
        "quorum lost for {} ms with backlogs on {} ({delivered_before} of {} delivered when it went): all delivered, \
         {duplicates} twice, no takeover",
        3 * LEASE_TTL_MS,
        server.version(),
        acked.len()
    );
    assert!(takeovers.is_empty(), "a node was taken over: {takeovers:?}");
    assert!(duplicates <= 4, "{duplicates} duplicate deliveries");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hook_over_the_servers_message_limit_is_acked_and_survives_a_takeover() {
    let cluster = Cluster::start(3).await;
    let GatedPair { receiver, open, fleet, a, b } = GatedPair::start(&cluster).await;

    // 2 MiB, twice the servers' max_payload, posted beside small hooks so
    // they share publish rounds: every one is acked.
    let big = format!("{{\"big\":\"{}\"}}", "b".repeat(2 << 20));
    let ingest = a.ingest;
    let small = tokio::spawn(load(ingest, "beside-big", 40, 4));
    let (status, first, _) = try_post(a.ingest, "big-1", &big).await.expect("answer");
    assert_eq!(status, 201, "{first}");
    let (acked_small, refused) = small.await.expect("small hooks");
    assert!(refused.is_empty(), "hooks beside a large one were refused: {refused:?}");

    // The provider's retry at the other node is a duplicate: the original
    // is read back from the bodies bucket.
    let (status, again, _) = try_post(b.ingest, "big-1", &big).await.expect("answer");
    assert_eq!((status, again["duplicate"].as_bool()), (201, Some(true)), "{again}");
    assert_eq!(again["id"], first["id"]);

    // a dies before delivering any; b takes the large hook over and
    // delivers it whole.
    a.kill();
    std::fs::remove_dir_all(fleet.data("a")).expect("delete a's data directory");
    let taken = wait_taken(&b, "b", "a", Duration::from_secs(60)).await;
    open.store(true, Ordering::SeqCst);
    let mut acked = acked_small;
    acked.insert(first["id"].as_str().expect("id").to_string(), big.clone());
    all_delivered("every acked hook delivered", &acked, &receiver, Duration::from_secs(60)).await;
    check_delivered(&acked, &receiver);
    println!(
        "fleet: a 2 MiB hook acked, answered as a duplicate on the other node and delivered after a takeover ({taken})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stream_made_again_under_a_kept_bucket_loses_nothing() {
    let cluster = Cluster::start(3).await;
    let (receiver, open) = gated_receiver().await;
    open.store(true, Ordering::SeqCst);
    let fleet = Fleet::new();
    let a = fleet.start(&cluster, "a", &receiver).await;
    let b = fleet.start(&cluster, "b", &receiver).await;

    // A first takeover of a leaves its record, positions of this stream.
    let (first, refused) = load(a.ingest, "before", 60, 4).await;
    assert!(refused.is_empty(), "{refused:?}");
    a.kill();
    let taken = wait_taken(&b, "b", "a", Duration::from_secs(60)).await;
    let old_through = taken["through"].as_u64().expect("through");
    all_delivered("the first hooks delivered", &first, &receiver, Duration::from_secs(60)).await;

    // The stream is deleted and made again (an operator's reset); the
    // bucket, with its takeover record, stays.
    let (status, _) = b.stop();
    assert!(status.success());
    let js = cluster.client().await;
    js.delete_stream("ANKUSA").await.expect("delete the stream");
    std::fs::remove_dir_all(fleet.data("a")).expect("delete a's data directory");
    let a = fleet.start(&cluster, "a", &receiver).await;
    let b = fleet.start(&cluster, "b", &receiver).await;

    // Fewer hooks than the old record's positions, none delivered by a
    // before it dies.
    open.store(false, Ordering::SeqCst);
    let (second, refused) = load(a.ingest, "after", 20, 4).await;
    assert!(refused.is_empty(), "{refused:?}");
    let last = js.get_stream("ANKUSA").await.expect("stream").cached_info().state.last_sequence;
    assert!(last < old_through, "the new stream's positions ({last}) stay below the old record's ({old_through})");
    a.kill();
    open.store(true, Ordering::SeqCst);
    all_delivered("every hook of the new stream delivered", &second, &receiver, Duration::from_secs(60)).await;
    check_delivered(&second, &receiver);
    drop(b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_paused_past_its_lease_delivers_nothing_after_its_takeover() {
    let cluster = Cluster::start(3).await;
    // Slow deliveries: a has a backlog, and attempts in flight, when paused.
    let receiver = Receiver::start(Reply::status(200).delay(Duration::from_millis(100))).await;
    let fleet = Fleet::new();
    let mut a = fleet.start(&cluster, "a", &receiver).await;
    let b = fleet.start(&cluster, "b", &receiver).await;
    let (acked, refused) = load(a.ingest, "paused", 200, 8).await;
    assert!(refused.is_empty(), "{refused:?}");

    a.signal("STOP");
    let taken = wait_taken(&b, "b", "a", Duration::from_secs(60)).await;
    all_delivered("b delivers what a held", &acked, &receiver, Duration::from_secs(60)).await;

    // a wakes with rows claimed and attempts in flight, its lease long
    // lapsed: it starts none and finishes none, and exits once it reads
    // the takeover.
    let resumed = Instant::now();
    a.signal("CONT");
    let status = a.exited_within(Duration::from_secs(30)).await;
    assert_eq!(status.and_then(|s| s.code()), Some(75), "a stops once it sees the takeover\n{}", a.log());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let late: Vec<_> = receiver.received().into_iter().filter(|r| r.path == "/hooks/a" && r.at >= resumed).collect();
    assert!(late.is_empty(), "a delivered {} hooks after it was taken over and resumed", late.len());
    let from_a = receiver.received().iter().filter(|r| r.path == "/hooks/a").count();
    println!(
        "fleet: a paused past its lease: {from_a} deliveries from a before the pause, none after; b took over {} hooks",
        taken["imported"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_takeover_meets_a_bucket_leader_election_within_two_leases() {
    let cluster = Cluster::start(3).await;
    let receiver = Receiver::start(Reply::status(200).delay(Duration::from_millis(50))).await;
    let fleet = Fleet::new();
    let a = fleet.start(&cluster, "a", &receiver).await;
    let b = fleet.start(&cluster, "b", &receiver).await;
    let (acked, refused) = load(a.ingest, "electing", 200, 8).await;
    assert!(refused.is_empty(), "{refused:?}");

    // a dies, and the leases bucket's stream loses its leader as it does:
    // b's lease loop meets an election while it watches a lapse.
    let client = cluster.client().await.client();
    a.kill();
    let killed = Instant::now();
    let killed_ms = ankusa_tests::fleet::wall_ms();
    let stepdown = "$JS.API.STREAM.LEADER.STEPDOWN.KV_ANKUSA-fleet";
    let answer = client.request(stepdown, "".into()).await.expect("the bucket's leader steps down");
    let answer: Value = serde_json::from_slice(&answer.payload).expect("a JSON answer");
    assert_eq!(answer["success"], true, "{answer}");
    let taken = wait_taken(&b, "b", "a", Duration::from_secs(60)).await;
    let took = killed.elapsed();
    all_delivered("every acked hook delivered", &acked, &receiver, Duration::from_secs(60)).await;
    check_delivered(&acked, &receiver);
    println!(
        "fleet: takeover done {:.2} s after the kill with a bucket leader election (lease {} ms), {} hooks taken",
        took.as_secs_f64(),
        LEASE_TTL_MS,
        taken["imported"]
    );
    let claimed_ms = taken["at_ms"].as_u64().unwrap_or(0).saturating_sub(killed_ms);
    let done_ms = taken["done_ms"].as_u64().unwrap_or(0).saturating_sub(killed_ms);
    assert!(
        took <= Duration::from_millis(2 * LEASE_TTL_MS),
        "the takeover took {took:?}, over two leases ({} ms): claimed {claimed_ms} ms and done {done_ms} ms \
         after the kill by b's clock\n{}",
        2 * LEASE_TTL_MS,
        b.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_undecodable_logged_hook_is_dead_lettered_as_a_fault_not_skipped() {
    let cluster = Cluster::start(3).await;
    let GatedPair { receiver, open, fleet: _fleet, a, b } = GatedPair::start(&cluster).await;
    let (before, refused) = load(a.ingest, "before-damage", 10, 2).await;
    assert!(refused.is_empty(), "{refused:?}");
    // A message on a's subject that is no hook: damage, or a writer that
    // is not a node of this fleet.
    log_on_a(&cluster, "00000000000000ff", "999999", "not a hook").await;
    let (after, refused) = load(a.ingest, "after-damage", 10, 2).await;
    assert!(refused.is_empty(), "{refused:?}");
    a.kill();

    let taken = wait_taken(&b, "b", "a", Duration::from_secs(60)).await;
    assert_eq!(taken["dead_letters"], 1, "{taken}");
    open.store(true, Ordering::SeqCst);
    let mut acked = before;
    acked.extend(after);
    all_delivered("the hooks on both sides of the damage delivered", &acked, &receiver, Duration::from_secs(60)).await;
    check_delivered(&acked, &receiver);
    let (status, page) = b.admin("GET", "/v1/dlq", None, None).await;
    assert_eq!(status, 200, "{page}");
    let entries = page["entries"].as_array().expect("entries");
    let fault = entries.iter().find(|e| e["error_class"] == "fault").unwrap_or_else(|| panic!("{page}"));
    assert!(fault["reason"].as_str().is_some_and(|r| r.contains("does not decode")), "{fault}");
    assert_eq!(fault["size"], "not a hook".len(), "the dead letter keeps the bytes that were there: {fault}");
    let (_, metrics) = b.admin("GET", "/metrics", None, None).await;
    let metrics = metrics.as_str().expect("metrics text").to_string();
    assert!(metrics.contains("ankusa_fleet_undecodable_total 1"), "{metrics}");
    assert!(b.log().contains("does not decode"), "logged at ERROR");
}

/// A hook whose stream copy is damaged while its node holds it intact: the
/// taker dead-letters the copy as a fault, and the node, back on its disk,
/// keeps its own copy and delivers it rather than drop it as taken. (Before,
/// the rejoin dropped every seq the taker read, the damaged one with them:
/// the hook's only intact copy was gone.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_damaged_stream_copy_leaves_its_node_the_intact_one() {
    let cluster = Cluster::start(3).await;
    let GatedPair { receiver, open, fleet, a, b } = GatedPair::start(&cluster).await;
    let (acked, refused) = load(a.ingest, "damaged", 10, 2).await;
    assert!(refused.is_empty(), "{refused:?}");
    // a's first hook in the stream, swapped for bytes that are no hook under
    // the same store and seq.
    let js = cluster.client().await;
    let stream = js.get_stream("ANKUSA").await.expect("stream");
    let first = stream.get_first_raw_message_by_subject("ankusa.hook.a", 1).await.expect("a's first hook");
    let header = |name: &str| first.headers.get(name).unwrap_or_else(|| panic!("{name} on a's hook")).to_string();
    log_on_a(&cluster, &header("Ankusa-Store"), &header("Ankusa-Seq"), "damaged").await;
    assert!(stream.delete_message(first.sequence).await.expect("delete"), "the intact copy deleted");
    a.kill();

    let taken = wait_taken(&b, "b", "a", Duration::from_secs(60)).await;
    assert_eq!((taken["imported"].as_u64(), taken["dead_letters"].as_u64()), (Some(10), Some(1)), "{taken}");
    let a = fleet.start(&cluster, "a", &receiver).await;
    open.store(true, Ordering::SeqCst);
    all_delivered("every hook, the damaged one by a", &acked, &receiver, Duration::from_secs(60)).await;
    let twice = check_delivered(&acked, &receiver);
    assert_eq!(twice, 0, "nothing delivered twice\n{}", a.log());
}

/// Hooks quarantined on a node (answered `202`) are carried by its
/// takeover into the taker's pen; the node, back on its disk, drops them;
/// a purge on the taker removes their copies, so no later takeover brings
/// them back. (Before, the pen lived on one disk: b's pen was empty after
/// the takeover.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_takeover_carries_the_quarantine_pen() {
    let cluster = Cluster::start(3).await;
    let GatedPair { receiver, open: _open, fleet, a, b } = GatedPair::start(&cluster).await;
    for n in 0..3 {
        let forged = format!("{{\"forged\":{n}}}");
        let (status, body) = a.post_hook("signed", &[("x-hub-signature-256", "sha256=00")], &forged).await;
        assert_eq!(status, 202, "{body}");
    }
    assert_eq!(pen_copies(&cluster, "a").await, 3, "each held hook has its copy in the fleet");
    a.kill();

    let taken = wait_taken(&b, "b", "a", Duration::from_secs(60)).await;
    assert_eq!(taken["quarantined"], 3, "a pen is taken over even with no hook left to take: {taken}");
    assert_eq!(held(&b).await, 3, "b holds a's quarantined hooks");
    assert_eq!((pen_copies(&cluster, "a").await, pen_copies(&cluster, "b").await), (0, 3));

    let a = fleet.start(&cluster, "a", &receiver).await;
    assert_eq!(held(&a).await, 0, "a, back on its disk, drops what b took\n{}", a.log());

    let (status, body) = b.admin("DELETE", "/v1/quarantine?all=true", None, None).await;
    assert_eq!((status, body["purged"].as_u64()), (200, Some(3)), "{body}");
    eventually("b's copies removed after its purge", Duration::from_secs(20), async || {
        pen_copies(&cluster, "b").await == 0
    })
    .await;
}

/// A taker killed while it carries a node's quarantine pen, the node back
/// on its disk first and the taker then on its own: each quarantined hook
/// is held by exactly one of them (a hook held twice is released twice),
/// and the pen bucket holds one copy of each, under its holder's name. (a
/// keeps its pen, the run abandoned, and takes b over, whose lease lapsed
/// meanwhile: what b carried comes back to a, and b, back, drops it.)
#[tokio::test(flavor = "multi_thread")]
async fn a_taker_killed_mid_pen_carry_leaves_each_hook_held_once() {
    const HELD: usize = 300;
    let cluster = Cluster::start(3).await;
    let (receiver, _open) = gated_receiver().await;
    let fleet = Fleet::with_config("quarantine: {rate: 10000, burst: 10000}");
    let a = fleet.start(&cluster, "a", &receiver).await;
    let b = fleet.start(&cluster, "b", &receiver).await;
    for n in 0..HELD {
        let forged = format!("{{\"forged\":{n}}}");
        let (status, body) = a.post_hook("signed", &[("x-hub-signature-256", "sha256=00")], &forged).await;
        assert_eq!(status, 202, "{body}");
    }
    assert_eq!(pen_copies(&cluster, "a").await, HELD, "each held hook has its copy in the fleet");
    a.kill();

    // Killed once it holds a third of a's pen (as its admin API says: a
    // listing of the pen bucket while it changes may never end).
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut carried = 0;
    while carried < HELD / 3 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
        carried = held_ids(&b).await.len();
    }
    b.kill();
    assert!(carried > 0, "b never began to carry a's pen");
    let left = pen_copies(&cluster, "a").await;
    assert!(left > 0, "b was killed after it carried the whole pen ({carried} carried): nothing to show");

    let a = fleet.start(&cluster, "a", &receiver).await;
    let b = fleet.start(&cluster, "b", &receiver).await;
    let (on_a, on_b) = (held_ids(&a).await, held_ids(&b).await);
    println!(
        "b held {carried} of a's pen when killed, {left} left under a's name; back: a holds {}, b {}",
        on_a.len(),
        on_b.len()
    );
    let twice: Vec<&String> = on_a.intersection(&on_b).collect();
    assert!(
        twice.is_empty(),
        "{} hooks held on both nodes ({} on a, {} on b, {left} of a's copies left when b was killed)\n{}\n{}",
        twice.len(),
        on_a.len(),
        on_b.len(),
        a.log(),
        b.log()
    );
    assert_eq!(on_a.len() + on_b.len(), HELD, "every quarantined hook held\n{}\n{}", a.log(), b.log());
    eventually("one copy of each held hook, under its holder's name", Duration::from_secs(20), async || {
        (pen_copies(&cluster, "a").await, pen_copies(&cluster, "b").await) == (on_a.len(), on_b.len())
    })
    .await;
}

/// The ids of the hooks `node` holds in its quarantine pen.
async fn held_ids(node: &RunningNode) -> std::collections::HashSet<String> {
    let (status, page) = node.admin("GET", "/v1/quarantine?limit=1000", None, None).await;
    assert_eq!(status, 200, "{page}");
    assert!(page["next_cursor"].is_null(), "one page: {page}");
    let entries = page["entries"].as_array().cloned().unwrap_or_default();
    entries.iter().filter_map(|e| e["id"].as_str().map(str::to_string)).collect()
}

/// Hooks `node` holds in its quarantine pen, as its admin API lists them.
async fn held(node: &RunningNode) -> usize {
    let (status, page) = node.admin("GET", "/v1/quarantine", None, None).await;
    assert_eq!(status, 200, "{page}");
    page["entries"].as_array().map_or(0, Vec::len)
}

/// The copies of `node`'s quarantined hooks in the fleet's pen bucket.
async fn pen_copies(cluster: &Cluster, node: &str) -> usize {
    use futures_util::StreamExt;
    let js = cluster.client().await;
    let bucket = js.get_object_store("ANKUSA-pen").await.expect("the pen bucket");
    let mut list = bucket.list().await.expect("list");
    let mut count = 0;
    while let Some(info) = list.next().await {
        count += usize::from(info.expect("object info").name.starts_with(&format!("{node}/")));
    }
    count
}

/// Put `bytes` on node a's subject as if a logged them under `store` and
/// `seq`: damage, or a writer that is not a node of this fleet.
async fn log_on_a(cluster: &Cluster, store: &str, seq: &str, bytes: &'static str) {
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Ankusa-Store", store);
    headers.insert("Ankusa-Seq", seq);
    let js = cluster.client().await;
    js.publish_with_headers("ankusa.hook.a", headers, bytes.into())
        .await
        .expect("publish")
        .await
        .expect("the stream takes it");
}

/// `ankusa run` to its end: exit status and what it wrote.
fn run_to_end(config: &Path, data: &Path) -> (Option<i32>, String) {
    let mut child = std::process::Command::new(ankusa_bin())
        .arg("run")
        .arg("--config")
        .arg(config)
        .arg("--data-dir")
        .arg(data)
        .args(["--ingest", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start ankusa");
    let out = collect(child.stdout.take().expect("stdout"));
    let err = collect(child.stderr.take().expect("stderr"));
    let started = Instant::now();
    let status = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("ankusa run did not refuse the config:\n{}", out.lock().expect("out"));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    std::thread::sleep(Duration::from_millis(200));
    let text = format!("{}{}", out.lock().expect("out"), err.lock().expect("err"));
    (status.code(), text)
}

/// Servers and nodes started together: a node whose cluster answers but
/// has no quorum yet to make the fleet's stream waits for it, rather than
/// exit at its first unanswered request.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_started_before_its_cluster_has_a_quorum_waits_for_it() {
    let mut cluster = Cluster::start(3).await;
    let receiver = Receiver::start(Reply::status(200)).await;
    let fleet = Fleet::new();
    cluster.kill_server(1);
    cluster.kill_server(2);
    let urls = cluster.yaml_urls();
    let back = async {
        tokio::time::sleep(Duration::from_secs(3)).await;
        cluster.start_server(1);
        cluster.start_server(2);
    };
    let (node, ()) = tokio::join!(fleet.start_via(&urls, "a", &receiver), back);
    assert!(node.log().contains("did not answer in time; asking again"), "{}", node.log());
    let (acked, statuses) = load(node.ingest, "quorum", 20, 4).await;
    assert_eq!(acked.len(), 20, "statuses: {statuses:?}");
    all_delivered("hooks acked once the quorum formed", &acked, &receiver, Duration::from_secs(30)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_fleet_config_is_refused_with_a_clear_message() {
    let cluster = Cluster::start(3).await;
    let receiver = Receiver::start(Reply::status(200)).await;
    let dir = tempfile::tempdir().expect("dir");

    // No node id: check-config names the key.
    let yaml = node_yaml(&cluster.yaml_urls(), "x", &receiver, 3).replace("  node_id: x\n", "");
    let config = write_config(dir.path(), &yaml);
    let out = std::process::Command::new(ankusa_bin())
        .arg("check-config")
        .arg("--config")
        .arg(&config)
        .output()
        .expect("run");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(78), "{text}");
    assert!(text.contains("fleet.node_id"), "{text}");

    // NATS unreachable at boot.
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
    let yaml = node_yaml(&cluster.yaml_urls(), "x", &receiver, 3)
        .replace(&cluster.yaml_urls(), &format!("[\"nats://127.0.0.1:{port}\"]"));
    let (code, text) = run_to_end(&write_config(dir.path(), &yaml), &dir.path().join("d1"));
    assert_ne!(code, Some(0));
    assert!(text.contains("cannot reach NATS at nats://127.0.0.1"), "{text}");

    // More replicas than servers.
    let yaml = node_yaml(&cluster.yaml_urls(), "x", &receiver, 5);
    let (code, text) = run_to_end(&write_config(dir.path(), &yaml), &dir.path().join("d2"));
    assert_ne!(code, Some(0));
    assert!(text.contains("cannot create JetStream stream ANKUSA with 5 replicas"), "{text}");

    // A stream of that name with other settings.
    let js = cluster.client().await;
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "ANKUSA".into(),
        subjects: vec!["other.>".into()],
        num_replicas: 1,
        ..Default::default()
    })
    .await
    .expect("a stream with other settings");
    let yaml = node_yaml(&cluster.yaml_urls(), "x", &receiver, 3);
    let (code, text) = run_to_end(&write_config(dir.path(), &yaml), &dir.path().join("d3"));
    assert_ne!(code, Some(0));
    assert!(text.contains("JetStream stream ANKUSA exists with other settings"), "{text}");
    assert!(text.contains("replicas 1 (fleet.replicas is 3)"), "{text}");
    let unchanged = js.get_stream("ANKUSA").await.expect("stream").cached_info().config.num_replicas;
    assert_eq!(unchanged, 1, "the stream was changed");
}

/// Per key, each node delivers the hooks it holds in their acked order:
/// node a up to its death, then b, which takes a's undelivered hooks over
/// (a hook a delivered but whose outcome was not yet published may come
/// again from b, in its place in the order).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_taker_delivers_each_ordering_keys_hooks_in_order() {
    let cluster = Cluster::start(3).await;
    // Slow enough that a still holds most of its hooks when it dies.
    let receiver = Receiver::start(Reply::status(200).delay(Duration::from_millis(50))).await;
    let fleet = Fleet::ordered("json:/shop");
    let a = fleet.start(&cluster, "a", &receiver).await;
    let b = fleet.start(&cluster, "b", &receiver).await;

    // 300 hooks over 6 shops, acked by a: (id, shop, a's seq).
    let mut acked = Acked::new();
    let mut order: std::collections::HashMap<String, (String, u64)> = std::collections::HashMap::new();
    for n in 0..300 {
        let shop = format!("shop-{}", n % 6);
        let body = format!("{{\"shop\":\"{shop}\",\"n\":{n}}}");
        let (status, answer, _) = try_post(a.ingest, &format!("ordered-{n}"), &body).await.expect("answer");
        assert_eq!(status, 201, "{answer}");
        let id = answer["id"].as_str().expect("id").to_string();
        order.insert(id.clone(), (shop, answer["seq"].as_u64().expect("seq")));
        acked.insert(id, body);
    }
    a.kill();
    std::fs::remove_dir_all(fleet.data("a")).expect("delete a's data directory");
    let taken = wait_taken(&b, "b", "a", Duration::from_secs(60)).await;
    all_delivered("every acked hook delivered", &acked, &receiver, Duration::from_secs(120)).await;

    // Per deliverer and key: a's seqs in the order they were accepted.
    let mut lines: std::collections::BTreeMap<(String, String), Vec<u64>> = Default::default();
    for r in receiver.received().into_iter().filter(|r| r.status == 200) {
        let Some((shop, seq)) = r.header("x-ankusa-id").and_then(|id| order.get(id)) else { continue };
        let line = lines.entry((r.path.clone(), shop.clone())).or_default();
        if line.last() != Some(seq) {
            line.push(*seq);
        }
    }
    for ((by, shop), seqs) in &lines {
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{by} delivered {shop} out of order: {seqs:?}");
    }
    let by_b = lines.keys().filter(|(by, _)| by == "/hooks/b").count();
    assert!(by_b == 6, "b delivered a's hooks of every shop after the takeover: {:?}", lines.keys());
    println!(
        "fleet ordering: a acked 300 hooks over 6 keys, b took over {}; every key in order on each node",
        taken["imported"]
    );
}

/// The leases bucket deleted while both nodes run, after b took a over
/// once: each node finds it gone, makes it again and says so; b writes its
/// takeover record of a back (marked restored: it fences nobody), so no
/// node exits, delivery goes on, and b's next takeover of a reads on from
/// where the first ended rather than from the stream's start. (Before,
/// renewals failed for good once the bucket was gone: delivery paused on
/// both nodes until a restart, which made an empty bucket.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_leases_bucket_is_made_again_and_no_takeover_is_forgotten() {
    let cluster = Cluster::start(3).await;
    let (receiver, open) = gated_receiver().await;
    let fleet = Fleet::new();
    let a = fleet.start(&cluster, "a", &receiver).await;
    let mut b = fleet.start(&cluster, "b", &receiver).await;
    let (first, refused) = load(a.ingest, "first", 100, 8).await;
    assert!(refused.is_empty(), "{refused:?}");
    a.kill();
    let taken = wait_taken(&b, "b", "a", Duration::from_secs(30)).await;
    assert_eq!(taken["imported"], 100, "{taken}");
    let through = taken["through"].as_u64().expect("through");
    let mut a = fleet.start(&cluster, "a", &receiver).await;

    let js = cluster.client().await;
    js.delete_key_value("ANKUSA-fleet").await.expect("the bucket deleted");
    for node in [&a, &b] {
        eventually("the node finds the bucket made again", Duration::from_secs(15), async || {
            node.log().contains("leases bucket was lost and made again")
        })
        .await;
    }
    let restored = wait_taken(&b, "b", "a", Duration::from_secs(15)).await;
    assert_eq!(restored["restored"], true, "{restored}");
    assert_eq!(restored["through"], through, "{restored}");

    open.store(true, Ordering::SeqCst);
    let (on_a, on_b) = tokio::join!(load(a.ingest, "after-a", 50, 4), load(b.ingest, "after-b", 50, 4));
    let mut acked = first;
    for (got, refused) in [on_a, on_b] {
        assert!(refused.is_empty(), "hooks refused after the bucket came back: {refused:?}");
        acked.extend(got);
    }
    all_delivered("every acked hook delivered", &acked, &receiver, Duration::from_secs(60)).await;
    for node in [&mut a, &mut b] {
        assert!(node.exited_within(Duration::ZERO).await.is_none(), "a node exited: {}", node.log());
    }

    // A second takeover of a reads on from the first one's end.
    open.store(false, Ordering::SeqCst);
    let (second, refused) = load(a.ingest, "second", 30, 4).await;
    assert!(refused.is_empty(), "{refused:?}");
    a.kill();
    let mut again = Value::Null;
    eventually("b's second takeover of a", Duration::from_secs(30), async || {
        let (_, status) = b.admin("GET", "/v1/fleet", None, None).await;
        let node = status["nodes"].as_array().into_iter().flatten().find(|n| n["node"] == "a").cloned();
        again = node.map(|n| n["taken"].clone()).unwrap_or(Value::Null);
        again["state"] == "done" && again["restored"].is_null() && again["by"] == "b"
    })
    .await;
    assert_eq!(again["from"], through + 1, "the second takeover read from the first one's end: {again}");
    assert_eq!(again["imported"], 30, "{again}");
    open.store(true, Ordering::SeqCst);
    acked.extend(second);
    all_delivered("every acked hook delivered", &acked, &receiver, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_millis(2 * LEASE_TTL_MS)).await;
    let duplicates = check_delivered(&acked, &receiver);
    println!(
        "a lost leases bucket: made again by the nodes, b's record of a written back (through {through}), \
         {} hooks delivered, {duplicates} twice; the next takeover read from {}",
        acked.len(),
        again["from"]
    );
    assert_eq!(duplicates, 0, "hooks delivered twice");
}
