//! End to end in one process: hooks POSTed to the edge, committed, claimed
//! by dispatch and delivered by real sink components to a real local
//! receiver — retries, error classes, breakers and containment included.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ankusa::dispatch::{BreakerState, DispatchConfig, Dispatcher, RetryPolicy};
use ankusa::edge::{Edge, EdgeConfig};
use ankusa::error_class::ErrorClass;
use ankusa::queue::{DeadQuery, Queue, QueueConfig};
use ankusa::runtime::{ComponentSource, EngineConfig, Runtime, Sink, SinkLabel, SinkSpec};
use ankusa::source::{Source, StaticDirectory};
use ankusa_tests::guest_wasm;
use ankusa_tests::receiver::{Receiver, Reply};
use ankusa_tests::standard_webhooks;
use http_body_util::BodyExt;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

struct Node {
    addr: std::net::SocketAddr,
    queue: Arc<Queue>,
    directory: Arc<StaticDirectory>,
    dispatcher: Dispatcher,
    _dir: tempfile::TempDir,
}

async fn http_sink(runtime: &Runtime, receiver: &Receiver, source: &str) -> Arc<Sink> {
    let mut spec = SinkSpec::new(SinkLabel::new(source, "http"), ComponentSource::Builtin("http".into()));
    spec.options = serde_json::json!({ "url": receiver.url("/hooks"), "secret": SECRET });
    spec.egress.allow = vec![receiver.origin()];
    Arc::new(runtime.load(spec).await.expect("http sink"))
}

async fn misbehave_sink(runtime: &Runtime, source: &str) -> Arc<Sink> {
    let spec = SinkSpec::new(SinkLabel::new(source, "misbehave"), ComponentSource::Path(guest_wasm("misbehave")));
    Arc::new(runtime.load(spec).await.expect("misbehave sink"))
}

use ankusa_tests::plain_source as source;

/// A receiver answering 410 until the flag is cleared, then 200.
async fn recovering_receiver() -> (Receiver, Arc<std::sync::atomic::AtomicBool>) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let down = Arc::new(AtomicBool::new(true));
    let flag = down.clone();
    let receiver =
        Receiver::scripted(move |_| if flag.load(Ordering::Relaxed) { Reply::status(410) } else { Reply::status(200) })
            .await;
    (receiver, down)
}

fn fast_retries() -> DispatchConfig {
    DispatchConfig {
        retry: RetryPolicy {
            initial: Duration::from_millis(50),
            jitter: 0.0,
            max_attempts: 4,
            ..RetryPolicy::default()
        },
        ..DispatchConfig::default()
    }
}

async fn start(sources: Vec<Source>, config: DispatchConfig) -> Node {
    let dir = tempfile::tempdir().expect("dir");
    let queue = Arc::new(Queue::open(dir.path(), QueueConfig::default()).expect("queue"));
    let mut directory = StaticDirectory::default();
    for source in sources {
        directory.add(source);
    }
    let directory = Arc::new(directory);
    let edge = Arc::new(Edge::new(EdgeConfig::default(), directory.clone(), Some(&queue)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(ankusa::edge::serve(listener, edge, std::future::pending()));
    let dispatcher = Dispatcher::start(queue.deliveries(), directory.clone(), config).expect("dispatch starts");
    Node { addr, queue, directory, dispatcher, _dir: dir }
}

async fn post(addr: std::net::SocketAddr, source: &str, body: &str) -> String {
    let client =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http::<String>();
    let request = http::Request::post(format!("http://{addr}/webhooks/{source}"))
        .header("content-type", "application/json")
        .header("x-provider-trace", "abc")
        .body(body.to_string())
        .expect("request");
    let response = client.request(request).await.expect("response");
    assert_eq!(response.status(), 201);
    let bytes = response.into_body().collect().await.expect("body").to_bytes();
    let answer: serde_json::Value = serde_json::from_slice(&bytes).expect("json");
    answer["id"].as_str().expect("id").to_string()
}

async fn eventually(what: &str, within: Duration, check: impl Fn() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(started.elapsed() < within, "{what} did not happen within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_posted_hook_reaches_the_receiver_byte_for_byte_and_signed() {
    let rt = Runtime::new(EngineConfig::default(), None).expect("runtime");
    let receiver = Receiver::start(Reply::status(200)).await;
    let node = start(vec![source("orders", vec![http_sink(&rt, &receiver, "orders").await])], fast_retries()).await;
    let body = r#"{"order":42,"note":"ünïcode"}"#;
    let id = post(node.addr, "orders", body).await;
    eventually("delivery", Duration::from_secs(5), || receiver.received().len() == 1).await;
    let got = &receiver.received()[0];
    assert_eq!(&got.body[..], body.as_bytes(), "the exact bytes");
    assert_eq!(got.header("x-ankusa-id"), Some(id.as_str()));
    assert_eq!(got.header("x-ankusa-source"), Some("orders"));
    assert_eq!(got.header("x-provider-trace"), Some("abc"), "provider headers are forwarded");
    assert!(standard_webhooks::verify_received(SECRET, got), "the receiver verifies the signature");
    eventually("the row and hook to go", Duration::from_secs(2), || node.queue.hooks(0, 10).expect("hooks").is_empty())
        .await;
    assert_eq!(node.queue.counter(None, "pending").expect("counter"), 0);
    assert_eq!(node.queue.counter(None, "inflight").expect("counter"), 0);
    node.dispatcher.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_follow_their_class() {
    let rt = Runtime::new(EngineConfig::default(), None).expect("runtime");
    // 503, then 200.
    let flaky = Receiver::scripted(|n| if n == 0 { Reply::status(503) } else { Reply::status(200) }).await;
    // 410: permanent.
    let gone = Receiver::start(Reply::status(410)).await;
    // 429 asking for 2 s, then 200.
    let slow =
        Receiver::scripted(|n| if n == 0 { Reply::status(429).header("retry-after", "2") } else { Reply::status(200) })
            .await;
    let node = start(
        vec![
            source("flaky", vec![http_sink(&rt, &flaky, "flaky").await]),
            source("gone", vec![http_sink(&rt, &gone, "gone").await]),
            source("slow", vec![http_sink(&rt, &slow, "slow").await]),
        ],
        fast_retries(),
    )
    .await;
    let posted = Instant::now();
    post(node.addr, "flaky", r#"{"a":1}"#).await;
    let gone_id = post(node.addr, "gone", r#"{"b":2}"#).await;
    post(node.addr, "slow", r#"{"c":3}"#).await;

    eventually("the retry after a 503", Duration::from_secs(5), || flaky.received().len() == 2).await;
    let keys: Vec<_> =
        flaky.received().iter().map(|r| r.header("x-ankusa-idempotency-key").map(str::to_string)).collect();
    assert_eq!(keys[0], keys[1], "both attempts carry the same idempotency key");

    eventually("the 410 to be dead", Duration::from_secs(5), || node.queue.counter(None, "dead").unwrap_or(0) == 1)
        .await;
    let page = node.queue.dead_letters().dead(&DeadQuery::default()).expect("dlq");
    assert_eq!(page.entries.len(), 1);
    let dead = &page.entries[0];
    assert_eq!(
        (dead.envelope.id.as_str(), dead.error_class, dead.attempts),
        (gone_id.as_str(), Some(ErrorClass::Permanent), 1)
    );
    assert!(dead.reason.contains("410"), "{}", dead.reason);
    assert_eq!(gone.received().len(), 1, "a permanent failure is not retried");

    eventually("the retry after a 429", Duration::from_secs(6), || slow.received().len() == 2).await;
    let waited = posted.elapsed();
    assert!(waited >= Duration::from_secs(2), "Retry-After: 2 was honoured ({waited:?})");
    eventually("everything settled", Duration::from_secs(2), || {
        node.queue.counter(None, "pending").unwrap_or(1) == 0 && node.queue.counter(None, "inflight").unwrap_or(1) == 0
    })
    .await;
    node.dispatcher.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_sink_holds_only_its_own_slots_and_its_breaker_opens() {
    let rt = Runtime::new(EngineConfig::default(), None).expect("runtime");
    let healthy = Receiver::start(Reply::status(200)).await;
    let config = DispatchConfig { sink_concurrency: 4, attempt_timeout: Duration::from_millis(300), ..fast_retries() };
    let node = start(
        vec![
            source("stuck", vec![misbehave_sink(&rt, "stuck").await]),
            source("orders", vec![http_sink(&rt, &healthy, "orders").await]),
        ],
        config,
    )
    .await;
    for _ in 0..20 {
        post(node.addr, "stuck", "block").await;
    }
    let started = Instant::now();
    for n in 0..100 {
        post(node.addr, "orders", &format!("{{\"n\":{n}}}")).await;
    }
    eventually("100 healthy deliveries", Duration::from_secs(2), || healthy.received().len() >= 100).await;
    println!("100 healthy deliveries in {:?} beside a hanging sink", started.elapsed());
    eventually("the stuck sink's breaker to open", Duration::from_secs(5), || {
        matches!(node.dispatcher.breaker("default", "stuck", 0), Some(BreakerState::Open { .. }))
    })
    .await;
    node.dispatcher.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_that_traps_every_time_ends_in_fault_rows_and_the_node_lives() {
    let rt = Runtime::new(EngineConfig::default(), None).expect("runtime");
    let healthy = Receiver::start(Reply::status(200)).await;
    let config = DispatchConfig {
        breaker: ankusa::dispatch::BreakerPolicy { failures: 1000, ..Default::default() },
        ..fast_retries()
    };
    let node = start(
        vec![
            source("bad", vec![misbehave_sink(&rt, "bad").await]),
            source("orders", vec![http_sink(&rt, &healthy, "orders").await]),
        ],
        config,
    )
    .await;
    for _ in 0..3 {
        post(node.addr, "bad", "trap").await;
    }
    eventually("three fault rows", Duration::from_secs(10), || node.queue.counter(None, "dead").unwrap_or(0) == 3)
        .await;
    let page = node.queue.dead_letters().dead(&DeadQuery::default()).expect("dlq");
    assert!(page.entries.iter().all(|e| e.error_class == Some(ErrorClass::Fault) && e.attempts == 4), "{page:?}");
    post(node.addr, "orders", "{}").await;
    eventually("the node still delivers", Duration::from_secs(5), || healthy.received().len() == 1).await;
    node.dispatcher.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dlq_replay_delivers_once_the_receiver_recovers_and_never_twice() {
    use std::sync::atomic::Ordering;
    let rt = Runtime::new(EngineConfig::default(), None).expect("runtime");
    let (receiver, down) = recovering_receiver().await;
    let node = start(
        vec![
            source("orders", vec![http_sink(&rt, &receiver, "orders").await]),
            source("poison", vec![misbehave_sink(&rt, "poison").await]),
        ],
        fast_retries(),
    )
    .await;
    let mut ids = Vec::new();
    for n in 0..10 {
        ids.push(post(node.addr, "orders", &format!("{{\"n\":{n}}}")).await);
    }
    post(node.addr, "poison", "permanent").await;
    eventually("11 dead rows", Duration::from_secs(5), || node.queue.counter(None, "dead").unwrap_or(0) == 11).await;
    assert_eq!(receiver.received().len(), 10);

    down.store(false, Ordering::Relaxed);
    let config = ankusa::replay::ReplayConfig { page: 4, ..Default::default() };
    let job = ankusa::replay::run_dlq(node.queue.clone(), "replay-1", Default::default(), config.clone())
        .await
        .expect("replay");
    assert_eq!((job.state, job.moved), (ankusa::replay::JobState::Done, 11));
    eventually("the revived rows delivered", Duration::from_secs(5), || receiver.received().len() == 20).await;
    eventually("the poison row dead again", Duration::from_secs(5), || {
        node.queue.counter(None, "dead").unwrap_or(0) == 1 && node.queue.counter(None, "pending").unwrap_or(1) == 0
    })
    .await;
    let delivered: std::collections::HashSet<String> =
        receiver.received()[10..].iter().filter_map(|r| r.header("x-ankusa-id").map(str::to_string)).collect();
    assert_eq!(delivered, ids.iter().cloned().collect(), "every revived hook, once");
    assert!(receiver.received()[10..].iter().all(|r| r.header("x-ankusa-replay-id") == Some("replay-1")));
    assert_eq!(node.queue.dead_letters().replay_died("replay-1").expect("died"), 1, "the poison row died again, alone");

    // The same job again moves nothing.
    let again = ankusa::replay::run_dlq(node.queue.clone(), "replay-1", Default::default(), config)
        .await
        .expect("replay again");
    assert_eq!(again.moved, 11);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(receiver.received().len(), 20, "running the same job twice does not deliver twice");
    let stored = ankusa::replay::job(&node.queue, "replay-1").expect("read").expect("job");
    assert_eq!(stored.state, ankusa::replay::JobState::Done);
    node.dispatcher.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_replay_resumes_from_its_cursor_and_moves_each_row_once() {
    use std::sync::atomic::Ordering;
    let rt = Runtime::new(EngineConfig::default(), None).expect("runtime");
    let (receiver, down) = recovering_receiver().await;
    let node = start(vec![source("orders", vec![http_sink(&rt, &receiver, "orders").await])], fast_retries()).await;
    for n in 0..12 {
        post(node.addr, "orders", &format!("{{\"n\":{n}}}")).await;
    }
    eventually("12 dead rows", Duration::from_secs(5), || node.queue.counter(None, "dead").unwrap_or(0) == 12).await;
    down.store(false, Ordering::Relaxed);

    // A slow job, stopped part-way as a crash would stop it.
    let config = ankusa::replay::ReplayConfig { page: 2, rate: 4.0, ..Default::default() };
    let job = tokio::spawn(ankusa::replay::run_dlq(node.queue.clone(), "slow", Default::default(), config));
    eventually("the first pages", Duration::from_secs(5), || {
        ankusa::replay::job(&node.queue, "slow").ok().flatten().is_some_and(|j| j.moved >= 2)
    })
    .await;
    job.abort();
    let _ = job.await;
    let stopped = ankusa::replay::job(&node.queue, "slow").expect("read").expect("job");
    assert_eq!(stopped.state, ankusa::replay::JobState::Running);
    assert!(stopped.moved < 12, "stopped part-way: {}", stopped.moved);

    for handle in ankusa::replay::resume_all(node.queue.clone(), node.directory.clone()).expect("resume") {
        handle.await.expect("resumed job");
    }
    let done = ankusa::replay::job(&node.queue, "slow").expect("read").expect("job");
    assert_eq!((done.state, done.moved), (ankusa::replay::JobState::Done, 12));
    eventually("every revived row delivered", Duration::from_secs(5), || receiver.received().len() == 24).await;
    let ids: Vec<String> =
        receiver.received()[12..].iter().filter_map(|r| r.header("x-ankusa-id").map(str::to_string)).collect();
    let distinct: std::collections::HashSet<&String> = ids.iter().collect();
    assert_eq!(distinct.len(), 12, "each dead row revived and delivered once");
    node.dispatcher.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quarantine_replay_releases_hooks_that_verify_with_the_new_secret() {
    use ankusa::source::OnVerifyFailure;
    use ankusa::source::verify::{Scheme, Verifier};
    use hmac::{Hmac, Mac};
    let rt = Runtime::new(EngineConfig::default(), None).expect("runtime");
    let receiver = Receiver::start(Reply::status(200)).await;
    let sink = http_sink(&rt, &receiver, "github").await;
    let with_secrets = |secrets: &[&str]| {
        let secrets: Vec<String> = secrets.iter().map(|s| s.to_string()).collect();
        Source {
            verifier: Some(Verifier::new(Scheme::preset("github").expect("preset"), &secrets).expect("verifier")),
            on_verify_failure: OnVerifyFailure::Quarantine,
            dedupe: ankusa::source::DedupeRule::preset("github"),
            ..source("github", vec![sink.clone()])
        }
    };
    let node = start(vec![with_secrets(&["old-secret"])], fast_retries()).await;

    // Signed with a secret the node does not know yet: held, not delivered.
    let body = r#"{"action":"opened"}"#;
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(b"new-secret").expect("key");
    mac.update(body.as_bytes());
    let signature = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
    let client =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http::<String>();
    let request = http::Request::post(format!("http://{}/webhooks/github", node.addr))
        .header("x-hub-signature-256", signature)
        .header("x-github-delivery", "d-1")
        .body(body.to_string())
        .expect("request");
    let response = client.request(request).await.expect("response");
    assert_eq!(response.status(), 202, "quarantined");
    assert!(node.queue.pen().pen_bytes().expect("pen") > 0);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(receiver.received().is_empty(), "a held hook is not delivered");

    // The secret is rotated in; the job re-verifies and releases.
    let mut rotated = StaticDirectory::default();
    rotated.add(with_secrets(&["new-secret", "old-secret"]));
    let job = ankusa::replay::run_quarantine(
        node.queue.clone(),
        Arc::new(rotated),
        "release-1",
        "default",
        "github",
        Default::default(),
    )
    .await
    .expect("release");
    assert_eq!((job.state, job.moved), (ankusa::replay::JobState::Done, 1));
    eventually("the released hook delivered", Duration::from_secs(5), || receiver.received().len() == 1).await;
    let got = &receiver.received()[0];
    assert_eq!(&got.body[..], body.as_bytes());
    assert_eq!(got.header("x-ankusa-replay-id"), Some("release-1"));
    assert_eq!(node.queue.pen().pen_bytes().expect("pen"), 0, "the pen entry went with the release");
    node.dispatcher.stop().await;
}
