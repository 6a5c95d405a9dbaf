//! Store failures never become false acks: injected write errors, failed
//! WAL syncs and a full disk give `store_unavailable`, and the store
//! recovers by itself once the disk takes writes again; a read-only disk
//! refuses to open; every hook that *was* acked is there after a reopen.
//!
//! The disk tests mount a small tmpfs (they need root, as CI has).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use ankusa::queue::{Entry, EntryOutcome, Envelope, Queue, QueueConfig, Refusal};
use ankusa::store::Faults;
use ankusa_tests::tmpfs::Tmpfs;

fn entry(n: usize, body_bytes: usize) -> Entry {
    let mut body = format!("{{\"n\":{n}}}").into_bytes();
    body.resize(body_bytes.max(body.len()), b' ');
    let envelope = Envelope::new(format!("hook-{n}"), "stripe".into(), "acme".into(), 1, body);
    Entry::new(envelope, vec![(0, "sha".into())])
}

/// Enqueue `count` hooks one by one; returns (acked, refused as store_unavailable).
async fn enqueue_until(queue: &Queue, from: usize, count: usize, body: usize) -> (Vec<Envelope>, usize) {
    let mut acked = Vec::new();
    let mut refused = 0;
    for n in from..from + count {
        match queue.intake().enqueue(vec![entry(n, body)], None).await.expect("enqueue answers").pop() {
            Some(EntryOutcome::Committed(e)) => acked.push(e),
            Some(EntryOutcome::Refused(Refusal::StoreUnavailable)) => refused += 1,
            other => panic!("hook {n}: unexpected {other:?}"),
        }
    }
    (acked, refused)
}

async fn assert_present(dir: &Path, acked: &[Envelope]) {
    let queue = Queue::open(dir, QueueConfig::default()).expect("reopen");
    let stored = queue.hooks(0, 1_000_000).expect("hooks");
    for ack in acked {
        assert!(stored.iter().any(|h| h == ack), "acked hook {} (seq {}) is stored byte for byte", ack.id, ack.seq);
    }
    let next = queue.stats().expect("stats").next_seq;
    assert!(acked.iter().all(|a| a.seq < next), "no acked seq will be reused");
    queue.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_write_errors_are_refused_never_acked() {
    let dir = tempfile::tempdir().expect("dir");
    let faults = Arc::new(Faults::default());
    let queue = Queue::open(dir.path(), QueueConfig { store_faults: Some(faults.clone()), ..QueueConfig::default() })
        .expect("open");
    let (mut acked, refused) = enqueue_until(&queue, 0, 20, 100).await;
    assert_eq!((acked.len(), refused), (20, 0));
    faults.fail_writes.store(true, Ordering::Relaxed);
    let (during, refused) = enqueue_until(&queue, 20, 20, 100).await;
    assert_eq!((during.len(), refused), (0, 20), "every commit during the fault is refused");
    faults.fail_writes.store(false, Ordering::Relaxed);
    let (after, _) = enqueue_until(&queue, 40, 20, 100).await;
    assert_eq!(after.len(), 20, "commits resume once the store heals");
    acked.extend(after);
    let stored: Vec<String> = queue.hooks(0, 1000).expect("hooks").into_iter().map(|h| h.id).collect();
    assert_eq!(stored.len(), 40, "none of the refused hooks was written: {stored:?}");
    queue.close().await;
    assert_present(dir.path(), &acked).await;
}

/// Groups are written unsynced and acked after a WAL sync. A sync that
/// fails acks nothing it covers, and nothing after it either: the kernel
/// may have dropped the unsynced pages. Once the disk answers again the
/// queue reopens the store from its files by itself, and commits resume
/// with every acked hook there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_wal_sync_acks_nothing_until_the_store_recovers_by_itself() {
    let dir = tempfile::tempdir().expect("dir");
    let faults = Arc::new(Faults::default());
    let config = QueueConfig { store_faults: Some(faults.clone()), ..QueueConfig::default() };
    let queue = Queue::open(dir.path(), config).expect("open");
    let (acked, refused) = enqueue_until(&queue, 0, 20, 100).await;
    assert_eq!((acked.len(), refused), (20, 0));
    let before = queue.commit_stats();

    faults.fail_syncs.store(true, Ordering::Relaxed);
    let (during, refused) = enqueue_until(&queue, 20, 5, 100).await;
    assert_eq!((during.len(), refused), (0, 5), "no hook is acked by a failed sync");
    assert_eq!(queue.commit_stats().hooks, before.hooks, "refused hooks do not count as committed");
    assert!(queue.last_commit_failure_ms().is_some(), "readiness sees the failure");
    // Still failing: the store stays refused, whatever time passes.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let (still, _) = enqueue_until(&queue, 25, 3, 100).await;
    assert!(still.is_empty(), "nothing is acked while syncs fail");

    faults.fail_syncs.store(false, Ordering::Relaxed);
    let mut resumed = Vec::new();
    let started = Instant::now();
    let mut n = 28;
    while resumed.len() < 5 {
        assert!(started.elapsed() < Duration::from_secs(15), "commits did not resume by themselves");
        let (acked, _) = enqueue_until(&queue, n, 1, 100).await;
        n += 1;
        resumed.extend(acked);
        if resumed.is_empty() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let stored: Vec<String> = queue.hooks(0, 1_000).expect("hooks").into_iter().map(|h| h.id).collect();
    for ack in acked.iter().chain(&resumed) {
        assert!(stored.contains(&ack.id), "acked hook {} is stored in the recovered store", ack.id);
    }
    queue.close().await;
    assert_present(dir.path(), &[acked, resumed].concat()).await;
}

/// A disk that turned read-only (the kernel does that to a file system
/// after I/O errors) while the node was down: the store is refused with a
/// message, never opened as something else, and is whole once writable.
/// (A disk that turns read-only under a running store fails its writes as
/// in `injected_write_errors_are_refused_never_acked`: tmpfs cannot be
/// remounted read-only with files open for writing.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_disk_is_refused_and_loses_nothing() {
    let disk = Tmpfs::mount("64m");
    let store = disk.path.join("store");
    let queue = Queue::open(&store, QueueConfig::default()).expect("open");
    let (acked, _) = enqueue_until(&queue, 0, 30, 200).await;
    assert_eq!(acked.len(), 30);
    queue.close().await;
    disk.remount("ro");
    let err = Queue::open(&store, QueueConfig::default()).err().expect("a read-only store does not open for writes");
    let text = err.to_string();
    assert!(text.contains(&store.display().to_string()), "names the store: {text}");
    disk.remount("rw");
    assert_present(&store, &acked).await;
}

/// A full disk refuses commits (`store_unavailable`), never acks them, and
/// once space returns the queue recovers by itself: commits resume without
/// a restart, and every hook acked before and after is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_is_store_unavailable_until_space_returns() {
    let disk = Tmpfs::mount("6m");
    let store = disk.path.join("store");
    let queue = Queue::open(&store, QueueConfig::default()).expect("open");
    let (mut acked, refused) = enqueue_until(&queue, 0, 400, 64 << 10).await;
    assert!(refused > 0, "a 6 MiB disk cannot hold 400 hooks of 64 KiB: {} acked", acked.len());
    assert!(!acked.is_empty(), "the disk held some before it filled");
    let (full, _) = enqueue_until(&queue, 400, 3, 64 << 10).await;
    assert!(full.is_empty(), "still full: nothing acked");

    disk.remount("size=256m");
    let started = Instant::now();
    let mut n = 403;
    let mut resumed = Vec::new();
    while resumed.len() < 10 {
        assert!(started.elapsed() < Duration::from_secs(20), "commits did not resume once space returned");
        let (more, _) = enqueue_until(&queue, n, 1, 64 << 10).await;
        n += 1;
        if more.is_empty() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        resumed.extend(more);
    }
    acked.extend(resumed);
    let stored: Vec<String> = queue.hooks(0, 1_000_000).expect("hooks").into_iter().map(|h| h.id).collect();
    for ack in &acked {
        assert!(stored.contains(&ack.id), "acked hook {} is in the recovered store", ack.id);
    }
    queue.close().await;
    assert_present(&store, &acked).await;
}
