//! `wal.mode: dual`: the intake log beside the store. A torn tail is
//! dropped, damage before it refuses to start (naming file and offset), a
//! half commit is completed on the next boot, and `ankusa store rebuild`
//! restores every acked hook into a new store.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use ankusa::intake::SEAL_LEN;
use ankusa::queue::{Entry, EntryOutcome, Envelope, Queue, QueueConfig, QueueError, Refusal, Side, WalMode};
use ankusa::store::Faults;
use ankusa_tests::ankusa_bin;

struct Node {
    _dir: tempfile::TempDir,
    store: PathBuf,
    intake: PathBuf,
}

impl Node {
    fn new() -> Node {
        let dir = tempfile::tempdir().expect("dir");
        Node { store: dir.path().join("store"), intake: dir.path().join("intake"), _dir: dir }
    }

    fn config(&self) -> QueueConfig {
        QueueConfig { wal: WalMode::Dual, intake_dir: Some(self.intake.clone()), ..QueueConfig::default() }
    }

    fn open(&self) -> Result<Queue, QueueError> {
        Queue::open(&self.store, self.config())
    }

    fn segments(&self) -> Vec<PathBuf> {
        let mut found: Vec<PathBuf> = std::fs::read_dir(&self.intake)
            .expect("intake dir")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|x| x == "intake"))
            .collect();
        found.sort();
        found
    }
}

fn entry(n: usize) -> Entry {
    let body = format!("{{\"n\":{n},\"pad\":\"{}\"}}", "x".repeat(n % 97)).into_bytes();
    let mut envelope = Envelope::new(format!("hook-{n}"), "github".into(), "acme".into(), 1_700_000_000_000, body);
    envelope.dedupe_key = Some(format!("delivery-{n}"));
    Entry::new(envelope, vec![(0, "sha-http".into()), (1, "sha-log".into())])
}

/// Enqueue `count` hooks, returning the acked envelopes.
async fn fill(queue: &Queue, from: usize, count: usize) -> Vec<Envelope> {
    let mut acked = Vec::new();
    for n in from..from + count {
        match &queue.intake().enqueue(vec![entry(n)], None).await.expect("enqueue")[..] {
            [EntryOutcome::Committed(e)] => acked.push(e.clone()),
            other => panic!("hook {n}: {other:?}"),
        }
    }
    acked
}

fn assert_all_present(queue: &Queue, acked: &[Envelope]) {
    let stored = queue.hooks(0, 100_000).expect("hooks");
    for ack in acked {
        let found = stored.iter().find(|h| h.seq == ack.seq).unwrap_or_else(|| panic!("acked seq {} missing", ack.seq));
        assert_eq!(found, ack, "acked hook {} comes back byte for byte", ack.id);
    }
    assert!(!acked.is_empty());
}

#[tokio::test]
async fn a_torn_final_record_is_dropped_and_the_node_starts() {
    let node = Node::new();
    let queue = node.open().expect("open");
    let mut acked = fill(&queue, 0, 49).await;
    let last = node.segments().pop().expect("a segment");
    let last_record_at = std::fs::metadata(&last).expect("meta").len() as usize;
    acked.extend(fill(&queue, 49, 1).await);
    queue.close().await;
    assert_eq!(node.segments().pop().as_ref(), Some(&last), "the 50th record went to the same segment");
    // A crash mid-append leaves a prefix of the frame it was writing: here
    // a second copy of the last record, cut 10 bytes short.
    let mut bytes = std::fs::read(&last).expect("read");
    let good_len = bytes.len();
    let torn = bytes[last_record_at..good_len - 10].to_vec();
    bytes.extend_from_slice(&torn);
    std::fs::write(&last, &bytes).expect("tear");

    let queue = node.open().expect("a torn tail does not stop the node");
    assert_all_present(&queue, &acked);
    let repaired = std::fs::read(&last).expect("read");
    assert_eq!(repaired.len(), good_len + SEAL_LEN, "the torn bytes were cut, and the segment sealed");
    assert_eq!(repaired[..good_len], bytes[..good_len]);
    let more = fill(&queue, 50, 5).await;
    assert!(more[0].seq > acked.last().expect("acked").seq);
    queue.close().await;
}

#[tokio::test]
async fn a_flipped_byte_before_the_tail_refuses_to_start() {
    let node = Node::new();
    let queue = node.open().expect("open");
    fill(&queue, 0, 20).await;
    queue.close().await;
    let first = node.segments().remove(0);
    let mut bytes = std::fs::read(&first).expect("read");
    let offset = 8; // the first record's frame, right after the magic
    bytes[offset + 30] ^= 0x01;
    std::fs::write(&first, &bytes).expect("flip");
    let err = node.open().err().expect("damage before the tail refuses to start");
    let text = err.to_string();
    assert!(text.contains(&first.display().to_string()), "names the file: {text}");
    assert!(text.contains(&format!("offset {offset}")), "names the offset: {text}");
    assert_eq!(std::fs::read(&first).expect("read"), bytes, "the damaged log is left as it is");
}

#[tokio::test]
async fn store_rebuild_restores_every_acked_hook() {
    let node = Node::new();
    let queue = node.open().expect("open");
    let acked = fill(&queue, 0, 300).await;
    queue.close().await;

    std::fs::remove_dir_all(&node.store).expect("lose the store");
    let err = node.open().err().expect("a lost store is not silently started empty");
    assert!(err.to_string().contains("store rebuild"), "{err}");
    let _ = std::fs::remove_dir_all(&node.store);

    let out = Command::new(ankusa_bin())
        .args(["store", "rebuild", "--intake"])
        .arg(&node.intake)
        .arg("--store")
        .arg(&node.store)
        .output()
        .expect("run ankusa store rebuild");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "rebuild failed: {stdout} {}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("300 hooks restored"), "{stdout}");

    let queue = node.open().expect("open the rebuilt store");
    assert_all_present(&queue, &acked);
    assert_eq!(queue.counter(Some("acme"), "pending").expect("counter"), 600);
    assert!(queue.recount(false).expect("recount").drifts.is_empty(), "counters came back with their rows");
    assert!(
        matches!(&queue.intake().enqueue(vec![entry(7)], None).await.expect("enqueue")[..], [EntryOutcome::Duplicate(e)] if e.id == "hook-7")
    );
    assert!(fill(&queue, 300, 1).await[0].seq > acked.last().expect("acked").seq, "seqs go on after the rebuild");
    queue.close().await;
    rebuild_refuses_a_store_that_exists(&node.intake, &node.store);
}

fn rebuild_refuses_a_store_that_exists(intake: &Path, store: &Path) {
    let out = Command::new(ankusa_bin())
        .args(["store", "rebuild", "--intake"])
        .arg(intake)
        .arg("--store")
        .arg(store)
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("already holds a store"));
}

#[tokio::test]
async fn a_half_commit_is_not_acked_and_completes_on_the_next_boot() {
    let node = Node::new();
    let faults = Arc::new(Faults::default());
    let config = QueueConfig { store_faults: Some(faults.clone()), ..node.config() };
    let queue = Queue::open(&node.store, config).expect("open");
    let acked = fill(&queue, 0, 10).await;
    faults.fail_writes.store(true, Ordering::Relaxed);
    let half = queue.intake().enqueue(vec![entry(10)], None).await.expect("enqueue");
    match &half[..] {
        [EntryOutcome::Refused(Refusal::Half { missing: Side::Store, reason })] => {
            assert!(reason.contains("injected"), "{reason}")
        }
        other => panic!("expected a half result, got {other:?}"),
    }
    faults.fail_writes.store(false, Ordering::Relaxed);
    queue.close().await;

    let queue = node.open().expect("reopen");
    assert_all_present(&queue, &acked);
    let hooks = queue.hooks(0, 100).expect("hooks");
    assert_eq!(hooks.len(), 11, "the intake log's copy of the half commit reached the store");
    assert!(queue.recount(false).expect("recount").drifts.is_empty());
    queue.close().await;
}

#[tokio::test]
async fn checkpoints_truncate_the_log() {
    let node = Node::new();
    let config = QueueConfig { intake_segment_bytes: 16 << 10, ..node.config() };
    let queue = Queue::open(&node.store, config.clone()).expect("open");
    let acked = fill(&queue, 0, 400).await;
    // Checkpoints run beside the commits; one more commit after each
    // finishes starts the next.
    let started = std::time::Instant::now();
    while queue.commit_stats().checkpoints == 0 {
        assert!(started.elapsed() < std::time::Duration::from_secs(10), "no checkpoint ran");
        fill(&queue, 10_000 + started.elapsed().as_micros() as usize, 1).await;
    }
    queue.close().await;
    let created =
        node.segments().iter().filter_map(|p| p.file_stem()?.to_str()?.parse::<u64>().ok()).max().expect("a segment")
            + 1;
    let left = node.segments().len() as u64;
    assert!(created >= 10, "small segments rolled: {created}");
    assert!(left <= 3, "checkpointed segments are deleted: {left} of {created} left");
    let queue = Queue::open(&node.store, config).expect("reopen");
    assert_all_present(&queue, &acked);
    queue.close().await;
}
