//! The edge over real sockets: refusals before the body is read, chunked
//! bodies over the limit, bad header bytes, oversized heads, requests
//! framed two ways, provider retries absorbed as duplicates, load
//! shedding while the writer is stalled, and direct mode.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use ankusa::edge::batcher::BatcherConfig;
use ankusa::edge::{Edge, EdgeConfig, HttpSettings};
use ankusa::queue::{Queue, QueueConfig, SinkDurability, SourceDurability, WalMode, validate_config};
use ankusa::runtime::{ComponentSource, EngineConfig, Runtime, Sink, SinkLabel, SinkSpec};
use ankusa::source::DedupeRule;
use ankusa::source::{Source, StaticDirectory};
use ankusa::store::Faults;
use ankusa_tests::receiver::{Receiver, Reply};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

async fn runtime() -> Runtime {
    Runtime::new(EngineConfig::default(), None).expect("runtime")
}

async fn log_sink(runtime: &Runtime) -> Arc<Sink> {
    let spec = SinkSpec::new(SinkLabel::new("github", "log"), ComponentSource::Builtin("log".into()));
    Arc::new(runtime.load(spec).await.expect("log sink"))
}

async fn http_sink(runtime: &Runtime, receiver: &Receiver, name: &str) -> Arc<Sink> {
    let mut spec = SinkSpec::new(SinkLabel::new("orders", name), ComponentSource::Builtin("http".into()));
    spec.options = serde_json::json!({ "url": receiver.url("/in") });
    spec.egress.allow = vec![receiver.origin()];
    Arc::new(runtime.load(spec).await.expect("http sink"))
}

/// A source deduplicating by GitHub's delivery id.
fn source(name: &str, sinks: Vec<Arc<Sink>>) -> Source {
    Source { dedupe: DedupeRule::preset("github"), ..ankusa_tests::plain_source(name, sinks) }
}

struct Node {
    addr: std::net::SocketAddr,
    queue: Option<Arc<Queue>>,
    _dir: tempfile::TempDir,
}

async fn start(config: EdgeConfig, sources: Vec<Source>, queue_config: Option<QueueConfig>) -> Node {
    let dir = tempfile::tempdir().expect("dir");
    let queue = queue_config.map(|c| Arc::new(Queue::open(dir.path(), c).expect("queue")));
    let mut directory = StaticDirectory::default();
    for source in sources {
        directory.add(source);
    }
    let edge = Arc::new(Edge::new(config, Arc::new(directory), queue.as_deref()));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(ankusa::edge::serve(listener, edge, std::future::pending()));
    Node { addr, queue, _dir: dir }
}

/// Send raw bytes, then read what the server answers within `wait`.
async fn raw(addr: std::net::SocketAddr, request: &[u8], wait: Duration) -> String {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream.write_all(request).await.expect("send");
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(wait, stream.read(&mut buf)).await.expect("an answer in time").expect("read");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_answered_before_their_body() {
    let rt = runtime().await;
    let config =
        EdgeConfig { http: HttpSettings { max_body_bytes: 1024, ..HttpSettings::default() }, ..EdgeConfig::default() };
    let node = start(config, vec![source("github", vec![log_sink(&rt).await])], Some(QueueConfig::default())).await;
    let wait = Duration::from_secs(2);

    // No body byte is ever sent: the answer must come from the head alone.
    let unknown = raw(node.addr, b"POST /webhooks/nope HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n", wait).await;
    assert!(unknown.starts_with("HTTP/1.1 404"), "{unknown}");
    assert!(unknown.contains("unknown_source"));
    let big =
        raw(node.addr, b"POST /webhooks/github HTTP/1.1\r\nhost: x\r\ncontent-length: 999999999\r\n\r\n", wait).await;
    assert!(big.starts_with("HTTP/1.1 413"), "{big}");

    let mut bad_header = b"POST /webhooks/github HTTP/1.1\r\nhost: x\r\nx-evil: a".to_vec();
    bad_header.extend_from_slice(&[0xff]);
    bad_header.extend_from_slice(b"b\r\ncontent-length: 2\r\n\r\n{}");
    let answer = raw(node.addr, &bad_header, wait).await;
    assert!(answer.starts_with("HTTP/1.1 400") && answer.contains("invalid_header"), "{answer}");

    // A chunked body with no length up front, over the limit as it streams.
    let mut chunked = b"POST /webhooks/github HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..3 {
        chunked.extend_from_slice(b"200\r\n");
        chunked.extend_from_slice(&[b'a'; 0x200]);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let answer = raw(node.addr, &chunked, wait).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");

    let queue = node.queue.as_ref().expect("queue");
    assert!(queue.hooks(0, 10).expect("hooks").is_empty(), "nothing was stored");

    // And a good one, chunked, within the limit.
    let ok = raw(
        node.addr,
        b"POST /webhooks/github HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        wait,
    )
    .await;
    assert!(ok.starts_with("HTTP/1.1 201"), "{ok}");
    assert_eq!(queue.hooks(0, 10).expect("hooks")[0].body, b"{}");
}

fn client() -> hyper_util::client::legacy::Client<hyper_util::client::legacy::connect::HttpConnector, String> {
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http()
}

async fn post(
    addr: std::net::SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, serde_json::Value) {
    use http_body_util::BodyExt;
    let mut request = http::Request::post(format!("http://{addr}{path}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = client().request(request.body(body.to_string()).expect("request")).await.expect("response");
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.expect("body").to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_retry_is_one_hook_and_answers_with_the_first_id() {
    let rt = runtime().await;
    let node =
        start(EdgeConfig::default(), vec![source("github", vec![log_sink(&rt).await])], Some(QueueConfig::default()))
            .await;
    let delivery =
        [("x-github-delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958"), ("content-type", "application/json")];
    let (first, a) = post(node.addr, "/webhooks/github", &delivery, r#"{"zen":"1"}"#).await;
    let (second, b) = post(node.addr, "/webhooks/github", &delivery, r#"{"zen":"1"}"#).await;
    assert_eq!((first, second), (201, 201));
    assert_eq!((&a["status"], &b["status"]), (&"accepted".into(), &"accepted".into()));
    assert_eq!(a["duplicate"], serde_json::Value::Null);
    assert!(a["seq"].is_u64(), "a new hook's answer carries its seq: {a}");
    assert_eq!(b["duplicate"], true);
    assert_eq!(b["seq"], serde_json::Value::Null, "a duplicate takes no seq: {b}");
    assert_eq!(a["id"], b["id"], "the retry is answered with the first id");
    let hooks = node.queue.as_ref().expect("queue").hooks(0, 10).expect("hooks");
    assert_eq!(hooks.len(), 1);
    assert_eq!(serde_json::Value::String(hooks[0].id.clone()), a["id"]);
    assert_eq!(hooks[0].dedupe_key.as_deref(), Some("72d3162e-cc78-11e3-81ab-4c9367dc0958"));
    let (status, _) = post(node.addr, "/webhooks/github", &[("x-github-delivery", "other")], "{}").await;
    assert_eq!(status, 201);
}

/// Fire `n` requests at once; returns (status, id) of each.
async fn burst(addr: std::net::SocketAddr, n: usize) -> Vec<(u16, Option<String>)> {
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            tokio::spawn(async move {
                let (status, body) =
                    post(addr, "/webhooks/github", &[("x-github-delivery", &format!("d-{i}"))], "{}").await;
                (status, body["id"].as_str().map(str::to_string))
            })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.expect("request task"));
    }
    answers
}

/// Stall the store's writes now and let them go after `stall`.
fn stall_writes_for(faults: &Arc<Faults>, stall: Duration) -> tokio::task::JoinHandle<()> {
    faults.stall_writes.store(true, Ordering::Relaxed);
    let faults = faults.clone();
    tokio::spawn(async move {
        tokio::time::sleep(stall).await;
        faults.stall_writes.store(false, Ordering::Relaxed);
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_writer_sheds_load_and_never_stores_a_refused_hook() {
    let rt = runtime().await;
    let faults = Arc::new(Faults::default());
    let config = EdgeConfig {
        batcher: BatcherConfig { max_queue: 8, deadline: Duration::from_millis(400), ..BatcherConfig::default() },
        ..EdgeConfig::default()
    };
    let node = start(
        config,
        vec![source("github", vec![log_sink(&rt).await])],
        Some(QueueConfig { store_faults: Some(faults.clone()), ..QueueConfig::default() }),
    )
    .await;
    let queue = node.queue.clone().expect("queue");

    // A long stall: past the bounds and past the deadlines.
    let release = stall_writes_for(&faults, Duration::from_millis(1500));
    let answers = burst(node.addr, 40).await;
    release.await.expect("release");
    let shed = answers.iter().filter(|(s, _)| *s == 503).count();
    assert!(shed >= 30, "at most 8 admitted while stalled, the rest shed: {answers:?}");
    let acked: HashSet<String> = answers.iter().filter(|(s, _)| *s == 201).filter_map(|(_, id)| id.clone()).collect();
    let stored: HashSet<String> = queue.hooks(0, 1000).expect("hooks").into_iter().map(|h| h.id).collect();
    assert!(acked.is_subset(&stored), "every 201 is stored");
    assert_eq!(
        stored.len(),
        acked.len(),
        "no 503-answered hook was stored: {} stored, {} acked",
        stored.len(),
        acked.len()
    );

    // A short stall: everyone admitted waits it out and is stored.
    let release = stall_writes_for(&faults, Duration::from_millis(100));
    let answers = burst(node.addr, 6).await;
    release.await.expect("release");
    assert!(answers.iter().all(|(s, _)| *s == 201), "{answers:?}");
    let stored: HashSet<String> = queue.hooks(0, 1000).expect("hooks").into_iter().map(|h| h.id).collect();
    assert!(answers.iter().all(|(_, id)| id.as_ref().is_some_and(|id| stored.contains(id))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_mode_answers_201_only_when_every_sink_confirms() {
    let rt = runtime().await;
    let healthy = Receiver::start(Reply::status(200)).await;
    let failing = Receiver::start(Reply::status(500)).await;
    let both_ok = source("orders", vec![http_sink(&rt, &healthy, "a").await, http_sink(&rt, &healthy, "b").await]);
    let mut one_down =
        source("billing", vec![http_sink(&rt, &healthy, "a").await, http_sink(&rt, &failing, "b").await]);
    one_down.dedupe = None;
    let node = start(EdgeConfig::default(), vec![both_ok, one_down], None).await;

    let (status, body) = post(node.addr, "/webhooks/orders", &[], r#"{"order":1}"#).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(healthy.received().len(), 2, "both sinks delivered before the answer");
    assert_eq!(&healthy.received()[0].body[..], br#"{"order":1}"#);
    let (status, body) = post(node.addr, "/webhooks/billing", &[], r#"{"invoice":1}"#).await;
    assert_eq!((status, body["error"].as_str()), (503, Some("sink_unavailable")));

    // A source with no durable sink is refused under wal.mode none, named.
    let log = log_sink(&rt).await;
    let sources = [SourceDurability {
        source: "github".into(),
        sinks: vec![SinkDurability { name: "log".into(), durable: log.durable() }],
    }];
    let err = validate_config(WalMode::None, &sources).expect_err("refused");
    assert!(err.to_string().contains("`github`"), "{err}");
    assert!(validate_config(WalMode::Disk, &sources).is_ok());
}

/// Send `request` while reading the answer: a server that refuses before
/// reading everything may close while the client still writes.
async fn raw_while_sending(addr: std::net::SocketAddr, request: Vec<u8>, wait: Duration) -> String {
    let stream = TcpStream::connect(addr).await.expect("connect");
    let (mut read, mut write) = stream.into_split();
    let sending = tokio::spawn(async move {
        let _ = write.write_all(&request).await;
        write
    });
    let mut answer = Vec::new();
    let mut buf = vec![0u8; 4096];
    let deadline = tokio::time::Instant::now() + wait;
    while !String::from_utf8_lossy(&answer).contains("\r\n\r\n") {
        match tokio::time::timeout_at(deadline, read.read(&mut buf)).await.expect("an answer in time") {
            Ok(0) | Err(_) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
        }
    }
    sending.abort();
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_head_is_refused_431_a_long_line_414_and_a_large_head_within_the_limit_is_kept() {
    let rt = runtime().await;
    let node =
        start(EdgeConfig::default(), vec![source("github", vec![log_sink(&rt).await])], Some(QueueConfig::default()))
            .await;
    let wait = Duration::from_secs(5);
    let mut huge = b"POST /webhooks/github HTTP/1.1\r\nhost: x\r\nx-padding: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 400_000));
    huge.extend_from_slice(b"\r\ncontent-length: 2\r\n\r\n{}");
    let answer = raw_while_sending(node.addr, huge, wait).await;
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
    assert!(answer.to_ascii_lowercase().contains("content-type: application/json"), "typed: {answer}");
    let queue = node.queue.as_ref().expect("queue");
    assert!(queue.hooks(0, 10).expect("hooks").is_empty(), "nothing was stored");
    // A request line over 8 KiB: 414, typed like every refusal.
    let long = format!("POST /webhooks/{} HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{{}}", "g".repeat(70_000));
    let answer = raw_while_sending(node.addr, long.into_bytes(), wait).await;
    assert!(answer.starts_with("HTTP/1.1 414"), "{answer}");
    assert!(queue.hooks(0, 10).expect("hooks").is_empty(), "nothing was stored");

    // More header fields than hyper reads: a typed 431, counted.
    let fields: String = (0..150).map(|i| format!("x-{i}: v\r\n")).collect();
    let many = format!("POST /webhooks/github HTTP/1.1\r\nhost: x\r\n{fields}content-length: 2\r\n\r\n{{}}");
    let answer = raw_while_sending(node.addr, many.into_bytes(), wait).await;
    assert!(answer.starts_with("HTTP/1.1 431") && answer.contains("too_many_headers"), "{answer}");
    // A length no body can have: 413, like a body over the limit.
    let endless = format!("POST /webhooks/github HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n{{}}", u64::MAX);
    let answer = raw_while_sending(node.addr, endless.into_bytes(), wait).await;
    assert!(answer.starts_with("HTTP/1.1 413") && answer.contains("payload_too_large"), "{answer}");
    assert!(queue.hooks(0, 10).expect("hooks").is_empty(), "nothing was stored");
    let metrics = ankusa::metrics::metrics().encode();
    assert!(metrics.contains("ankusa_ingest_requests_total{outcome=\"too_many_headers\"}"), "{metrics}");

    // 60 KiB of headers fits the 64 KiB default and is stored with the hook.
    let mut large = b"POST /webhooks/github HTTP/1.1\r\nhost: x\r\n".to_vec();
    for i in 0..60 {
        large.extend_from_slice(format!("x-pad-{i}: ").as_bytes());
        large.extend(std::iter::repeat_n(b'b', 1000));
        large.extend_from_slice(b"\r\n");
    }
    large.extend_from_slice(b"content-length: 2\r\n\r\n{}");
    let answer = raw_while_sending(node.addr, large, wait).await;
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
    let stored = queue.hooks(0, 10).expect("hooks");
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].headers.iter().filter(|(name, _)| name.starts_with("x-pad-")).count(), 60);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_framed_two_ways_is_refused_and_its_connection_closed() {
    let rt = runtime().await;
    let node =
        start(EdgeConfig::default(), vec![source("github", vec![log_sink(&rt).await])], Some(QueueConfig::default()))
            .await;
    let queue = node.queue.clone().expect("queue");
    for both in
        ["content-length: 6\r\ntransfer-encoding: chunked\r\n", "Transfer-Encoding: chunked\r\nContent-Length: 6\r\n"]
    {
        // A good request first on the same connection, each framing once,
        // so the refusal is found past bodies of both kinds.
        let mut stream = TcpStream::connect(node.addr).await.expect("connect");
        let mut bytes = b"POST /webhooks/github HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}".to_vec();
        bytes.extend_from_slice(b"POST /webhooks/github HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n");
        bytes.extend_from_slice(b"2\r\n[]\r\n0\r\n\r\n");
        bytes.extend_from_slice(format!("POST /webhooks/github HTTP/1.1\r\nhost: x\r\n{both}\r\n").as_bytes());
        bytes.extend_from_slice(b"1\r\n1\r\n0\r\n\r\n");
        stream.write_all(&bytes).await.expect("send");
        let mut answers = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answers)).await;
        let answers = String::from_utf8_lossy(&answers).into_owned();
        assert!(read.is_ok(), "the connection is closed after the refusal: {answers}");
        assert_eq!(answers.matches("HTTP/1.1 ").count(), 3, "{answers}");
        let refusal = answers.rfind("HTTP/1.1 ").map(|at| &answers[at..]).expect("a third answer");
        assert!(refusal.starts_with("HTTP/1.1 400"), "{answers}");
        assert!(refusal.contains("ambiguous_framing"), "{answers}");
        assert!(refusal.to_ascii_lowercase().contains("connection: close"), "{answers}");
    }
    let bodies: Vec<Vec<u8>> = queue.hooks(0, 10).expect("hooks").into_iter().map(|h| h.body).collect();
    assert_eq!(
        bodies,
        vec![b"{}".to_vec(), b"[]".to_vec(), b"{}".to_vec(), b"[]".to_vec()],
        "the refused hooks were not stored"
    );
}
