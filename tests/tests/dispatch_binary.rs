//! Dispatch through the real binary, configured by a file: hooks POSTed to
//! `ankusa run` come out of real sink components at a real receiver, with
//! retries by class, breakers, containment and DLQ replay through the
//! admin API. (kill -9 during delivery: `dispatch_kill.rs`.)

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ankusa_tests::binary::{RunningNode, eventually, write_config};
use ankusa_tests::guest_wasm;
use ankusa_tests::receiver::{Receiver, Reply};
use ankusa_tests::standard_webhooks;
use serde_json::{Value, json};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn http_sink(name: &str, receiver: &Receiver) -> String {
    format!(
        "  {name}:\n    component: http\n    options: {{url: \"{}\", secret: \"{SECRET}\"}}\n    allow: [\"{}\"]\n",
        receiver.url("/hooks"),
        receiver.origin()
    )
}

/// Quick retries and a short breaker, so the policy plays out in seconds.
const DISPATCH: &str = "dispatch:
  sink_concurrency: 4
  attempt_timeout_ms: 300
  retry: {initial_ms: 50, jitter: 0.0, max_attempts: 4}
  breaker: {failures: 5, open_ms: 300, max_open_ms: 600}
";

async fn dead(node: &RunningNode, source: &str) -> Vec<Value> {
    let (_, page) = node.admin("GET", &format!("/v1/dlq?source={source}&limit=1000"), None, None).await;
    page["entries"].as_array().cloned().unwrap_or_default()
}

fn ids(node_answers: &[(u16, Value)]) -> Vec<String> {
    node_answers.iter().map(|(_, a)| a["id"].as_str().expect("id").to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcomes_follow_their_class_through_the_binary() {
    let signed = Receiver::start(Reply::status(200)).await;
    let flaky = Receiver::scripted(|n| if n == 0 { Reply::status(503) } else { Reply::status(200) }).await;
    let refusing = Receiver::start(Reply::status(410)).await;
    let slow =
        Receiver::scripted(|n| if n == 0 { Reply::status(429).header("retry-after", "2") } else { Reply::status(200) })
            .await;
    let dir = tempfile::tempdir().expect("dir");
    let yaml = format!(
        "{DISPATCH}sinks:\n{}{}{}{}  misbehave:\n    component: {}\nsources:\n  orders: {{sinks: [signed]}}\n  flaky: {{sinks: [flaky]}}\n  refusing: {{sinks: [refusing]}}\n  slow: {{sinks: [slow]}}\n  bad: {{sinks: [misbehave]}}\n",
        http_sink("signed", &signed),
        http_sink("flaky", &flaky),
        http_sink("refusing", &refusing),
        http_sink("slow", &slow),
        guest_wasm("misbehave").display(),
    );
    let node = RunningNode::start(&write_config(dir.path(), &yaml), &dir.path().join("data"), &[]).await;

    // The exact bytes and headers, signed so the receiver can verify.
    let body = r#"{"order":42,"note":"ünïcode"}"#;
    let (status, answer) = node.post_hook("orders", &[("x-provider-trace", "abc")], body).await;
    assert_eq!(status, 201);
    eventually("delivery", Duration::from_secs(5), async || signed.received().len() == 1).await;
    let got = &signed.received()[0];
    assert_eq!(&got.body[..], body.as_bytes(), "the exact bytes");
    assert_eq!(got.header("x-ankusa-id"), answer["id"].as_str());
    assert_eq!(got.header("x-provider-trace"), Some("abc"), "provider headers are forwarded");
    assert!(standard_webhooks::verify_received(SECRET, got), "the receiver verifies the signature");

    // 503 then 200: delivered on the second attempt.
    let posted = Instant::now();
    assert_eq!(node.post_hook("flaky", &[], "{}").await.0, 201);
    // 410: dead at once, class permanent.
    assert_eq!(node.post_hook("refusing", &[], "{}").await.0, 201);
    // 429 asking for 2 s: the next attempt no sooner.
    assert_eq!(node.post_hook("slow", &[], "{}").await.0, 201);
    // A sink that traps every time: dead with class fault after 4 attempts.
    let traps: Vec<(u16, Value)> = {
        let mut answers = Vec::new();
        for _ in 0..3 {
            answers.push(node.post_hook("bad", &[], "trap").await);
        }
        answers
    };

    eventually("the retry after a 503", Duration::from_secs(5), async || flaky.received().len() == 2).await;
    let keys: Vec<_> =
        flaky.received().iter().map(|r| r.header("x-ankusa-idempotency-key").map(str::to_string)).collect();
    assert_eq!(keys[0], keys[1], "both attempts carry the same idempotency key");

    eventually("the 410 dead", Duration::from_secs(5), async || dead(&node, "refusing").await.len() == 1).await;
    let row = &dead(&node, "refusing").await[0];
    assert_eq!((row["error_class"].as_str(), row["attempts"].as_u64()), (Some("permanent"), Some(1)));
    assert!(row["reason"].as_str().is_some_and(|r| r.contains("410")), "{row}");
    assert_eq!(refusing.received().len(), 1, "a permanent failure is not retried");

    eventually("the retry after a 429", Duration::from_secs(6), async || slow.received().len() == 2).await;
    assert!(posted.elapsed() >= Duration::from_secs(2), "Retry-After: 2 was honoured");

    eventually("three fault rows", Duration::from_secs(15), async || dead(&node, "bad").await.len() == 3).await;
    let rows = dead(&node, "bad").await;
    assert!(rows.iter().all(|r| r["error_class"] == "fault" && r["attempts"] == 4), "{rows:?}");
    let dead_ids: HashSet<String> = rows.iter().map(|r| r["id"].as_str().expect("id").to_string()).collect();
    assert_eq!(dead_ids, ids(&traps).into_iter().collect());
    assert_eq!(node.post_hook("orders", &[], "{\"after\":true}").await.0, 201);
    eventually("the node still delivers", Duration::from_secs(5), async || signed.received().len() == 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_sink_holds_only_its_slots_and_its_breaker_opens() {
    let healthy = Receiver::start(Reply::status(200)).await;
    let dir = tempfile::tempdir().expect("dir");
    let yaml = format!(
        "{DISPATCH}sinks:\n{}  misbehave:\n    component: {}\nsources:\n  stuck: {{sinks: [misbehave]}}\n  orders: {{sinks: [healthy]}}\n",
        http_sink("healthy", &healthy),
        guest_wasm("misbehave").display(),
    );
    let node = RunningNode::start(&write_config(dir.path(), &yaml), &dir.path().join("data"), &[]).await;
    for _ in 0..20 {
        assert_eq!(node.post_hook("stuck", &[], "block").await.0, 201);
    }
    let started = Instant::now();
    for n in 0..100 {
        assert_eq!(node.post_hook("orders", &[], &format!("{{\"n\":{n}}}")).await.0, 201);
    }
    eventually("100 healthy deliveries", Duration::from_secs(2), async || healthy.received().len() >= 100).await;
    println!("100 healthy deliveries in {:?} beside a hanging sink", started.elapsed());
    eventually("the stuck sink's breaker to open", Duration::from_secs(5), async || {
        let (_, metrics) = node.admin("GET", "/metrics", None, None).await;
        metrics.as_str().is_some_and(|m| {
            m.contains("ankusa_breaker_transitions_total{source=\"stuck\",sink=\"misbehave\",to=\"open\"}")
        })
    })
    .await;
    let (_, sinks) = node.admin("GET", "/v1/sinks", None, None).await;
    let stuck = sinks.as_array().expect("sinks").iter().find(|s| s["source"] == "stuck").expect("stuck").clone();
    assert!(stuck["instances"]["timeouts"].as_u64().is_some_and(|n| n >= 1), "{stuck}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dlq_replay_through_the_api_delivers_once_and_never_twice() {
    let down = Arc::new(AtomicBool::new(true));
    let flag = down.clone();
    let receiver =
        Receiver::scripted(move |_| Reply::status(if flag.load(Ordering::SeqCst) { 410 } else { 200 })).await;
    let dir = tempfile::tempdir().expect("dir");
    let yaml = format!(
        "{DISPATCH}sinks:\n{}  misbehave:\n    component: {}\nsources:\n  orders: {{sinks: [http]}}\n  poison: {{sinks: [misbehave]}}\n",
        http_sink("http", &receiver),
        guest_wasm("misbehave").display(),
    );
    let node = RunningNode::start(&write_config(dir.path(), &yaml), &dir.path().join("data"), &[]).await;
    let mut posted = Vec::new();
    for n in 0..10 {
        posted.push(node.post_hook("orders", &[], &format!("{{\"n\":{n}}}")).await);
    }
    assert_eq!(node.post_hook("poison", &[], "permanent").await.0, 201);
    eventually("11 dead rows", Duration::from_secs(5), async || {
        node.admin("GET", "/v1/tenants/default/usage", None, None).await.1["dead"] == 11
    })
    .await;

    down.store(false, Ordering::SeqCst);
    let (status, job) = node.admin("POST", "/v1/replays", Some(json!({"id": "replay-1", "kind": "dlq"})), None).await;
    assert_eq!(status, 201, "{job}");
    eventually("the job done", Duration::from_secs(10), async || {
        node.admin("GET", "/v1/replays/replay-1", None, None).await.1["state"] == "done"
    })
    .await;
    eventually("the revived rows delivered", Duration::from_secs(5), async || receiver.received().len() == 20).await;
    eventually("the poison row dead again, alone", Duration::from_secs(5), async || {
        let usage = node.admin("GET", "/v1/tenants/default/usage", None, None).await.1;
        usage["dead"] == 1 && usage["pending"] == 0
    })
    .await;
    let delivered: HashSet<String> =
        receiver.received()[10..].iter().filter_map(|r| r.header("x-ankusa-id").map(str::to_string)).collect();
    assert_eq!(delivered, ids(&posted).into_iter().collect(), "every revived hook, once");
    assert!(receiver.received()[10..].iter().all(|r| r.header("x-ankusa-replay-id") == Some("replay-1")));

    // Running the job again (resume) moves nothing more; a second job with
    // the same id is refused.
    let (_, again) = node.admin("PATCH", "/v1/replays/replay-1", Some(json!({"state": "running"})), None).await;
    assert_eq!((again["state"].as_str(), again["moved"].as_u64()), (Some("done"), Some(11)));
    let (status, _) = node.admin("POST", "/v1/replays", Some(json!({"id": "replay-1", "kind": "dlq"})), None).await;
    assert_eq!(status, 409);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(receiver.received().len(), 20, "nothing delivered twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_sinks_backlog_does_not_starve_the_rows_behind_it() {
    let healthy = Receiver::start(Reply::status(200)).await;
    let dir = tempfile::tempdir().expect("dir");
    // Hung attempts last 30 s and the breaker never opens: only the
    // scheduler's own fairness can reach the healthy rows.
    let yaml = format!(
        "dispatch:\n  sink_concurrency: 4\n  attempt_timeout_ms: 30000\n  breaker: {{failures: 1000000}}\nsinks:\n{}  misbehave:\n    component: {}\nsources:\n  stuck: {{sinks: [misbehave]}}\n  orders: {{sinks: [healthy]}}\n",
        http_sink("healthy", &healthy),
        guest_wasm("misbehave").display(),
    );
    let node = RunningNode::start(&write_config(dir.path(), &yaml), &dir.path().join("data"), &[]).await;
    // Far more stuck rows due ahead than one claim looks at.
    for _ in 0..1500 {
        assert_eq!(node.post_hook("stuck", &[], "block").await.0, 201);
    }
    let started = Instant::now();
    for n in 0..50 {
        assert_eq!(node.post_hook("orders", &[], &format!("{{\"n\":{n}}}")).await.0, 201);
    }
    eventually("the healthy rows behind the backlog", Duration::from_secs(5), async || healthy.received().len() >= 50)
        .await;
    println!("50 deliveries behind 1 500 stuck rows in {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sinks_get_the_headers_their_source_forwards_and_never_credentials() {
    let receiver = Receiver::start(Reply::status(200)).await;
    let dir = tempfile::tempdir().expect("dir");
    let yaml = format!(
        "sinks:\n{}sources:\n  open: {{sinks: [http]}}\n  narrow: {{sinks: [http], forward_headers: [x-keep]}}\n",
        http_sink("http", &receiver),
    );
    let node = RunningNode::start(&write_config(dir.path(), &yaml), &dir.path().join("data"), &[]).await;
    let sent = [("authorization", "Bearer provider-token"), ("cookie", "s=1"), ("x-keep", "yes"), ("x-drop", "no")];
    assert_eq!(node.post_hook("open", &sent, "{}").await.0, 201);
    eventually("the first delivery", Duration::from_secs(5), async || receiver.received().len() == 1).await;
    assert_eq!(node.post_hook("narrow", &sent, "{}").await.0, 201);
    eventually("the second delivery", Duration::from_secs(5), async || receiver.received().len() == 2).await;
    let (open, narrow) = (&receiver.received()[0], &receiver.received()[1]);
    assert_eq!((open.header("x-keep"), open.header("x-drop")), (Some("yes"), Some("no")));
    assert_eq!((narrow.header("x-keep"), narrow.header("x-drop")), (Some("yes"), None), "only the listed header");
    for request in [open, narrow] {
        assert_eq!(request.header("authorization"), None, "the provider's credentials stay here");
        assert_eq!(request.header("cookie"), None);
        assert!(standard_webhooks::verify_received(SECRET, request), "the sink's own headers are still there");
    }
}
