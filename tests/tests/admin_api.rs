//! The admin API of the real binary: every endpoint, its bad input, paging
//! through a DLQ larger than a page, the OpenAPI document against the
//! routes actually served, and more runtime sources than a node has
//! instances.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ankusa_tests::binary::{RunningNode, eventually, request, write_config};
use ankusa_tests::receiver::{Receiver, Reply};
use serde_json::{Value, json};

/// Every admin route: (method, path). The document must list exactly
/// these, and each must be served.
const ROUTES: [(&str, &str); 35] = [
    ("get", "/health"),
    ("get", "/ready"),
    ("get", "/metrics"),
    ("get", "/openapi.json"),
    ("get", "/v1/config"),
    ("get", "/v1/wal"),
    ("get", "/v1/fleet"),
    ("get", "/v1/dlq"),
    ("get", "/v1/hooks/{seq}"),
    ("get", "/v1/sources"),
    ("get", "/v1/tenants"),
    ("get", "/v1/replays"),
    ("post", "/v1/replays"),
    ("get", "/v1/replays/{id}"),
    ("patch", "/v1/replays/{id}"),
    ("get", "/v1/quarantine"),
    ("delete", "/v1/quarantine"),
    ("get", "/v1/ordering/held"),
    ("post", "/v1/ordering/release"),
    ("get", "/v1/tenants/{tenant}/sources"),
    ("post", "/v1/tenants/{tenant}/sources"),
    ("get", "/v1/tenants/{tenant}/sources/{name}"),
    ("put", "/v1/tenants/{tenant}/sources/{name}"),
    ("delete", "/v1/tenants/{tenant}/sources/{name}"),
    ("get", "/v1/tenants/{tenant}/usage"),
    ("get", "/v1/tenants/{tenant}/rate-limit"),
    ("put", "/v1/tenants/{tenant}/rate-limit"),
    ("get", "/v1/tenants/{tenant}"),
    ("delete", "/v1/tenants/{tenant}"),
    ("get", "/v1/sinks"),
    ("post", "/v1/sinks/reload"),
    ("put", "/v1/sinks/{name}/component"),
    ("get", "/v1/stats"),
    ("get", "/v1/transforms"),
    ("post", "/v1/transforms/{name}/try"),
];

fn config(receiver: &Receiver, failing: &Receiver) -> String {
    format!(
        r#"
dispatch:
  retry: {{initial_ms: 50, max_ms: 200}}
  # The flaky sink's rows keep cycling instead of waiting out a breaker.
  breaker: {{failures: 100000}}
sinks:
  hook:
    component: http
    options: {{url: "{url}"}}
    allow: ["{origin}"]
  flaky:
    component: http
    options: {{url: "{failing_url}"}}
    allow: ["{failing_origin}"]
  log: {{component: log}}
sources:
  orders:
    tenant: acme
    sinks: [hook]
  signed:
    tenant: acme
    sinks: [hook]
    verify: {{preset: github, secret: "s3cret-value"}}
    on_verify_failure: quarantine
"#,
        url = receiver.url("/in"),
        origin = receiver.origin(),
        failing_url = failing.url("/in"),
        failing_origin = failing.origin(),
    )
}

/// 400 runtime sources over 40 tenants, every one bound to one http sink,
/// on a node of 16 instances: each source's hook is delivered and no
/// attempt fails (a source used to hold instances of its own, and past
/// the node's instances healthy sinks failed as `fault`); the sink's
/// instances stay within the node's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_sources_than_instances_all_deliver() {
    const SOURCES: usize = 400;
    let receiver = Receiver::start(Reply::status(200)).await;
    let dir = tempfile::tempdir().expect("dir");
    let path = write_config(
        dir.path(),
        &format!(
            "runtime: {{max_instances: 16}}\nsinks:\n{}sources:\n  seed: {{sinks: [hook]}}\n",
            receiver.http_sink("hook", "/in")
        ),
    );
    let node = RunningNode::start(&path, &dir.path().join("data"), &[]).await;
    for n in 0..SOURCES {
        let body = json!({"name": format!("src-{n}"), "sinks": ["hook"]});
        let (status, answer) = node.admin("POST", &format!("/v1/tenants/t{}/sources", n / 10), Some(body), None).await;
        assert_eq!(status, 201, "source {n}: {answer}");
    }
    for n in 0..SOURCES {
        let (status, answer) = node.post_hook(&format!("src-{n}"), &[], &format!(r#"{{"n":{n}}}"#)).await;
        assert_eq!(status, 201, "{answer}");
    }
    eventually("every source's hook delivered", Duration::from_secs(60), async || {
        receiver.received().iter().filter(|r| r.status == 200).count() >= SOURCES
    })
    .await;
    let (_, metrics) = node.admin("GET", "/metrics", None, None).await;
    let metrics = metrics.as_str().unwrap_or_default().to_string();
    let failed = metrics
        .lines()
        .filter(|l| l.starts_with("ankusa_deliveries_total{") && !l.contains("class=\"ok\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>();
    assert_eq!(failed, 0.0, "no attempt failed:\n{metrics}");
    let instances = metrics
        .lines()
        .find_map(|l| l.strip_prefix("ankusa_sink_instances{sink=\"hook\"} ")?.trim().parse::<f64>().ok())
        .unwrap_or(f64::MAX);
    assert!(instances <= 16.0, "the sink's instances within the node's: {instances}");
    let (status, _) = node.stop();
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_endpoint_answers_and_refuses_bad_input() {
    let accept = Arc::new(AtomicBool::new(false));
    let flag = accept.clone();
    // 410 (dead at once) until the test flips it, then 200.
    let receiver =
        Receiver::scripted(move |_| Reply::status(if flag.load(Ordering::SeqCst) { 200 } else { 410 })).await;
    let failing = Receiver::start(Reply::status(503)).await;
    let dir = tempfile::tempdir().expect("dir");
    let path = write_config(dir.path(), &config(&receiver, &failing));
    let node = RunningNode::start(&path, &dir.path().join("data"), &[]).await;

    probes_and_status(&node).await;
    dlq_paging_and_cursors(&node).await;
    replays(&node, &accept, &receiver).await;
    quarantine(&node).await;
    sources(&node).await;
    rate_limits(&node).await;
    sinks_and_reload(&node).await;
    metrics(&node).await;
    document_covers_every_route(&node).await;
}

async fn probes_and_status(node: &RunningNode) {
    assert_eq!(node.admin("GET", "/health", None, None).await, (200, json!({"status": "ok"})));
    assert_eq!(node.admin("GET", "/ready", None, None).await.0, 200);
    let (status, config) = node.admin("GET", "/v1/config", None, None).await;
    assert_eq!(status, 200);
    assert_eq!(config["sources"]["signed"]["verify"]["secret"], "<redacted>");
    assert!(!config.to_string().contains("s3cret-value"));
    let (status, wal) = node.admin("GET", "/v1/wal", None, None).await;
    assert_eq!((status, wal["mode"].as_str()), (200, Some("disk")));
    assert!(wal["durability"].as_str().is_some_and(|d| d.contains("THIS host")));
    let (status, body) = node.admin("GET", "/v1/fleet", None, None).await;
    assert_eq!((status, body["error"].as_str()), (404, Some("not_in_a_fleet")), "a disk node is in no fleet");
    let (status, body) = node.admin("GET", "/v1/nothing-here", None, None).await;
    assert_eq!((status, body["error"].as_str()), (404, Some("no_route")));
    let (status, body) = node.admin("GET", "/v1/tenants/zeta", None, None).await;
    assert_eq!((status, body["error"].as_str()), (404, Some("not_found")), "never erased");
    let (status, body) = node.admin("GET", "/v1/tenants/bad!id/usage", None, None).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("invalid_tenant")));
    // A path segment that does not decode is refused like any other input.
    let (status, body) = node.admin("GET", "/v1/tenants/%FF%FE/usage", None, None).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("invalid_path")), "{body}");
    assert!(body["message"].is_string(), "{body}");
    // A request line over the limit gets the typed problem too (hyper
    // alone answers 414 with no body).
    let answer = raw(node.admin, &format!("GET /v1/{} HTTP/1.1\r\nhost: x\r\n\r\n", "a".repeat(100_000))).await;
    assert!(answer.starts_with("HTTP/1.1 414"), "{answer}");
    assert!(answer.contains("\"error\":\"uri_too_long\"") && answer.contains("application/json"), "{answer}");
    let answer = raw(node.admin, &format!("GET /health HTTP/1.1\r\nx-pad: {}\r\n\r\n", "b".repeat(100_000))).await;
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
    assert!(answer.contains("\"error\":\"header_too_large\""), "{answer}");
    // More fields than hyper reads, and a length it cannot frame: typed
    // too, not hyper's empty 431.
    let fields: String = (0..150).map(|i| format!("x-{i}: v\r\n")).collect();
    let answer = raw(node.admin, &format!("GET /health HTTP/1.1\r\n{fields}\r\n")).await;
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
    assert!(answer.contains("\"error\":\"too_many_headers\""), "{answer}");
    let answer =
        raw(node.admin, &format!("POST /v1/sinks/reload HTTP/1.1\r\ncontent-length: {}\r\n\r\n", u64::MAX)).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("\"error\":\"payload_too_large\""), "{answer}");
    // A JSON body over the API's limit: 413, not an invalid body.
    let big = serde_json::json!({"body": "x".repeat(3 << 20)});
    let (status, body) = node.admin("POST", "/v1/transforms/none/try", Some(big), None).await;
    assert_eq!((status, body["error"].as_str()), (413, Some("payload_too_large")), "{body}");
    let (_, metrics) = node.admin("GET", "/metrics", None, None).await;
    let metrics = metrics.as_str().unwrap_or_default();
    for reason in ["too_many_headers", "payload_too_large", "uri_too_long", "header_too_large"] {
        let sample = format!("ankusa_admin_refused_total{{reason=\"{reason}\"}}");
        assert!(metrics.contains(&sample), "{sample} in:\n{metrics}");
    }
}

/// Send raw bytes and read the answer until the server closes.
async fn raw(addr: std::net::SocketAddr, request: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "the connection closes after a refusal");
    String::from_utf8_lossy(&answer).into_owned()
}

async fn dead_count(node: &RunningNode, tenant: &str) -> i64 {
    node.admin("GET", &format!("/v1/tenants/{tenant}/usage"), None, None).await.1["dead"].as_i64().unwrap_or(-1)
}

async fn dlq_paging_and_cursors(node: &RunningNode) {
    let mut posted = BTreeSet::new();
    for n in 0..7 {
        let (status, body) = node.post_hook("orders", &[], &format!("{{\"n\":{n}}}")).await;
        assert_eq!(status, 201, "{body}");
        posted.insert(body["id"].as_str().expect("id").to_string());
    }
    eventually("7 dead rows", Duration::from_secs(15), async || dead_count(node, "acme").await == 7).await;

    let mut seen = BTreeSet::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    let mut a_cursor = String::new();
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/dlq?limit=3&cursor={c}"),
            None => "/v1/dlq?limit=3".to_string(),
        };
        let (status, page) = node.admin("GET", &path, None, None).await;
        assert_eq!(status, 200, "{page}");
        pages += 1;
        for entry in page["entries"].as_array().expect("entries") {
            assert_eq!(entry["error_class"], "permanent");
            assert_eq!((entry["sink"].as_str(), entry["sink_index"].as_u64()), (Some("hook"), Some(0)), "named");
            assert!(entry["reason"].as_str().is_some_and(|r| r.contains("410")), "{entry}");
            seen.insert(entry["id"].as_str().expect("id").to_string());
        }
        match page["next_cursor"].as_str() {
            Some(next) => {
                a_cursor = next.to_string();
                cursor = Some(next.to_string());
            }
            None => break,
        }
    }
    assert_eq!(pages, 3, "7 rows in pages of 3");
    assert_eq!(seen, posted, "every dead row once, across pages");

    // A cursor altered by one character, or made up, is refused.
    let mut forged = a_cursor.into_bytes();
    forged[4] = if forged[4] == b'A' { b'B' } else { b'A' };
    let forged = String::from_utf8(forged).expect("ascii");
    for bad in [forged.as_str(), "not-a-cursor"] {
        let (status, body) = node.admin("GET", &format!("/v1/dlq?cursor={bad}"), None, None).await;
        assert_eq!((status, body["error"].as_str()), (400, Some("invalid_cursor")), "{bad}");
    }
    for bad in ["limit=0", "limit=5000", "error_class=nope", "unknown=1", "since=yesterday", "tenant=bad!"] {
        let (status, body) = node.admin("GET", &format!("/v1/dlq?{bad}"), None, None).await;
        assert_eq!((status, body["error"].as_str()), (400, Some("invalid_query")), "{bad}: {body}");
    }
    let (_, filtered) = node.admin("GET", "/v1/dlq?source=signed", None, None).await;
    assert_eq!(filtered["entries"].as_array().map(Vec::len), Some(0));
    let (_, filtered) = node.admin("GET", "/v1/dlq?error_class=permanent&tenant=acme&limit=100", None, None).await;
    assert_eq!(filtered["entries"].as_array().map(Vec::len), Some(7));
    let (_, by_name) = node.admin("GET", "/v1/dlq?sink=hook&limit=100", None, None).await;
    assert_eq!(by_name["entries"].as_array().map(Vec::len), Some(7), "the sink filter takes its name");
    let (_, other) = node.admin("GET", "/v1/dlq?sink=elsewhere", None, None).await;
    assert_eq!(other["entries"].as_array().map(Vec::len), Some(0));

    // One dead hook in full: as received, and what became of its delivery.
    let entry = &by_name["entries"][0];
    let (status, hook) = node.admin("GET", &format!("/v1/hooks/{}", entry["seq"]), None, None).await;
    assert_eq!(status, 200, "{hook}");
    assert_eq!(
        (&hook["id"], &hook["source"], &hook["body_encoding"]),
        (&entry["id"], &entry["source"], &json!("utf8"))
    );
    assert!(hook["body"].as_str().is_some_and(|b| b.starts_with('{')), "{hook}");
    assert!(hook["headers"].as_array().is_some_and(|h| h.iter().any(|p| p[0] == "content-type")), "{hook}");
    let delivery = &hook["deliveries"][0];
    assert_eq!((delivery["sink"].as_str(), delivery["state"].as_str()), (Some("hook"), Some("dead")), "{hook}");
    assert_eq!(delivery["error_class"], "permanent");
    assert!(delivery["reason"].as_str().is_some_and(|r| r.contains("410")));
    for (path, status, code) in [("/v1/hooks/abc", 400, "invalid_seq"), ("/v1/hooks/999999", 404, "not_found")] {
        let (got, body) = node.admin("GET", path, None, None).await;
        assert_eq!((got, body["error"].as_str()), (status, Some(code)), "{path}");
    }
    let (_, tenants) = node.admin("GET", "/v1/tenants", None, None).await;
    let acme =
        tenants.as_array().expect("tenants").iter().find(|t| t["tenant"] == "acme").cloned().expect("acme listed");
    assert_eq!(acme["dead"], 7);
    let (_, sources) = node.admin("GET", "/v1/sources", None, None).await;
    let names: Vec<&str> = sources.as_array().expect("sources").iter().filter_map(|s| s["name"].as_str()).collect();
    assert!(names.contains(&"orders") && names.contains(&"signed"), "{sources}");
}

async fn replays(node: &RunningNode, accept: &AtomicBool, receiver: &Receiver) {
    accept.store(true, Ordering::SeqCst);
    let before = receiver.received().len();
    // A selection: exactly two rows, addressed as the DLQ lists them.
    let (_, page) = node.admin("GET", "/v1/dlq?limit=2", None, None).await;
    let rows: Vec<Value> = page["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| json!({"seq": e["seq"], "sink_index": e["sink_index"]}))
        .collect();
    let (status, job) =
        node.admin("POST", "/v1/replays", Some(json!({"id": "picked", "kind": "dlq", "rows": rows})), None).await;
    assert_eq!(status, 201, "{job}");
    eventually("the selection to finish", Duration::from_secs(15), async || {
        node.admin("GET", "/v1/replays/picked", None, None).await.1["state"] == "done"
    })
    .await;
    eventually("two selected rows delivered", Duration::from_secs(15), async || {
        receiver.received().len() - before >= 2
    })
    .await;
    assert_eq!(node.admin("GET", "/v1/replays/picked", None, None).await.1["moved"], 2);
    eventually("five rows still dead", Duration::from_secs(15), async || dead_count(node, "acme").await == 5).await;

    let (status, job) = node.admin("POST", "/v1/replays", Some(json!({"id": "r1", "kind": "dlq"})), None).await;
    assert_eq!(status, 201, "{job}");
    assert_eq!(job["id"], "r1");
    eventually("the replay to finish", Duration::from_secs(15), async || {
        node.admin("GET", "/v1/replays/r1", None, None).await.1["state"] == "done"
    })
    .await;
    eventually("revived rows delivered", Duration::from_secs(15), async || receiver.received().len() - before >= 7)
        .await;
    eventually("nothing left undelivered", Duration::from_secs(15), async || {
        let usage = node.admin("GET", "/v1/tenants/acme/usage", None, None).await.1;
        usage["dead"] == 0 && usage["pending"] == 0 && usage["inflight"] == 0
    })
    .await;
    assert_eq!(receiver.received().len() - before, 7, "each revived row delivered once");
    let (_, job) = node.admin("GET", "/v1/replays/r1", None, None).await;
    assert_eq!(job["moved"], 5);

    let (status, list) = node.admin("GET", "/v1/replays", None, None).await;
    assert_eq!(status, 200);
    assert!(list.as_array().expect("list").iter().any(|j| j["id"] == "r1"));
    let again = node.admin("POST", "/v1/replays", Some(json!({"id": "r1", "kind": "dlq"})), None).await;
    assert_eq!((again.0, again.1["error"].as_str()), (409, Some("replay_exists")));
    let missing = node.admin("GET", "/v1/replays/none-such", None, None).await;
    assert_eq!((missing.0, missing.1["error"].as_str()), (404, Some("not_found")));
    let missing = node.admin("PATCH", "/v1/replays/none-such", Some(json!({"state": "paused"})), None).await;
    assert_eq!(missing.0, 404);
    for (body, code) in [
        (json!({"state": "sideways"}), "invalid_body"),
        (json!({"state": "paused", "extra": 1}), "invalid_body"),
        (json!({}), "invalid_body"),
    ] {
        let (status, answer) = node.admin("PATCH", "/v1/replays/r1", Some(body.clone()), None).await;
        assert_eq!((status, answer["error"].as_str()), (400, Some(code)), "{body}");
    }
    let (status, done) = node.admin("PATCH", "/v1/replays/r1", Some(json!({"state": "paused"})), None).await;
    assert_eq!((status, done["state"].as_str()), (200, Some("done")), "a finished job stays finished");
    for (body, code) in [
        (json!({"kind": "dlq", "surprise": true}), "invalid_body"),
        (json!({"kind": "everything"}), "invalid_body"),
        (json!({"kind": "archive"}), "archive_disabled"),
        (json!({"kind": "dlq", "error_class": "weird"}), "invalid_body"),
        (json!({"kind": "dlq", "rate": -1.0}), "invalid_body"),
        (json!({"kind": "dlq", "id": "has spaces"}), "invalid_body"),
        (json!({"kind": "dlq", "rows": []}), "invalid_body"),
        (json!({"kind": "dlq", "rows": [{"seq": 1, "sink_index": 0}], "source": "orders"}), "invalid_body"),
        (json!({"kind": "dlq", "rows": [{"seq": 1}]}), "invalid_body"),
    ] {
        let (status, answer) = node.admin("POST", "/v1/replays", Some(body.clone()), None).await;
        assert_eq!((status, answer["error"].as_str()), (400, Some(code)), "{body}: {answer}");
    }
    let (status, _) = request(node.admin, "POST", "/v1/replays", &[], Some("{not json".into())).await;
    assert_eq!(status, 400);
    let quarantine_job =
        node.admin("POST", "/v1/replays", Some(json!({"kind": "quarantine", "source": "nope"})), None).await;
    assert_eq!(quarantine_job.0, 404);
}

async fn quarantine(node: &RunningNode) {
    let (status, body) = node.post_hook("signed", &[("x-hub-signature-256", "sha256=00")], "{\"forged\":true}").await;
    assert_eq!(status, 202, "{body}");
    let (status, page) = node.admin("GET", "/v1/quarantine?tenant=acme", None, None).await;
    assert_eq!(status, 200, "{page}");
    let entries = page["entries"].as_array().expect("entries");
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["reason"], "signature_mismatch");
    assert_eq!(entries[0]["source"], "signed");
    assert!(page["held_bytes"].as_u64().is_some_and(|b| b > 0));
    for bad in ["source=signed", "cursor=zz", "cursor=00", "tenant=a%20b", "limit=0"] {
        let (status, body) = node.admin("GET", &format!("/v1/quarantine?{bad}"), None, None).await;
        assert_eq!(status, 400, "{bad}: {body}");
    }
    let (status, body) = node.admin("DELETE", "/v1/quarantine", None, None).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("invalid_query")), "a tenant or all=true");
    let (status, body) = node.admin("DELETE", "/v1/quarantine?tenant=acme&source=signed", None, None).await;
    assert_eq!((status, body["purged"].as_u64()), (200, Some(1)));
    let (_, page) = node.admin("GET", "/v1/quarantine", None, None).await;
    assert_eq!(page["entries"].as_array().map(Vec::len), Some(0));
    assert_eq!(page["held_bytes"], 0);
}

async fn sources(node: &RunningNode) {
    let (status, created) =
        node.admin("POST", "/v1/tenants/beta/sources", Some(json!({"name": "beta-in", "sinks": ["log"]})), None).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!((created["origin"].as_str(), created["tenant"].as_str()), (Some("runtime"), Some("beta")));
    let (status, body) = node.post_hook("beta-in", &[], "{}").await;
    assert_eq!(status, 201, "a runtime source takes hooks at once: {body}");

    let (_, list) = node.admin("GET", "/v1/tenants/beta/sources", None, None).await;
    assert_eq!(list.as_array().map(Vec::len), Some(1));
    let (_, list) = node.admin("GET", "/v1/tenants/acme/sources", None, None).await;
    assert_eq!(list.as_array().map(Vec::len), Some(2), "the config's sources of acme");
    assert_eq!(node.admin("GET", "/v1/tenants/beta/sources/beta-in", None, None).await.0, 200);
    assert_eq!(node.admin("GET", "/v1/tenants/acme/sources/beta-in", None, None).await.0, 404, "another tenant's");

    let dup =
        node.admin("POST", "/v1/tenants/beta/sources", Some(json!({"name": "orders", "sinks": ["log"]})), None).await;
    assert_eq!((dup.0, dup.1["error"].as_str()), (409, Some("source_exists")));
    let (status, bad) = node
        .admin(
            "POST",
            "/v1/tenants/beta/sources",
            Some(json!({"name": "bad", "sinks": ["nope"], "verify": {"preset": "nah", "secret": "x"}})),
            None,
        )
        .await;
    assert_eq!((status, bad["error"].as_str()), (400, Some("invalid_source")), "{bad}");
    let keys: Vec<&str> =
        bad["details"]["problems"].as_array().expect("problems").iter().filter_map(|p| p["key"].as_str()).collect();
    assert!(keys.contains(&"sources.bad.sinks[0]") && keys.contains(&"sources.bad.verify.preset"), "{keys:?}");
    // Lists over their limits: 422 naming the list and the limit.
    let many_headers: Vec<String> = (0..100_000).map(|i| format!("x-{i}")).collect();
    let many_secrets: Vec<String> = (0..9).map(|i| format!("secret-{i}")).collect();
    for (body, key, limit) in [
        (json!({"name": "wide", "sinks": ["log"], "forward_headers": many_headers}), "forward_headers", 128),
        (json!({"name": "wide", "sinks": vec!["log"; 300]}), "sinks", 256),
        (
            json!({"name": "wide", "sinks": ["log"], "verify": {"preset": "github", "secret": many_secrets}}),
            "verify.secret",
            8,
        ),
    ] {
        let (status, refused) = node.admin("POST", "/v1/tenants/beta/sources", Some(body), None).await;
        assert_eq!((status, refused["error"].as_str()), (422, Some("over_limit")), "{refused}");
        assert_eq!(
            (refused["details"]["key"].as_str(), refused["details"]["limit"].as_u64()),
            (Some(key), Some(limit))
        );
    }
    assert_eq!(node.admin("GET", "/v1/tenants/beta/sources/wide", None, None).await.0, 404, "nothing was written");
    for body in [json!({"name": "x", "sinks": ["log"], "colour": "red"}), json!({"sinks": ["log"]}), json!([1, 2])] {
        let (status, answer) = node.admin("POST", "/v1/tenants/beta/sources", Some(body.clone()), None).await;
        assert_eq!(status, 400, "{body}: {answer}");
    }

    let (status, replaced) = node
        .admin(
            "PUT",
            "/v1/tenants/beta/sources/beta-in",
            Some(json!({"sinks": ["log"], "dedupe": {"header": "idempotency-key"}})),
            None,
        )
        .await;
    assert_eq!(status, 200, "{replaced}");
    let (first, second) = (
        node.post_hook("beta-in", &[("idempotency-key", "k1")], "{}").await,
        node.post_hook("beta-in", &[("idempotency-key", "k1")], "{}").await,
    );
    assert_eq!(second.1["duplicate"], true, "the replaced source dedupes");
    assert_eq!(first.1["id"], second.1["id"]);
    let config_source =
        node.admin("PUT", "/v1/tenants/acme/sources/orders", Some(json!({"sinks": ["log"]})), None).await;
    assert_eq!((config_source.0, config_source.1["error"].as_str()), (409, Some("source_from_config")));

    // A source whose rows are still being retried is not deleted silently.
    let (status, _) = node
        .admin("POST", "/v1/tenants/beta/sources", Some(json!({"name": "retrying", "sinks": ["flaky"]})), None)
        .await;
    assert_eq!(status, 201);
    for _ in 0..2 {
        assert_eq!(node.post_hook("retrying", &[], "{}").await.0, 201);
    }
    let (status, refused) = node.admin("DELETE", "/v1/tenants/beta/sources/retrying", None, None).await;
    assert_eq!((status, refused["error"].as_str()), (409, Some("source_has_rows")), "{refused}");
    let held =
        refused["details"]["pending"].as_u64().unwrap_or(0) + refused["details"]["inflight"].as_u64().unwrap_or(0);
    assert_eq!(held, 2, "{refused}");
    let (status, deleted) =
        node.admin("DELETE", "/v1/tenants/beta/sources/retrying?dead_letter=true", None, None).await;
    assert_eq!(status, 200, "{deleted}");
    eventually("its rows dead as gone", Duration::from_secs(15), async || {
        let (_, page) = node.admin("GET", "/v1/dlq?source=retrying&error_class=gone", None, None).await;
        page["entries"].as_array().map(Vec::len) == Some(2)
    })
    .await;
    assert_eq!(node.post_hook("retrying", &[], "{}").await.0, 404, "a deleted source takes no hooks");
    assert_eq!(node.admin("DELETE", "/v1/tenants/beta/sources/retrying", None, None).await.0, 404);

    let (status, usage) = node.admin("GET", "/v1/tenants/beta/usage", None, None).await;
    assert_eq!(status, 200);
    assert_eq!((usage["sources"].as_u64(), usage["dead"].as_i64()), (Some(1), Some(2)), "{usage}");
}

async fn rate_limits(node: &RunningNode) {
    let (status, limit) = node.admin("GET", "/v1/tenants/acme/rate-limit", None, None).await;
    assert_eq!((status, limit["own"].as_bool(), limit["rate"].as_f64()), (200, Some(false), Some(5000.0)));
    for body in [json!({"rate": 0, "burst": 1}), json!({"rate": 1, "burst": 0}), json!({"rate": "fast", "burst": 1})] {
        let (status, _) = node.admin("PUT", "/v1/tenants/acme/rate-limit", Some(body.clone()), None).await;
        assert_eq!(status, 400, "{body}");
    }
    let (status, limit) =
        node.admin("PUT", "/v1/tenants/acme/rate-limit", Some(json!({"rate": 0.5, "burst": 1})), None).await;
    assert_eq!((status, limit["own"].as_bool()), (200, Some(true)));
    assert_eq!(node.post_hook("orders", &[], "{}").await.0, 201);
    assert_eq!(node.post_hook("orders", &[], "{}").await.0, 429, "over the tenant's new limit");
    let (_, limit) = node.admin("GET", "/v1/tenants/acme/rate-limit", None, None).await;
    assert_eq!(limit["rate"].as_f64(), Some(0.5));
}

async fn sinks_and_reload(node: &RunningNode) {
    let (status, sinks) = node.admin("GET", "/v1/sinks", None, None).await;
    assert_eq!(status, 200);
    let hook = sinks
        .as_array()
        .expect("list")
        .iter()
        .find(|s| s["source"] == "orders" && s["name"] == "hook")
        .expect("orders' hook sink");
    assert_eq!(hook["sha256"].as_str().map(str::len), Some(64));
    assert_eq!((hook["durable"].as_bool(), hook["component"].as_str()), (Some(true), Some("http")));
    assert!(hook["breaker"].is_string() && hook["instances"]["live"].is_u64(), "{hook}");
    let (status, report) = node.admin("POST", "/v1/sinks/reload", None, None).await;
    assert_eq!(status, 200);
    assert_eq!(report["swapped"].as_array().map(Vec::len), Some(0), "nothing changed");
    assert!(report["unchanged"].as_u64().is_some_and(|n| n >= 3), "{report}");
}

async fn metrics(node: &RunningNode) {
    assert_eq!(node.post_hook("zzz-unknown-source", &[], "{}").await.0, 404);
    let (status, text) = node.admin("GET", "/metrics", None, None).await;
    assert_eq!(status, 200);
    let text = text.as_str().expect("text").to_string();
    for expected in [
        "ankusa_ingest_requests_total{outcome=\"accepted\"}",
        "ankusa_ingest_requests_total{outcome=\"unknown_source\"} 2",
        "ankusa_ingest_requests_total{outcome=\"quarantined\"} 1",
        "ankusa_deliveries_total{source=\"orders\",sink=\"hook\",class=\"permanent\"} 7",
        "ankusa_deliveries_total{source=\"orders\",sink=\"hook\",class=\"ok\"}",
        "ankusa_queue_rows{state=\"dead\"}",
        "ankusa_commit_duration_seconds_bucket",
        "ankusa_commit_group_hooks_count",
        "ankusa_sink_instances{sink=\"hook\"}",
        "ankusa_replay_moved_rows 7",
        "ankusa_load_shed_total 0",
    ] {
        assert!(text.contains(expected), "`{expected}` in the metrics:\n{text}");
    }
    assert!(!text.contains("zzz-unknown-source"), "unknown sources never become labels");
}

async fn document_covers_every_route(node: &RunningNode) {
    let (status, doc) = node.admin("GET", "/openapi.json", None, None).await;
    assert_eq!(status, 200);
    let spec = oas3::from_json(doc.to_string()).expect("a well-formed OpenAPI 3.1 document");
    for (path, method, operation) in spec.operations() {
        for (code, response) in operation.responses(&spec) {
            assert!(!response.description.as_deref().unwrap_or("").is_empty(), "{method} {path} {code}");
        }
    }
    assert!(doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.")), "an OpenAPI 3 document");
    assert!(doc["components"]["securitySchemes"]["bearer"].is_object());
    let mut documented = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("path item").keys() {
            if ["get", "post", "put", "patch", "delete"].contains(&method.as_str()) {
                let operation = &item[method];
                assert!(operation["responses"].as_object().is_some_and(|r| !r.is_empty()), "{method} {path}");
                documented.insert((method.clone(), path.clone()));
            }
        }
    }
    let expected: BTreeSet<(String, String)> = ROUTES.iter().map(|(m, p)| (m.to_string(), p.to_string())).collect();
    assert_eq!(documented, expected, "the document lists exactly the admin routes");
    // And every documented route is served (whatever it answers to a
    // made-up id, it is not "no such route").
    for (method, path) in &expected {
        let concrete =
            path.replace("{tenant}", "gamma").replace("{name}", "x").replace("{id}", "x").replace("{seq}", "1");
        let body = matches!(method.as_str(), "post" | "put" | "patch").then(|| "{}".to_string());
        let (status, answer) = request(node.admin, &method.to_uppercase(), &concrete, &[], body).await;
        let answer: Value = serde_json::from_slice(&answer).unwrap_or(Value::Null);
        assert!(status != 405 && answer["error"] != "no_route", "{method} {path} is served ({status} {answer})");
    }
}
