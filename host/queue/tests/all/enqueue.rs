//! The commit path of the queue: group commit, seqs, deadlines, dedupe.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use ankusa_queue::queue::{Clock, Entry, EntryOutcome, Envelope, Queue, QueueConfig, QueueError, Refusal};
use ankusa_store::store::Faults;
use tokio::time::Instant;

fn entry(id: &str, tenant: &str, dedupe: Option<&str>) -> Entry {
    let mut envelope = Envelope::new(
        id.into(),
        "github".into(),
        tenant.into(),
        1_700_000_000_000,
        format!("{{\"id\":\"{id}\"}}").into_bytes(),
    );
    envelope.dedupe_key = dedupe.map(str::to_string);
    Entry::new(envelope, vec![(0, "sha-log".into()), (1, "sha-http".into())])
}

fn committed(outcomes: &[EntryOutcome]) -> &Envelope {
    match outcomes {
        [EntryOutcome::Committed(e)] => e,
        other => panic!("expected one committed entry, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_callers_share_synced_commits() {
    let dir = tempfile::tempdir().expect("temp dir");
    let queue = Arc::new(Queue::open(dir.path(), QueueConfig::default()).expect("open"));
    let mut tasks = Vec::new();
    for caller in 0..64 {
        let queue = queue.clone();
        tasks.push(tokio::spawn(async move {
            let mut seqs = Vec::new();
            for n in 0..20 {
                let outcomes = queue
                    .intake()
                    .enqueue(vec![entry(&format!("{caller}-{n}"), "acme", None)], None)
                    .await
                    .expect("enqueue");
                seqs.push(committed(&outcomes).seq);
            }
            seqs
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        let seqs = task.await.expect("caller");
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "one caller's seqs increase: {seqs:?}");
        all.extend(seqs);
    }
    let distinct: HashSet<_> = all.iter().collect();
    assert_eq!((all.len(), distinct.len()), (1280, 1280), "every ack has its own seq");
    let ankusa_queue::queue::CommitStats { commits, calls, hooks, .. } = queue.commit_stats();
    assert_eq!(hooks, 1280);
    assert_eq!(calls, 1280);
    assert!(commits < calls, "calls were grouped: {commits} synced commits for {calls} calls");
    assert_eq!(queue.counter(Some("acme"), "pending").expect("counter"), 2 * 1280, "two rows per hook");
    let hooks = queue.hooks(0, 10_000).expect("hooks");
    assert_eq!(hooks.len(), 1280);
    assert!(hooks.windows(2).all(|w| w[0].seq < w[1].seq), "ascending");
}

/// The queue closed while callers hold intake handles and keep enqueuing:
/// every call the writer took is committed and acked, every later one is
/// told `Closed` and writes nothing, so after a reopen the store holds
/// exactly the acked hooks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_amid_enqueues_acks_exactly_what_it_stored() {
    let dir = tempfile::tempdir().expect("temp dir");
    let queue = Queue::open(dir.path(), QueueConfig::default()).expect("open");
    let mut tasks = Vec::new();
    for caller in 0..32 {
        let intake = queue.intake();
        tasks.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            for n in 0.. {
                match intake.enqueue(vec![entry(&format!("{caller}-{n}"), "acme", None)], None).await {
                    Ok(outcomes) => acked.push(committed(&outcomes).id.clone()),
                    Err(QueueError::Closed) => return acked,
                    Err(e) => panic!("enqueue: {e}"),
                }
            }
            unreachable!()
        }));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    queue.close().await;
    let mut acked = HashSet::new();
    for task in tasks {
        acked.extend(task.await.expect("caller"));
    }
    assert!(acked.len() > 32, "calls were acked before the close: {}", acked.len());

    let queue = Queue::open(dir.path(), QueueConfig::default()).expect("reopen");
    let stored: HashSet<String> = queue.hooks(0, 1_000_000).expect("hooks").into_iter().map(|h| h.id).collect();
    assert_eq!(stored, acked, "the store holds exactly the acked hooks");
    queue.close().await;
}

#[tokio::test]
async fn seqs_are_never_reused_across_a_restart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let queue = Queue::open(dir.path(), QueueConfig::default()).expect("open");
    let mut last = 0;
    for n in 0..5 {
        last = committed(
            &queue.intake().enqueue(vec![entry(&format!("a{n}"), "acme", None)], None).await.expect("enqueue"),
        )
        .seq;
    }
    let before = queue.hooks(0, 100).expect("hooks");
    queue.close().await;

    let queue = Queue::open(dir.path(), QueueConfig::default()).expect("reopen");
    assert_eq!(queue.stats().expect("stats").next_seq, last + 1, "next_seq is recovered exactly");
    assert_eq!(queue.hooks(0, 100).expect("hooks"), before, "every acked hook, byte for byte");
    let next = committed(&queue.intake().enqueue(vec![entry("b", "acme", None)], None).await.expect("enqueue")).seq;
    assert!(next > last, "seq {next} after a restart follows {last}");
    queue.close().await;
}

#[tokio::test]
async fn a_passed_deadline_writes_nothing_and_consumes_no_seq() {
    let dir = tempfile::tempdir().expect("temp dir");
    let queue = Queue::open(dir.path(), QueueConfig::default()).expect("open");
    let first = committed(&queue.intake().enqueue(vec![entry("a", "acme", None)], None).await.expect("enqueue")).seq;
    let refused = queue.intake().enqueue(vec![entry("late", "acme", Some("k-late"))], Some(Instant::now())).await;
    assert_eq!(refused, Err(QueueError::DeadlineExceeded));
    let next = queue
        .intake()
        .enqueue(vec![entry("b", "acme", Some("k-late"))], Some(Instant::now() + Duration::from_secs(5)))
        .await
        .expect("enqueue");
    assert_eq!(committed(&next).seq, first + 1, "the refused call consumed no seq and stored no dedupe key");
    assert_eq!(queue.hooks(0, 10).expect("hooks").len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_deliveries_of_one_key_commit_one_hook() {
    let dir = tempfile::tempdir().expect("temp dir");
    let queue = Arc::new(Queue::open(dir.path(), QueueConfig::default()).expect("open"));
    for round in 0..50 {
        let key = format!("delivery-{round}");
        let (a, b) = {
            let (qa, qb, ka, kb) = (queue.clone(), queue.clone(), key.clone(), key.clone());
            tokio::join!(
                tokio::spawn(async move {
                    qa.intake().enqueue(vec![entry(&format!("{round}-a"), "acme", Some(&ka))], None).await
                }),
                tokio::spawn(async move {
                    qb.intake().enqueue(vec![entry(&format!("{round}-b"), "acme", Some(&kb))], None).await
                }),
            )
        };
        let outcomes = [a.expect("task").expect("enqueue"), b.expect("task").expect("enqueue")];
        let winners: Vec<&Envelope> = outcomes
            .iter()
            .filter_map(|o| match &o[0] {
                EntryOutcome::Committed(e) => Some(e),
                _ => None,
            })
            .collect();
        let losers: Vec<&Envelope> = outcomes
            .iter()
            .filter_map(|o| match &o[0] {
                EntryOutcome::Duplicate(e) => Some(e),
                _ => None,
            })
            .collect();
        assert_eq!((winners.len(), losers.len()), (1, 1), "round {round}: {outcomes:?}");
        assert_eq!(losers[0].id, winners[0].id, "the duplicate answers with the original id");
        assert_eq!(losers[0].seq, winners[0].seq);
    }
    assert_eq!(queue.hooks(0, 1000).expect("hooks").len(), 50, "one stored hook per key");
    assert_eq!(queue.counter(Some("acme"), "dedupe_keys").expect("counter"), 50);
}

#[tokio::test]
async fn dedupe_is_scoped_by_tenant_and_long_keys_are_hashed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let queue = Queue::open(dir.path(), QueueConfig::default()).expect("open");
    let long = "k".repeat(500);
    let a = queue.intake().enqueue(vec![entry("a", "acme", Some(&long))], None).await.expect("enqueue");
    let b = queue.intake().enqueue(vec![entry("b", "globex", Some(&long))], None).await.expect("enqueue");
    let c = queue.intake().enqueue(vec![entry("c", "acme", Some(&long))], None).await.expect("enqueue");
    assert!(matches!(&a[0], EntryOutcome::Committed(_)));
    assert!(matches!(&b[0], EntryOutcome::Committed(_)), "another tenant's key is another key");
    assert!(matches!(&c[0], EntryOutcome::Duplicate(e) if e.id == "a"), "{c:?}");
    let stored = &queue.hooks(0, 10).expect("hooks")[0];
    assert_eq!(stored.dedupe_key.as_deref(), Some(long.as_str()), "the envelope keeps the provider's key");
}

/// A long key and a short key that is literally the text long keys are
/// stored as (`sha256:<hex>`) are two keys, in either order.
#[tokio::test]
async fn a_long_key_and_the_text_of_its_digest_never_collide() {
    let long = "k".repeat(500);
    let literal = format!("sha256:{}", ankusa_common::digest::sha256_hex(long.as_bytes()));
    for (first, second) in [(&long, &literal), (&literal, &long)] {
        let dir = tempfile::tempdir().expect("temp dir");
        let queue = Queue::open(dir.path(), QueueConfig::default()).expect("open");
        let a = queue.intake().enqueue(vec![entry("a", "acme", Some(first))], None).await.expect("enqueue");
        let b = queue.intake().enqueue(vec![entry("b", "acme", Some(second))], None).await.expect("enqueue");
        assert!(matches!(&a[0], EntryOutcome::Committed(_)), "{a:?}");
        assert!(matches!(&b[0], EntryOutcome::Committed(_)), "the second is a hook of its own: {b:?}");
        for (key, original) in [(first, "a"), (second, "b")] {
            let again = queue.intake().enqueue(vec![entry("again", "acme", Some(key))], None).await.expect("enqueue");
            assert!(matches!(&again[0], EntryOutcome::Duplicate(e) if e.id == original), "{again:?}");
        }
        queue.close().await;
    }
}

/// A waiter per entry: each hears its own entry's outcome, and an entry
/// whose waiter has left is committed all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_entry_is_answered_to_its_own_waiter() {
    let dir = tempfile::tempdir().expect("temp dir");
    let queue = Queue::open(dir.path(), QueueConfig::default()).expect("open");
    let first = queue.intake().enqueue(vec![entry("first", "acme", Some("delivery-1"))], None).await.expect("enqueue");
    let first = committed(&first).clone();

    let mut waiters = Vec::new();
    let mut entries = Vec::new();
    for (id, key) in [("fresh", None), ("retry", Some("delivery-1")), ("abandoned", None)] {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let reply: ankusa_queue::queue::EntryReply = Box::new(move |outcome| {
            let _ = tx.send(outcome);
        });
        entries.push((entry(id, "acme", key), reply));
        waiters.push(rx);
    }
    let abandoned = waiters.pop().expect("three waiters");
    drop(abandoned);
    queue.intake().enqueue_each(entries, Some(Instant::now() + Duration::from_secs(10))).await;

    let mut outcomes = Vec::new();
    for waiter in waiters {
        outcomes.push(waiter.await.expect("answered").expect("no queue error"));
    }
    match &outcomes[..] {
        [EntryOutcome::Committed(fresh), EntryOutcome::Duplicate(original)] => {
            assert_eq!(fresh.id, "fresh");
            assert!(fresh.seq > first.seq);
            assert_eq!((original.id.as_str(), original.seq), ("first", first.seq), "the retry names the first hook");
        }
        other => panic!("expected committed then duplicate, got {other:?}"),
    }
    let stored: Vec<String> = queue.hooks(0, 100).expect("hooks").into_iter().map(|h| h.id).collect();
    assert_eq!(stored, ["first", "fresh", "abandoned"], "the abandoned entry is stored too");
}

#[tokio::test]
async fn an_expired_key_taken_over_before_its_sweep_is_counted_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = Clock::manual(1_700_000_000_000);
    let config = QueueConfig {
        dedupe_ttl_ms: 1_000,
        dedupe_max_entries_per_tenant: Some(2),
        clock: clock.clone(),
        ..QueueConfig::default()
    };
    let queue = Queue::open(dir.path(), config).expect("open");
    committed(&queue.intake().enqueue(vec![entry("h1", "acme", Some("evt-1"))], None).await.expect("enqueue"));
    // Expired, not yet swept: the same key again is a new hook that takes
    // the stored key over, and the store still holds one key.
    for round in 2..6 {
        clock.advance(2_000);
        let id = format!("h{round}");
        committed(&queue.intake().enqueue(vec![entry(&id, "acme", Some("evt-1"))], None).await.expect("enqueue"));
        assert_eq!(queue.counter(Some("acme"), "dedupe_keys").expect("counter"), 1, "round {round}");
    }
    // The quota (2 per tenant) still has room for one more key ...
    let second = queue.intake().enqueue(vec![entry("k1", "acme", Some("evt-2"))], None).await.expect("enqueue");
    committed(&second);
    // ... and no room for a third.
    let third = queue.intake().enqueue(vec![entry("k2", "acme", Some("evt-3"))], None).await.expect("enqueue");
    assert_eq!(third, [EntryOutcome::Refused(Refusal::DedupeQuota)]);
    // The sweep removes the stale expiry entries without taking a live key
    // off the count; once both keys have expired, both go.
    assert_eq!(queue.sweep_dedupe(clock.now_ms(), 100).await.expect("sweep"), 0, "both keys are live");
    assert_eq!(queue.counter(Some("acme"), "dedupe_keys").expect("counter"), 2);
    clock.advance(2_000);
    assert_eq!(queue.sweep_dedupe(clock.now_ms(), 100).await.expect("sweep"), 2);
    assert_eq!(queue.counter(Some("acme"), "dedupe_keys").expect("counter"), 0);
    assert_eq!(queue.counter(None, "dedupe_keys").expect("counter"), 0);
    queue.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_gone_before_its_batch_starts_writes_nothing_and_consumes_no_seq() {
    let dir = tempfile::tempdir().expect("temp dir");
    let faults = Arc::new(Faults::default());
    let config = QueueConfig { store_faults: Some(faults.clone()), ..QueueConfig::default() };
    let queue = Arc::new(Queue::open(dir.path(), config).expect("open"));
    // The writer takes the first call and stalls writing it, as on a disk
    // that stopped answering.
    faults.stall_writes.store(true, std::sync::atomic::Ordering::SeqCst);
    let first = tokio::spawn({
        let queue = queue.clone();
        async move { queue.intake().enqueue(vec![entry("a", "acme", None)], None).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    // A second call waits behind it, and its caller goes away.
    let gone = tokio::spawn({
        let queue = queue.clone();
        async move { queue.intake().enqueue(vec![entry("gone", "acme", Some("k-gone"))], None).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    gone.abort();
    assert!(gone.await.expect_err("aborted").is_cancelled());
    faults.stall_writes.store(false, std::sync::atomic::Ordering::SeqCst);
    let first = committed(&first.await.expect("task").expect("enqueue")).seq;
    let next = queue.intake().enqueue(vec![entry("b", "acme", Some("k-gone"))], None).await.expect("enqueue");
    assert_eq!(committed(&next).seq, first + 1, "the withdrawn call consumed no seq and stored no dedupe key");
    let ids: Vec<String> = queue.hooks(0, 10).expect("hooks").into_iter().map(|e| e.id).collect();
    assert_eq!(ids, ["a", "b"], "nothing of the withdrawn call was written");
}

#[tokio::test]
async fn stats_count_hooks_rows_and_disk_bytes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let queue = Queue::open(dir.path(), QueueConfig::default()).expect("open");
    let empty = queue.stats().expect("stats");
    assert_eq!((empty.next_seq, empty.hooks, empty.deliveries, empty.disk_bytes), (1, 0, 0, 0));
    let entries: Vec<Entry> = (0..100).map(|i| entry(&format!("h{i}"), "acme", None)).collect();
    queue.intake().enqueue(entries, None).await.expect("enqueue");
    queue.close().await;
    // Reopened after a clean close: everything is in SST files.
    let queue = Queue::open(dir.path(), QueueConfig::default()).expect("reopen");
    let stats = queue.stats().expect("stats");
    assert_eq!(stats.next_seq, 101, "exact");
    assert_eq!(stats.hooks, 100, "an estimate, exact for keys written once and flushed");
    assert_eq!(stats.deliveries, 200, "two rows per hook");
    assert!(stats.disk_bytes > 100 * 10, "the SST files hold the hooks: {} bytes", stats.disk_bytes);
}
