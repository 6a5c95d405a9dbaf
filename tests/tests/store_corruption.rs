//! A hook damaged in the store (one byte flipped in a data block of an
//! SST file) is never retried in silence: its delivery is dead-lettered at
//! once as a `fault` that says the hook is unreadable, counted in
//! `ankusa_store_corruption_total{family="hooks"}` and logged at ERROR
//! once per damaged block naming the file, and
//! the sink's breaker hears nothing of it, so the sink's other hooks
//! deliver. `ankusa store verify` names the damaged file and exits 1.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use ankusa_tests::ankusa_bin;
use ankusa_tests::binary::{RunningNode, eventually, write_config};

const SINKS: &str = "sinks:\n  log: {component: log}\nsources:\n  demo: {sinks: [log]}\n";
const HOOKS: usize = 40;

/// A body of `len` characters that compresses poorly, so the hooks fill
/// the hooks family's own data blocks.
fn body(n: usize, len: usize) -> String {
    let mut x = (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"[(x % 62) as usize])
        })
        .collect()
}

/// The largest SST file of the store: the hooks family's.
fn largest_sst(store: &Path) -> PathBuf {
    std::fs::read_dir(store)
        .expect("store dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "sst"))
        .max_by_key(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .expect("an SST file")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_hook_is_dead_lettered_as_a_fault_and_verify_names_its_file() {
    let dir = tempfile::tempdir().expect("dir");
    let data = dir.path().join("data");
    // Take the hooks with no dispatch, so every one is still stored.
    let ingest_only = write_config(dir.path(), &format!("node: {{roles: [ingest, admin]}}\n{SINKS}"));
    let node = RunningNode::start(&ingest_only, &data, &[]).await;
    for n in 0..HOOKS {
        let (status, _) = node.post_hook("demo", &[], &body(n, 2_000)).await;
        assert_eq!(status, 201);
    }
    let (status, _) = node.stop();
    assert!(status.success());

    let store = data.join("store");
    let sst = largest_sst(&store);
    let mut bytes = std::fs::read(&sst).expect("read the SST");
    bytes[100] ^= 0xff;
    std::fs::write(&sst, bytes).expect("damage the SST");
    let file_name = sst.file_name().and_then(|n| n.to_str()).expect("name").to_string();

    let verify = Command::new(ankusa_bin())
        .args(["store", "verify", "--store"])
        .arg(&store)
        .env("NO_COLOR", "1")
        .output()
        .expect("run store verify");
    let stdout = String::from_utf8_lossy(&verify.stdout);
    assert_eq!(verify.status.code(), Some(1), "damage exits 1:\n{stdout}");
    assert!(stdout.contains(&format!("damaged: {}", sst.display())) || stdout.contains(&file_name), "{stdout}");

    let full = write_config(dir.path(), SINKS);
    let node = RunningNode::start(&full, &data, &[]).await;
    eventually("every row delivered or dead", Duration::from_secs(30), async || {
        let (_, usage) = node.admin("GET", "/v1/tenants/default/usage", None, None).await;
        usage["pending"] == 0 && usage["inflight"] == 0 && usage["dead"].as_i64().is_some_and(|d| d > 0)
    })
    .await;
    let (_, page) = node.admin("GET", "/v1/dlq?limit=100", None, None).await;
    let entries = page["entries"].as_array().unwrap_or_else(|| panic!("a DLQ page: {page}\n{}", node.log())).clone();
    assert!(!entries.is_empty());
    for entry in &entries {
        assert_eq!(entry["error_class"], "fault", "{entry}");
        let reason = entry["reason"].as_str().unwrap_or_default();
        assert!(reason.contains("unreadable") && reason.contains(&file_name), "names the damage: {reason}");
        assert_eq!(entry["attempts"], 1, "not retried: {entry}");
        assert_eq!(entry["unreadable"], true, "flagged as unreadable: {entry}");
    }
    let (_, metrics) = node.admin("GET", "/metrics", None, None).await;
    let metrics = metrics.as_str().unwrap_or_default().to_string();
    let counted = metrics
        .lines()
        .find_map(|l| l.strip_prefix("ankusa_store_corruption_total{family=\"hooks\"} "))
        .and_then(|v| v.trim().parse::<f64>().ok());
    assert!(counted.is_some_and(|blocks| blocks >= 1.0), "the damaged block counted:\n{metrics}");
    let (_, sinks) = node.admin("GET", "/v1/sinks", None, None).await;
    assert_eq!(sinks[0]["breaker"], "closed", "the breaker heard nothing of the damage: {sinks}");
    let log = node.log();
    let delivered = log.lines().filter(|l| l.contains("ankusa::guest") && l.contains(" hook ")).count();
    assert_eq!(delivered + entries.len(), HOOKS, "every readable hook delivered");
    let errors: Vec<&str> = log.lines().filter(|l| l.contains("ERROR") && l.contains("damaged data")).collect();
    assert!(!errors.is_empty(), "the damage told at ERROR:\n{log}");
    assert!(errors.len() as f64 <= counted.unwrap_or(0.0), "once per damaged block, not per hook: {errors:?}");
    assert!(errors.iter().all(|l| l.contains(&file_name)), "each names the file: {errors:?}");
    let warned = log.lines().filter(|l| l.contains("WARN") && l.contains("a hook is unreadable")).count();
    assert_eq!(warned, entries.len(), "each dead-lettered hook told");
}
