//! A fleet node's graceful stop (`SIGTERM`) against real `nats-server`
//! processes: hooks are refused `503` with `Retry-After` from the signal on,
//! the node delivers what it holds while its sinks take it, finishes its
//! attempts, publishes its outcomes and releases its lease; a peer takes
//! over at once only what a stop could not deliver.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use ankusa_tests::binary::RunningNode;
use ankusa_tests::fleet::{
    Acked, Fleet, GatedPair, LEASE_TTL_MS, all_delivered, check_delivered, load, try_post, wait_taken,
};
use ankusa_tests::nats_cluster::{Cluster, NatsServer};
use ankusa_tests::receiver::{Receiver, Reply};
use serde_json::Value;

/// What a provider posting to a stopping node got.
#[derive(Default)]
struct Answers {
    acked: Acked,
    /// `503`s, and how many of them carried `Retry-After`.
    unavailable: usize,
    with_retry_after: usize,
    /// Any other status (none expected).
    other: Vec<u16>,
}

/// Post distinct hooks to `node` until it stops answering (its listener
/// closed), or `stop` is set.
async fn post_until_gone(node: std::net::SocketAddr, tag: &str, stop: Arc<std::sync::atomic::AtomicBool>) -> Answers {
    let mut answers = Answers::default();
    for i in 0.. {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let body = format!("{{\"tag\":\"{tag}\",\"n\":{i}}}");
        match try_post(node, &format!("{tag}-{i}"), &body).await {
            Some((201, answer, _)) => {
                let id = answer["id"].as_str().expect("a 201 names its hook").to_string();
                answers.acked.insert(id, body);
            }
            Some((503, _, retry_after)) => {
                answers.unavailable += 1;
                answers.with_retry_after += usize::from(retry_after.is_some());
            }
            Some((status, _, _)) => answers.other.push(status),
            None => break,
        }
    }
    answers
}

/// `node`'s lease as `peer` shows it.
async fn lease_of(peer: &RunningNode, node: &str) -> Value {
    let (_, status) = peer.admin("GET", "/v1/fleet", None, None).await;
    let found = status["nodes"].as_array().into_iter().flatten().find(|n| n["node"] == node).cloned();
    found.unwrap_or(Value::Null)
}

/// SIGTERM `node`: how long it took to exit, and what it logged.
async fn stop(mut node: RunningNode) -> (Duration, String) {
    let started = Instant::now();
    node.signal("TERM");
    let status = node.exited_within(Duration::from_secs(30)).await;
    let took = started.elapsed();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let log = node.log();
    assert!(status.is_some_and(|s| s.success()), "the stop did not end cleanly ({status:?}): {log}");
    for sign in ["commit failed", "still in use", "still referenced", "not released", "not published"] {
        assert!(!log.contains(sign), "the stop logged {sign:?}: {log}");
    }
    (took, log)
}

ankusa_tests::on_both_servers!(
    a_graceful_stop_refuses_hooks_delivers_what_it_holds_and_releases_its_lease,
    a_graceful_stop_refuses_hooks_delivers_what_it_holds_and_releases_its_lease_on_a_current_server
        => graceful_stop
);

/// A node stopped under load with a healthy sink: hooks sent after the
/// signal are refused `503` with `Retry-After`, everything acked before is
/// delivered by the node itself before it exits (nothing twice, nothing
/// left for a peer), and its lease is released with nothing pending, well
/// within the documented bound.
async fn graceful_stop(server: NatsServer) {
    let cluster = Cluster::start_on(3, server).await;
    // Slow enough that a holds a backlog when the signal comes.
    let receiver = Receiver::start(Reply::status(200).delay(Duration::from_millis(10))).await;
    let fleet = Fleet::new();
    let a = fleet.start(&cluster, "a", &receiver).await;
    let b = fleet.start(&cluster, "b", &receiver).await;
    let (mut acked, refused) = load(a.ingest, "before", 400, 8).await;
    assert!(refused.is_empty(), "{refused:?}");

    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let posting = tokio::spawn(post_until_gone(a.ingest, "during", done.clone()));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (took, log) = stop(a).await;
    done.store(true, Ordering::SeqCst);
    let during = posting.await.expect("poster");
    acked.extend(during.acked);

    assert!(log.contains("the lease is released"), "{log}");
    assert!(!log.contains("stopping with rows undelivered"), "the drain left rows: {log}");
    let lease = lease_of(&b, "a").await;
    assert_eq!(lease["lease"]["released"], true, "{lease}");
    assert_eq!(lease["lease"]["pending"], 0, "{lease}");
    assert_eq!(lease["alive"], false, "{lease}");
    assert!(during.other.is_empty(), "answers other than 201 and 503 while stopping: {:?}", during.other);
    assert_eq!(during.with_retry_after, during.unavailable, "every 503 of a stop says when to retry");

    all_delivered("every acked hook delivered", &acked, &receiver, Duration::from_secs(30)).await;
    let duplicates = check_delivered(&acked, &receiver);
    println!(
        "graceful stop ({}): {} acked hooks delivered by a before it exited, {duplicates} twice; \
         stop took {:.2} s; {} hooks refused 503 while stopping",
        server.version(),
        acked.len(),
        took.as_secs_f64(),
        during.unavailable
    );
    assert_eq!(duplicates, 0, "a graceful stop delivers nothing twice");
    // The documented bound: the drain (5 s at most) and the rest within
    // the attempt timeout (half the lease) and a few seconds.
    assert!(took < Duration::from_secs(5) + Duration::from_millis(LEASE_TTL_MS / 2) + Duration::from_secs(4));
    drop(b);
}

/// A node stopped while its sink is down cannot drain: it stops after a
/// second without a delivery, releases its lease with its backlog counted,
/// and its peer takes that backlog over at once, without waiting a lease
/// out; nothing is lost or delivered twice once the sink is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stop_that_cannot_drain_hands_its_backlog_to_a_peer_at_once() {
    let cluster = Cluster::start(3).await;
    let GatedPair { receiver, open, fleet: _fleet, a, b } = GatedPair::start(&cluster).await;
    let (acked, refused) = load(a.ingest, "backlog", 300, 8).await;
    assert!(refused.is_empty(), "{refused:?}");

    let (took, log) = stop(a).await;
    assert!(log.contains("stopping with rows undelivered"), "{log}");
    let exited = Instant::now();
    let taken = wait_taken(&b, "b", "a", Duration::from_secs(30)).await;
    let taken_in = exited.elapsed();
    assert_eq!(taken["imported"], acked.len(), "{taken}");

    open.store(true, Ordering::SeqCst);
    all_delivered("every acked hook delivered, by b", &acked, &receiver, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_millis(2 * LEASE_TTL_MS)).await;
    let duplicates = check_delivered(&acked, &receiver);
    println!(
        "a stop that cannot drain: stop took {:.2} s; b took {} hooks over {:.2} s after the exit \
         (the lease is {} ms); {duplicates} delivered twice",
        took.as_secs_f64(),
        acked.len(),
        taken_in.as_secs_f64(),
        LEASE_TTL_MS
    );
    assert!(taken_in < Duration::from_millis(LEASE_TTL_MS), "the peer waited the lease out: {taken_in:?}");
    assert_eq!(duplicates, 0, "hooks delivered twice");
}
