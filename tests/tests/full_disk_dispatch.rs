//! A disk that fills while the node delivers: claims and outcome writes
//! fail along with commits. Once space returns, without a restart, no row
//! is left inflight, every acked hook is delivered, and nothing is
//! delivered twice beyond what was in flight when the disk filled. `/ready`
//! says so while the disk is full.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use ankusa_tests::binary::{RunningNode, eventually, write_config};
use ankusa_tests::receiver::{Receiver, Reply};
use ankusa_tests::tmpfs::Tmpfs;

/// Deliveries at once: the most a full disk may deliver twice.
const CONCURRENCY: usize = 16;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_that_fills_while_delivering_leaves_nothing_inflight_or_undelivered() {
    // A slow receiver, so deliveries are in flight when the disk fills.
    let receiver = Receiver::start(Reply::status(200).delay(Duration::from_millis(100))).await;
    let disk = Tmpfs::mount("48m");
    let data = disk.path.join("data");
    let dir = tempfile::tempdir().expect("dir");
    let config = write_config(
        dir.path(),
        &format!(
            r#"
node: {{disk_reserve_bytes: 1048576}}
dispatch: {{concurrency: {CONCURRENCY}, sink_concurrency: {CONCURRENCY}}}
sinks:
{hook}sources:
  demo: {{sinks: [hook]}}
"#,
            hook = receiver.http_sink("hook", "/in"),
        ),
    );
    let node = RunningNode::start(&config, &data, &[]).await;
    let body = |n: usize| format!("{{\"n\":{n},\"pad\":\"{}\"}}", "x".repeat(64 << 10));

    // Post until the disk refuses, then a while longer while deliveries
    // finish against the full disk.
    let mut acked = Vec::new();
    let mut refused = 0;
    let mut not_ready = None;
    let mut n = 0;
    let started = Instant::now();
    while refused < 40 {
        assert!(started.elapsed() < Duration::from_secs(120), "the disk never filled: {} acked", acked.len());
        let (status, answer) = node.post_hook("demo", &[], &body(n)).await;
        match status {
            201 => acked.push(answer["id"].as_str().expect("id").to_string()),
            503 => {
                refused += 1;
                if not_ready.is_none() {
                    let (status, ready) = node.admin("GET", "/ready", None, None).await;
                    not_ready = Some((status, ready));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => panic!("hook {n}: {other} {answer}"),
        }
        n += 1;
    }
    let (status, ready) = not_ready.expect("a refusal was seen");
    assert_eq!(status, 503, "not ready while the disk is full: {ready}");
    let codes: Vec<&str> =
        ready["details"]["reasons"].as_array().into_iter().flatten().filter_map(|r| r["code"].as_str()).collect();
    assert!(codes.iter().any(|c| *c == "store_write_failed" || *c == "low_disk_space"), "{ready}");
    assert!(
        node.log().contains("cannot record delivery outcomes"),
        "deliveries finished while the disk was full:\n{}",
        node.log()
    );

    disk.remount("size=1g");
    eventually("every acked hook delivered, nothing pending or inflight", Duration::from_secs(60), async || {
        let delivered: HashSet<String> =
            receiver.received().iter().filter_map(|r| r.header("x-ankusa-id").map(str::to_string)).collect();
        let (_, usage) = node.admin("GET", "/v1/tenants/default/usage", None, None).await;
        acked.iter().all(|id| delivered.contains(id)) && usage["pending"] == 0 && usage["inflight"] == 0
    })
    .await;
    let mut times: HashMap<String, usize> = HashMap::new();
    for received in receiver.received() {
        if let Some(id) = received.header("x-ankusa-id") {
            *times.entry(id.to_string()).or_default() += 1;
        }
    }
    let twice: usize = times.values().map(|t| t - 1).sum();
    assert!(twice <= CONCURRENCY, "{twice} deliveries repeated, more than were in flight ({CONCURRENCY})");
    eventually("ready once space returned", Duration::from_secs(10), async || {
        node.admin("GET", "/ready", None, None).await.0 == 200
    })
    .await;
    let (_, usage) = node.admin("GET", "/v1/tenants/default/usage", None, None).await;
    assert_eq!(usage["dead"], 0, "{usage}");
    assert!(node.log().contains("delivery outcomes are written again"), "{}", node.log());
    eprintln!("acked {}, refused while full {refused}, delivered twice {twice}", acked.len());
}
