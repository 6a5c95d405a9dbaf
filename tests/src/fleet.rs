//! A fleet of real nodes for tests and benchmarks: node configs, nodes
//! started on a shared directory, a provider's posts, and the checks that
//! every acked hook arrived with its bytes.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use http_body_util::BodyExt;
use serde_json::Value;

use crate::ankusa_bin;
use crate::binary::{RunningNode, eventually, write_config};
use crate::nats_cluster::Cluster;
use crate::receiver::{Receiver, Reply};

/// Lease lapse in these tests: a takeover starts ~2-3 s after a kill.
pub const LEASE_TTL_MS: u64 = 2_000;

/// Starts a supervised node gets before its exits fail the test.
const SUPERVISED_STARTS: usize = 5;

pub fn node_yaml(nats: &str, node_id: &str, receiver: &Receiver, replicas: usize) -> String {
    node_yaml_binding(nats, node_id, receiver, replicas, "out")
}

/// [`node_yaml`] with the `orders` source's one binding written as
/// `binding` (a sink's name, or a flow map with `ordering`).
pub fn node_yaml_binding(nats: &str, node_id: &str, receiver: &Receiver, replicas: usize, binding: &str) -> String {
    node_yaml_with(nats, node_id, receiver, replicas, binding, "")
}

/// [`node_yaml_binding`] with `extra` lines (top-level keys, or indented
/// ones of `fleet:`) after the fleet's own.
pub fn node_yaml_with(
    nats: &str,
    node_id: &str,
    receiver: &Receiver,
    replicas: usize,
    binding: &str,
    extra: &str,
) -> String {
    format!(
        "wal: {{mode: fleet}}
fleet:
  nats: {urls}
  replicas: {replicas}
  node_id: {node_id}
  lease_ttl_ms: {LEASE_TTL_MS}
  publish_timeout_ms: 2000
  connect_timeout_ms: 2000
{extra}
dispatch:
  concurrency: 2
  sink_concurrency: 2
  retry: {{initial_ms: 50, jitter: 0.0}}
sinks:
  out:
    component: http
    options: {{url: \"{url}\"}}
    allow: [\"{origin}\"]
sources:
  orders:
    sinks: [{binding}]
    dedupe: {{header: idempotency-key}}
  signed:
    sinks: [out]
    verify: {{preset: github, secret: \"s3cret-value\"}}
    on_verify_failure: quarantine
",
        urls = nats,
        url = receiver.url(&format!("/hooks/{node_id}")),
        origin = receiver.origin(),
    )
}

pub struct Fleet {
    dir: tempfile::TempDir,
    /// The `ankusa` binary (default: the test build's).
    bin: Option<PathBuf>,
    /// The `orders` source's binding (default: `out`, unordered).
    binding: String,
    /// Lines added to each node's config (see [`node_yaml_with`]).
    extra: String,
}

impl Default for Fleet {
    fn default() -> Self {
        Fleet::new()
    }
}

impl Fleet {
    pub fn new() -> Fleet {
        Fleet { dir: tempfile::tempdir().expect("dir"), bin: None, binding: "out".into(), extra: String::new() }
    }

    /// Nodes run from `bin` (a benchmark's release build).
    pub fn with_binary(bin: PathBuf) -> Fleet {
        Fleet { bin: Some(bin), ..Fleet::new() }
    }

    /// Nodes whose `orders` source delivers in order by `key`.
    pub fn ordered(key: &str) -> Fleet {
        Fleet::new().and_ordered(key)
    }

    /// Nodes whose configs carry `extra` lines too (see [`node_yaml_with`]).
    pub fn with_config(extra: &str) -> Fleet {
        Fleet::new().and_config(extra)
    }

    /// This fleet, its `orders` source delivering in order by `key`.
    pub fn and_ordered(mut self, key: &str) -> Fleet {
        self.binding = format!("{{sink: out, ordering: {{key: \"{key}\"}}}}");
        self
    }

    /// This fleet, its nodes' configs carrying `extra` lines too.
    pub fn and_config(mut self, extra: &str) -> Fleet {
        self.extra.push_str(extra);
        self
    }

    pub fn data(&self, node: &str) -> PathBuf {
        self.dir.path().join(format!("data-{node}"))
    }

    pub async fn start(&self, cluster: &Cluster, node: &str, receiver: &Receiver) -> RunningNode {
        self.start_via(&cluster.yaml_urls(), node, receiver).await
    }

    /// A node that reaches NATS at `nats` (a fault proxy's addresses).
    pub async fn start_via(&self, nats: &str, node: &str, receiver: &Receiver) -> RunningNode {
        self.try_start_via(nats, node, receiver).await.unwrap_or_else(|exited| panic!("{exited}"))
    }

    /// [`Fleet::start_via`] as a supervisor does it: a node that exits
    /// before it is ready (NATS not answering its first reads while a fault
    /// lasts) is started again, up to `SUPERVISED_STARTS` times.
    pub async fn start_supervised(&self, nats: &str, node: &str, receiver: &Receiver) -> RunningNode {
        let mut exits = Vec::new();
        while exits.len() < SUPERVISED_STARTS {
            match self.try_start_via(nats, node, receiver).await {
                Ok(running) => return running,
                Err(exited) => exits.push(exited),
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        panic!("node {node} exited before it was ready {SUPERVISED_STARTS} times:\n{}", exits.join("\n---\n"))
    }

    async fn try_start_via(&self, nats: &str, node: &str, receiver: &Receiver) -> Result<RunningNode, String> {
        let config_dir = self.dir.path().join(format!("config-{node}"));
        std::fs::create_dir_all(&config_dir).expect("config dir");
        let config = write_config(&config_dir, &node_yaml_with(nats, node, receiver, 3, &self.binding, &self.extra));
        let bin = self.bin.clone().unwrap_or_else(ankusa_bin);
        RunningNode::try_start_bin(&bin, &config, &self.data(node), &[], "127.0.0.1:0").await
    }
}

/// POST a hook without panicking on a refused connection (a killed node):
/// `None` if no answer came.
pub async fn try_post(addr: SocketAddr, key: &str, body: &str) -> Option<(u16, Value, Option<String>)> {
    try_post_with(addr, key, body, &[]).await
}

/// [`try_post`] with `headers` added.
pub async fn try_post_with(
    addr: SocketAddr,
    key: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> Option<(u16, Value, Option<String>)> {
    let client =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http::<String>();
    let mut request = http::Request::builder()
        .method("POST")
        .uri(format!("http://{addr}/webhooks/orders"))
        .header("content-type", "application/json")
        .header("idempotency-key", key);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(body.to_string()).ok()?;
    let response = tokio::time::timeout(Duration::from_secs(20), client.request(request)).await.ok()?.ok()?;
    let status = response.status().as_u16();
    let retry_after = response.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_string);
    let bytes =
        tokio::time::timeout(Duration::from_secs(20), response.into_body().collect()).await.ok()?.ok()?.to_bytes();
    Some((status, serde_json::from_slice(&bytes).unwrap_or(Value::Null), retry_after))
}

/// What a load run got acked: hook id → the bytes posted.
pub type Acked = HashMap<String, String>;

/// Post `count` distinct hooks to `addr` from `workers` connections; the
/// ones answered 201, and every other answer's status.
pub async fn load(addr: SocketAddr, tag: &str, count: usize, workers: usize) -> (Acked, Vec<u16>) {
    let acked = Arc::new(std::sync::Mutex::new(Acked::new()));
    let refused = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for w in 0..workers {
        let (acked, refused, tag) = (acked.clone(), refused.clone(), tag.to_string());
        tasks.push(tokio::spawn(async move {
            for i in (w..count).step_by(workers) {
                let body = format!("{{\"node\":\"{tag}\",\"n\":{i},\"pad\":\"{}\"}}", "x".repeat(i % 97));
                match try_post(addr, &format!("{tag}-{i}"), &body).await {
                    Some((201, answer, _)) => {
                        let id = answer["id"].as_str().expect("a 201 names its hook").to_string();
                        acked.lock().expect("acked").insert(id, body);
                    }
                    Some((status, _, _)) => refused.lock().expect("refused").push(status),
                    None => refused.lock().expect("refused").push(0),
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("poster");
    }
    let acked = std::mem::take(&mut *acked.lock().expect("acked"));
    let refused = std::mem::take(&mut *refused.lock().expect("refused"));
    (acked, refused)
}

/// Deliveries the receiver got (answered 2xx), by hook id: how many
/// times, and the bytes of each.
pub fn deliveries(receiver: &Receiver) -> HashMap<String, Vec<Vec<u8>>> {
    let mut by_id: HashMap<String, Vec<Vec<u8>>> = HashMap::new();
    for r in receiver.received().into_iter().filter(|r| (200..300).contains(&r.status)) {
        let id = r.header("x-ankusa-id").expect("every delivery names its hook").to_string();
        by_id.entry(id).or_default().push(r.body.to_vec());
    }
    by_id
}

/// Until the receiver has had every hook of `acked` (or panics after
/// `within`, naming `what`).
pub async fn all_delivered(what: &str, acked: &Acked, receiver: &Receiver, within: Duration) {
    eventually(what, within, async || {
        let got = deliveries(receiver);
        acked.keys().all(|id| got.contains_key(id))
    })
    .await;
}

/// Every acked hook delivered, with its exact bytes; the duplicate count.
pub fn check_delivered(acked: &Acked, receiver: &Receiver) -> usize {
    let got = deliveries(receiver);
    for (id, body) in acked {
        let copies = got.get(id).unwrap_or_else(|| panic!("acked hook {id} was never delivered"));
        assert!(copies.iter().all(|c| c == body.as_bytes()), "hook {id} arrived with other bytes");
    }
    got.values().map(|c| c.len() - 1).sum()
}

/// The takeover of `taken` by `by` (node id `by_id`), once done.
pub async fn wait_taken(by: &RunningNode, by_id: &str, taken: &str, within: Duration) -> Value {
    let mut record = Value::Null;
    eventually(&format!("the takeover of {taken}"), within, async || {
        // 503 while the bucket's stream elects a leader: ask again.
        let (code, status) = by.admin("GET", "/v1/fleet", None, None).await;
        if code != 200 {
            return false;
        }
        let node = status["nodes"].as_array().into_iter().flatten().find(|n| n["node"] == taken).cloned();
        record = node.map(|n| n["taken"].clone()).unwrap_or(Value::Null);
        record["state"] == "done" && record["by"] == by_id
    })
    .await;
    record
}

/// Two nodes, a and b, delivering to a receiver that answers 503 until
/// `open` is set: the set-up of most fleet tests.
pub struct GatedPair {
    pub receiver: Receiver,
    pub open: Arc<AtomicBool>,
    pub fleet: Fleet,
    pub a: RunningNode,
    pub b: RunningNode,
}

impl GatedPair {
    pub async fn start(cluster: &Cluster) -> GatedPair {
        let (receiver, open) = gated_receiver().await;
        let fleet = Fleet::new();
        let a = fleet.start(cluster, "a", &receiver).await;
        let b = fleet.start(cluster, "b", &receiver).await;
        GatedPair { receiver, open, fleet, a, b }
    }
}

/// A receiver that answers 503 until opened, then 200.
pub async fn gated_receiver() -> (Receiver, Arc<AtomicBool>) {
    let open = Arc::new(AtomicBool::new(false));
    let gate = open.clone();
    let receiver =
        Receiver::scripted(move |_| Reply::status(if gate.load(Ordering::SeqCst) { 200 } else { 503 })).await;
    (receiver, open)
}

/// This host's clock in unix ms, as a node on it stamps its records.
pub fn wall_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}
