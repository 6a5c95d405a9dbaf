//! Batched delivery through the real binary into the machine's PostgreSQL:
//! dispatch hands the postgres sink many due hooks per call, never more
//! than its `batch.max_hooks`, and a kill -9 in the middle of batches loses
//! no acked hook.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ankusa_tests::binary::{RunningNode, eventually, request, write_config};
use ankusa_tests::postgres::{Table, psql};
use http_body_util::BodyExt;
use serde_json::json;

const MAX_HOOKS: usize = 8;

fn config(dir: &std::path::Path, table: &Table, max_hooks: usize, max_wait_ms: u64) -> std::path::PathBuf {
    let yaml = format!(
        "sinks:
  archive:
    component: postgres
    options: {{url: \"postgres://postgres@127.0.0.1:5432/test\", table: \"{table}\"}}
    allow: [\"tcp://127.0.0.1:5432\"]
    batch: {{max_hooks: {max_hooks}, max_wait_ms: {max_wait_ms}}}
sources:
  shop:
    sinks: [archive]
",
        table = table.name,
    );
    write_config(dir, &yaml)
}

/// Acked ids, shared by the posting tasks.
type Acked = Arc<Mutex<BTreeSet<String>>>;

/// One hook posted to `shop`; its id if it was acked, `None` if the node
/// did not answer (it was killed).
async fn post_one(client: &Client, ingest: SocketAddr, n: usize) -> Option<String> {
    let request = http::Request::post(format!("http://{ingest}/webhooks/shop"))
        .header("content-type", "application/json")
        .body(json!({"n": n}).to_string())
        .ok()?;
    let response = client.request(request).await.ok()?;
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.ok()?.to_bytes();
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
    let answer: serde_json::Value = serde_json::from_slice(&body).ok()?;
    answer["id"].as_str().map(str::to_string)
}

type Client = hyper_util::client::legacy::Client<hyper_util::client::legacy::connect::HttpConnector, String>;

/// Post up to `n` hooks from 16 tasks at once, until the node stops
/// answering; every acked id lands in `acked`.
fn start_posting(ingest: SocketAddr, n: usize, acked: Acked) -> Vec<tokio::task::JoinHandle<()>> {
    let next = Arc::new(AtomicUsize::new(0));
    (0..16)
        .map(|_| {
            let (next, acked) = (next.clone(), acked.clone());
            tokio::spawn(async move {
                let client: Client =
                    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        return;
                    }
                    match post_one(&client, ingest, i).await {
                        Some(id) => {
                            acked.lock().expect("acked").insert(id);
                        }
                        None => return,
                    }
                }
            })
        })
        .collect()
}

async fn post(node: &RunningNode, n: usize) -> BTreeSet<String> {
    let acked = Acked::default();
    for task in start_posting(node.ingest, n, acked.clone()) {
        task.await.expect("a posting task");
    }
    let acked = acked.lock().expect("acked").clone();
    assert_eq!(acked.len(), n, "every hook was acked");
    acked
}

/// The ids in `table` (none while the sink has not made it yet).
fn rows(table: &Table) -> BTreeSet<String> {
    if psql(&format!("SELECT to_regclass('{}') IS NOT NULL", table.name)).trim() != "t" {
        return BTreeSet::new();
    }
    psql(&format!("SELECT id FROM {}", table.name)).lines().map(str::to_string).filter(|l| !l.is_empty()).collect()
}

/// A histogram's `_count`, `_sum` and the count of its bucket `le`.
fn histogram(metrics: &str, name: &str, le: f64) -> (f64, f64, f64) {
    let value = |prefix: &str| {
        metrics
            .lines()
            .find(|line| line.starts_with(prefix))
            .and_then(|line| line.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let bucket = metrics
        .lines()
        .filter(|line| line.starts_with(&format!("{name}_bucket{{")))
        .filter_map(|line| {
            let bound = line.split("le=\"").nth(1)?.split('"').next()?.parse::<f64>().ok()?;
            let count = line.rsplit(' ').next()?.parse::<f64>().ok()?;
            (bound == le).then_some(count)
        })
        .next()
        .unwrap_or(0.0);
    (value(&format!("{name}_count ")), value(&format!("{name}_sum ")), bucket)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dispatch_batches_due_hooks_within_max_hooks() {
    let table = Table::new("dispatchbatch");
    let dir = tempfile::tempdir().expect("dir");
    let node = RunningNode::start(&config(dir.path(), &table, MAX_HOOKS, 20), &dir.path().join("data"), &[]).await;
    let acked = post(&node, 400).await;
    eventually("every hook is a row", Duration::from_secs(60), async || rows(&table) == acked).await;

    let (_, metrics) = request(node.admin, "GET", "/metrics", &[], None).await;
    let metrics = String::from_utf8_lossy(&metrics);
    let (calls, hooks, within) = histogram(&metrics, "ankusa_delivery_batch_hooks", MAX_HOOKS as f64);
    assert!(calls >= 1.0 && hooks > calls, "hooks went in batches: {calls} calls for {hooks} hooks");
    assert_eq!(within, calls, "no batch is over max_hooks ({MAX_HOOKS})");
    assert!(hooks <= 400.0, "no hook counted twice: {hooks}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_in_the_middle_of_batches_loses_no_acked_hook() {
    let table = Table::new("killbatch");
    let dir = tempfile::tempdir().expect("dir");
    // Large batches that wait up to a second to fill: at any moment, rows
    // are claimed into a batch being filled or being inserted.
    let config = config(dir.path(), &table, 1000, 1000);
    let data = dir.path().join("data");
    let node = RunningNode::start(&config, &data, &[]).await;
    let acked = Acked::default();
    let posting = start_posting(node.ingest, 100_000, acked.clone());
    // Killed while hooks are acked and batches delivered at once.
    eventually("delivery has begun", Duration::from_secs(60), async || !rows(&table).is_empty()).await;
    node.kill();
    for task in posting {
        task.await.expect("a posting task");
    }
    let acked = acked.lock().expect("acked").clone();
    let at_kill = rows(&table).len();
    assert!(at_kill < acked.len(), "the kill came before the end ({at_kill} of {} delivered)", acked.len());
    eprintln!("killed with {at_kill} of {} acked hooks delivered", acked.len());

    // Every acked hook arrives; so may hooks committed whose answer the
    // kill cut off (durable, but never acked to their sender).
    let node = RunningNode::start(&config, &data, &[]).await;
    eventually("every acked hook is a row after the restart", Duration::from_secs(120), async || {
        acked.is_subset(&rows(&table))
    })
    .await;
    let counts = psql(&format!("SELECT count(*), count(DISTINCT id) FROM {}", table.name));
    let (rows, ids) = counts.trim().split_once('|').expect("two counts");
    assert_eq!(rows, ids, "one row per hook: the id absorbs redelivered batches");
    drop(node);
}
