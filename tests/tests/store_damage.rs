//! A damaged block in each column family of the store, contained and
//! loud, and repaired without losing anything that could be read. For
//! each family the store is filled by a running node (hooks with dedupe
//! keys, the archive, the quarantine pen, runtime sources), stopped, and
//! one byte of a data block of that family's largest table file is
//! flipped. Started again, the node delivers every hook it can read,
//! dead-letters as `fault` what it cannot, tells the damage once at ERROR
//! and in `ankusa_store_corruption_total{family}`, never repeats a log
//! line in a loop, and answers `/ready` 503 (`store_damaged`) until the
//! damage is repaired: by the node itself for the families derived from
//! the rows (index, counters), else by `ankusa store verify --repair` with
//! the node stopped, after which it is ready again.
//!
//! Judged per hook and per key: a DLQ replay before the repair and
//! another after it deliver every hook whose body can be read, each once
//! (a hook is delivered again only where its retry was taken anew because
//! its dedupe key could not be read, or an archive replay sent it again);
//! every dedupe key that answered a retry as a duplicate before the
//! repair still does after it, and so does every key written again over
//! a damaged copy; the repair names the damaged range exactly.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use ankusa::store::{RocksStore, Store, StoreOptions};
use ankusa_tests::ankusa_bin;
use ankusa_tests::binary::{RunningNode, eventually, write_config};
use ankusa_tests::receiver::{Receiver, Reply};
use serde_json::json;

const HOOKS: usize = 400;
const HELD: usize = 60;
const RUNTIME_SOURCES: usize = 60;

fn config(receiver: &Receiver, roles: &str) -> String {
    format!(
        r#"
node: {{roles: [{roles}]}}
archive: {{enabled: true}}
dispatch:
  retry: {{initial_ms: 50, max_ms: 200}}
sinks:
{hook}sources:
  demo:
    sinks: [hook]
    dedupe: {{header: idempotency-key}}
  signed:
    sinks: [hook]
    verify: {{preset: github, secret: "s3cret"}}
    on_verify_failure: quarantine
"#,
        hook = receiver.http_sink("hook", "/in"),
    )
}

/// A body that compresses poorly, so rows spread over many blocks.
fn body(n: usize) -> String {
    let mut x = (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let noise: String = (0..240)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b"abcdefghijklmnopqrstuvwxyz0123456789"[(x % 36) as usize])
        })
        .collect();
    format!("{{\"n\":{n},\"noise\":\"{noise}\"}}")
}

/// Fill a store through a node that takes hooks but does not deliver.
async fn fill(dir: &Path, receiver: &Receiver) {
    let path = write_config(dir, &config(receiver, "ingest, admin"));
    let node = RunningNode::start(&path, &dir.join("data"), &[]).await;
    for n in 0..HOOKS {
        let key = format!("key-{n}");
        let (status, answer) = node.post_hook("demo", &[("idempotency-key", &key)], &body(n)).await;
        assert_eq!(status, 201, "{answer}");
    }
    for n in 0..HELD {
        let (status, _) = node.post_hook("signed", &[("x-hub-signature-256", "sha256=00")], &body(n)).await;
        assert_eq!(status, 202, "held in the pen");
    }
    for n in 0..RUNTIME_SOURCES {
        let source = json!({"name": format!("runtime-{n}"), "sinks": ["hook"]});
        let (status, answer) = node.admin("POST", "/v1/tenants/default/sources", Some(source), None).await;
        assert_eq!(status, 201, "{answer}");
    }
    let (status, _) = node.stop();
    assert!(status.success());
}

/// Where in a table file the byte flipped lies.
#[derive(Clone, Copy)]
enum Block {
    /// The first data block.
    First,
    /// The block at this share of the file (before the index and filter
    /// at its end): in the dedupe family, past the expiry entries, among
    /// the live keys.
    At(f64),
}

/// Flip a byte of a data block of `family`'s largest table file.
fn damage(store: &Path, family: &str, block: Block) -> String {
    let opened = RocksStore::open(&StoreOptions::new(store)).expect("open the stopped store");
    opened.flush().expect("flush");
    let file = opened
        .table_files()
        .expect("table files")
        .into_iter()
        .filter(|(f, _)| *f == family)
        .map(|(_, path)| path)
        .max_by_key(|path| std::fs::metadata(path).map(|m| m.len()).unwrap_or(0))
        .unwrap_or_else(|| panic!("the {family} family has a table file"));
    drop(opened);
    let mut bytes = std::fs::read(&file).expect("read the table file");
    let at = match block {
        Block::First => 20,
        Block::At(share) => (bytes.len() as f64 * share) as usize,
    };
    bytes[at] ^= 0xff;
    std::fs::write(&file, bytes).expect("damage the table file");
    file.file_name().and_then(|n| n.to_str()).expect("file name").to_string()
}

fn corruption_count(metrics: &str, family: &str) -> f64 {
    let prefix = format!("ankusa_store_corruption_total{{family=\"{family}\"}} ");
    metrics.lines().find_map(|l| l.strip_prefix(&prefix)).and_then(|v| v.trim().parse().ok()).unwrap_or(0.0)
}

/// The log's messages with their times taken off, and how often each came.
fn repeats(log: &str) -> BTreeMap<String, usize> {
    let mut seen = BTreeMap::new();
    for line in log.lines() {
        let message = match serde_json::from_str::<serde_json::Value>(line) {
            Ok(json) => format!("{} {}", json["level"], json["fields"]["message"]),
            Err(_) => line.split_once(' ').map_or(line, |(_, rest)| rest).to_string(),
        };
        *seen.entry(message).or_default() += 1;
    }
    seen
}

/// How many times the receiver got each hook, by its `n`.
fn deliveries_of(receiver: &Receiver) -> HashMap<u64, usize> {
    let mut counts = HashMap::new();
    for received in receiver.received() {
        if let Some(n) = serde_json::from_slice::<serde_json::Value>(&received.body).ok().and_then(|b| b["n"].as_u64())
        {
            *counts.entry(n).or_default() += 1;
        }
    }
    counts
}

/// The hooks' `n` the receiver got (each counted once).
fn delivered(receiver: &Receiver) -> HashSet<u64> {
    deliveries_of(receiver).into_keys().collect()
}

/// Retry every filled hook with its dedupe key: the `n` of those taken
/// anew (their key could not be read; it is written again).
async fn retry_every_key(node: &RunningNode) -> Vec<u64> {
    let mut anew = Vec::new();
    for n in 0..HOOKS {
        let key = format!("key-{n}");
        let (status, answer) = node.post_hook("demo", &[("idempotency-key", &key)], &body(n)).await;
        assert_eq!(status, 201, "a retry is taken, as a duplicate or anew: {answer}");
        if answer["duplicate"] != json!(true) {
            anew.push(n as u64);
        }
    }
    anew
}

/// Replay the DLQ and wait until nothing is left to deliver.
async fn replay_dead(node: &RunningNode, id: &str) {
    let (status, job) = node.admin("POST", "/v1/replays", Some(json!({"id": id, "kind": "dlq"})), None).await;
    assert_eq!(status, 201, "{job}");
    settle(node, &format!("the replay {id}")).await;
}

/// Wait until every replay is done and nothing is pending or in flight.
async fn settle(node: &RunningNode, what: &str) {
    eventually(what, Duration::from_secs(60), async || {
        let (_, jobs) = node.admin("GET", "/v1/replays", None, None).await;
        let replaying = jobs.as_array().into_iter().flatten().any(|j| j["state"] != "done");
        let (_, usage) = node.admin("GET", "/v1/tenants/default/usage", None, None).await;
        !replaying && usage["pending"] == 0 && usage["inflight"] == 0 && usage["scheduled"] == 0
    })
    .await;
}

async fn dead_faults(node: &RunningNode) -> Vec<serde_json::Value> {
    let (_, page) = node.admin("GET", "/v1/dlq?limit=1000&source=demo", None, None).await;
    page["entries"].as_array().cloned().unwrap_or_default()
}

/// What makes the node read `family` once it runs again. Returns the
/// hooks it sends again: those an archive replay moves.
async fn read(node: &RunningNode, family: &str) -> u64 {
    match family {
        "archive" => {
            let (status, answer) = node
                .admin("POST", "/v1/replays", Some(json!({"id": "archive", "kind": "archive", "since": 0})), None)
                .await;
            assert_eq!(status, 201, "{answer}");
            settle(node, "the archive replay").await;
            return node.admin("GET", "/v1/replays/archive", None, None).await.1["moved"].as_u64().unwrap_or(0);
        }
        "quarantine" => {
            let (status, answer) = node.admin("GET", "/v1/quarantine?limit=1000", None, None).await;
            assert_eq!(status, 200, "the pen lists what it can read: {answer}");
        }
        // Read as the node starts or delivers, or by the retries.
        _ => {}
    }
    0
}

/// What could be read of `family` is there after the repair.
async fn kept_after_repair(node: &RunningNode, family: &str) {
    match family {
        "jobs" => {
            let (_, sources) = node.admin("GET", "/v1/tenants/default/sources", None, None).await;
            let runtime = sources.as_array().into_iter().flatten().filter(|s| s["origin"] == "runtime").count();
            assert!(runtime > 0 && runtime < RUNTIME_SOURCES, "the readable runtime sources: {runtime}");
        }
        "quarantine" => {
            let (_, held) = node.admin("GET", "/v1/quarantine?limit=1000", None, None).await;
            let held = held["entries"].as_array().map_or(0, Vec::len);
            assert!(held > 0 && held < HELD, "the readable held hooks: {held}");
        }
        _ => {}
    }
}

async fn damaged_family_is_contained(family: &str, block: Block) {
    let dir = tempfile::tempdir().expect("dir");
    let receiver = Receiver::start(Reply::status(200)).await;
    fill(dir.path(), &receiver).await;
    let data = dir.path().join("data");
    let store = data.join("store");
    let file = damage(&store, family, block);

    let path = write_config(dir.path(), &config(&receiver, "ingest, dispatch, admin"));
    let node = RunningNode::start(&path, &data, &[]).await;
    let sent_again = read(&node, family).await;
    // Every hook delivered or dead-lettered.
    let started = std::time::Instant::now();
    loop {
        let dead = dead_faults(&node).await.len();
        let got = delivered(&receiver).len();
        if got + dead == HOOKS {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{got} delivered and {dead} dead of {HOOKS}:\n{}",
            node.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let dead = dead_faults(&node).await;
    for entry in &dead {
        assert_eq!(entry["error_class"], "fault", "{entry}");
    }
    match family {
        "hooks" | "deliveries" => assert!(!dead.is_empty(), "the damaged block's rows are dead-lettered"),
        _ => assert!(dead.is_empty(), "damage in {family} loses no delivery: {dead:?}"),
    }
    if family == "hooks" {
        assert!(dead.iter().all(|e| e["unreadable"] == true), "{dead:?}");
    }
    if family == "deliveries" {
        // Rows made again from their hooks are filed under their sink.
        assert!(dead.iter().all(|e| e["sink"] == "hook" && e["unreadable"] == false), "{dead:?}");
    }
    // Every key a retry can read answers it as a duplicate; one in a
    // damaged block is taken anew and written again.
    let taken_anew = retry_every_key(&node).await;
    if matches!(block, Block::At(_)) && family == "dedupe" {
        assert!(!taken_anew.is_empty(), "the damaged block held live keys");
    } else {
        assert!(taken_anew.is_empty(), "damage in {family} loses no dedupe key: {taken_anew:?}");
    }

    let (_, metrics) = node.admin("GET", "/metrics", None, None).await;
    let metrics = metrics.as_str().unwrap_or_default().to_string();
    assert!(corruption_count(&metrics, family) >= 1.0, "counted under its family:\n{metrics}");
    let log = node.log();
    let told: Vec<&str> = log.lines().filter(|l| l.contains("holds damaged data")).collect();
    assert!(!told.is_empty(), "told at ERROR:\n{log}");
    assert!(told.iter().all(|l| l.contains("ERROR") && l.contains(family) && l.contains(&file)), "{told:?}");
    let distinct: HashSet<&&str> = told.iter().collect();
    assert_eq!(distinct.len(), told.len(), "each damaged block told once: {told:?}");
    // No loop: no ERROR said twice, no claim failure said again and again.
    for (message, count) in repeats(&log) {
        assert!(!message.contains("ERROR") || count <= 2, "an ERROR repeated {count} times: {message}");
    }
    assert!(log.matches("cannot claim").count() <= 1, "{log}");
    assert!(log.lines().count() < 600, "the log runs on:\n{log}");

    let self_repaired = matches!(family, "index" | "counters");
    let (status, ready) = node.admin("GET", "/ready", None, None).await;
    if self_repaired {
        assert_eq!(status, 200, "the {family} family was rebuilt from the rows: {ready}");
    } else {
        assert_eq!(status, 503, "{ready}");
        let reasons = ready["details"]["reasons"].as_array().cloned().unwrap_or_default();
        assert!(
            reasons.iter().any(|r| r["code"] == "store_damaged"
                && r["message"].as_str().is_some_and(|m| m.contains(family) && m.contains("verify --repair"))),
            "{ready}"
        );
    }
    // A replay before the repair delivers every dead hook that reads.
    replay_dead(&node, "before-repair").await;
    let unreadable = dead_faults(&node).await;
    assert!(unreadable.iter().all(|e| e["unreadable"] == true), "only unreadable hooks stay dead: {unreadable:?}");
    let (status, _) = node.stop();
    assert!(status.success());

    let repair = Command::new(ankusa_bin())
        .args(["store", "verify", "--repair", "--store"])
        .arg(&store)
        .env("NO_COLOR", "1")
        .output()
        .expect("run store verify --repair");
    let said = String::from_utf8_lossy(&repair.stdout);
    assert_eq!(
        repair.status.code(),
        Some(0),
        "repaired and verified:\n{said}\n{}",
        String::from_utf8_lossy(&repair.stderr)
    );
    assert!(said.contains("no damage found"), "{said}");
    if !self_repaired {
        let kept = said
            .lines()
            .find_map(|l| l.strip_prefix(&format!("repaired: the {family} family, ")))
            .and_then(|rest| rest.split(' ').next()?.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("the repair says what it kept:\n{said}"));
        // A family whose keys outlive their delivery still holds readable
        // ones (the replay before the repair delivered every readable
        // hook, so the hooks and rows left are the unreadable ones).
        assert!(matches!(family, "hooks" | "deliveries") || kept > 0, "what could be read was kept:\n{said}");
        let damaged: Vec<&str> = said.lines().filter(|l| l.trim_start().starts_with("damaged:")).collect();
        assert!(!damaged.is_empty(), "says where the damage was:\n{said}");
        match family {
            // The rows were made again from their hooks, the keys written
            // again by the retries: nothing readable is lost.
            "deliveries" | "dedupe" => {
                assert!(damaged.iter().all(|l| l.ends_with(" 0 lost")), "nothing readable lost:\n{said}")
            }
            // What a hook's block held cannot be read from anywhere else:
            // exactly the hooks dead as unreadable are named lost.
            "hooks" => {
                let lost: usize = damaged
                    .iter()
                    .filter_map(|l| l.rsplit(", ").next()?.strip_suffix(" lost")?.parse::<usize>().ok())
                    .sum();
                assert_eq!(lost, unreadable.len(), "the lost hooks are the unreadable ones:\n{said}");
            }
            _ => assert!(said.contains("lost:"), "says what was lost:\n{said}"),
        }
        if family == "deliveries" {
            // Exactly the seqs of the rows the block held (those that were
            // dead-lettered): told by the rows still named there, or, once
            // the replay delivered them all, by the keys around the block.
            let seqs: Vec<u64> = dead.iter().filter_map(|e| e["seq"].as_u64()).collect();
            let (low, high) = (seqs.iter().min().copied().unwrap_or(0), seqs.iter().max().copied().unwrap_or(0));
            let named = format!("damaged: seqs {low} to {high}:");
            let bounded = format!("damaged: seqs after {} and before {}:", low.saturating_sub(1), high + 1);
            assert!(
                damaged.iter().any(|l| l.contains(&named) || l.contains(&bounded)),
                "{named} or {bounded} in:\n{said}"
            );
        }
    }

    eprintln!(
        "{family}: {} delivered, {} dead-lettered, {} retries taken anew; repair: {}",
        delivered(&receiver).len(),
        dead.len(),
        taken_anew.len(),
        said.lines().filter(|l| l.starts_with("repaired") || l.contains("damaged:")).collect::<Vec<_>>().join("; ")
    );
    let node = RunningNode::start(&path, &data, &[]).await;
    let (status, ready) = node.admin("GET", "/ready", None, None).await;
    assert_eq!(status, 200, "ready once repaired: {ready}");
    assert_eq!(dead_faults(&node).await.len(), unreadable.len(), "the dead letters outlive the repair");
    kept_after_repair(&node, family).await;
    // After the repair every key still dedupes, those written again over
    // damaged copies too.
    let lost_keys = retry_every_key(&node).await;
    assert!(lost_keys.is_empty(), "keys readable before the repair are gone after it: {lost_keys:?}");
    replay_dead(&node, "after-repair").await;

    // Per hook: every hook whose body can be read was delivered; each once,
    // but for a retry taken anew or an archive replay.
    let counts = deliveries_of(&receiver);
    let again: HashSet<u64> = taken_anew.iter().copied().collect();
    assert_eq!(counts.len() + unreadable.len(), HOOKS, "every readable hook delivered: {} of {HOOKS}", counts.len());
    let extra: usize = counts.values().map(|c| c - 1).sum();
    assert_eq!(extra as u64, taken_anew.len() as u64 + sent_again, "deliveries beyond one per hook");
    for (n, count) in &counts {
        let allowed = 1 + usize::from(again.contains(n)) + usize::from(sent_again > 0);
        assert!(*count <= allowed, "hook {n} delivered {count} times");
    }
    let (status, _) = node.stop();
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_hooks_block_is_contained() {
    damaged_family_is_contained("hooks", Block::First).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_deliveries_block_is_contained() {
    damaged_family_is_contained("deliveries", Block::First).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_index_block_is_contained() {
    damaged_family_is_contained("index", Block::First).await;
}

/// The family's first block holds expiry entries: each is made again
/// from its live key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_dedupe_expiry_block_is_contained() {
    damaged_family_is_contained("dedupe", Block::First).await;
}

/// A block of live keys: their retries are taken anew and write the keys
/// again, and the repair keeps those newer copies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_dedupe_key_block_is_contained() {
    damaged_family_is_contained("dedupe", Block::At(0.6)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_counters_block_is_contained() {
    damaged_family_is_contained("counters", Block::First).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_jobs_block_is_contained() {
    damaged_family_is_contained("jobs", Block::First).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_archive_block_is_contained() {
    damaged_family_is_contained("archive", Block::First).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_quarantine_block_is_contained() {
    damaged_family_is_contained("quarantine", Block::First).await;
}
