//! Tenants and the queue: limits, erasing, quotas, purges that stop
//! part-way, releases and redrives with their extra ops, the dedupe sweep
//! and the counter recount.

use ankusa_common::error_class::ErrorClass;
use ankusa_queue::queue::{
    Entry, EntryOutcome, Envelope, PURGE_CHUNK, PurgeCounts, PurgeKinds, Queue, QueueConfig, QueueError, Refusal,
    SourcePending,
};
use ankusa_store::store::{Batch, Cf};

const LATER: u64 = 4_000_000_000_000;

fn entry(id: &str, tenant: &str, source: &str, dedupe: Option<&str>) -> Entry {
    let mut envelope = Envelope::new(id.into(), source.into(), tenant.into(), 1, id.as_bytes().to_vec());
    envelope.dedupe_key = dedupe.map(str::to_string);
    Entry::new(envelope, vec![(0, "sha-a".into()), (1, "sha-b".into())])
}

async fn one(queue: &Queue, e: Entry) -> EntryOutcome {
    let mut outcomes = queue.intake().enqueue(vec![e], None).await.expect("enqueue");
    assert_eq!(outcomes.len(), 1);
    outcomes.remove(0)
}

fn seq(outcome: &EntryOutcome) -> u64 {
    match outcome {
        EntryOutcome::Committed(e) => e.seq,
        other => panic!("expected a commit, got {other:?}"),
    }
}

#[tokio::test]
async fn tenant_max_erasing_and_forgetting() {
    let dir = tempfile::tempdir().expect("dir");
    let config = QueueConfig { tenants_max: Some(2), ..QueueConfig::default() };
    let queue = Queue::open(dir.path(), config.clone()).expect("open");
    seq(&one(&queue, entry("a1", "a", "s", None)).await);
    seq(&one(&queue, entry("b1", "b", "s", None)).await);
    assert_eq!(one(&queue, entry("c1", "c", "s", None)).await, EntryOutcome::Refused(Refusal::TenantLimit));
    // In one call: the first new tenant takes the last place, not both.
    let dir2 = tempfile::tempdir().expect("dir");
    let fresh = Queue::open(dir2.path(), QueueConfig { tenants_max: Some(1), ..QueueConfig::default() }).expect("open");
    let outcomes =
        fresh.intake().enqueue(vec![entry("x", "x", "s", None), entry("y", "y", "s", None)], None).await.expect("enq");
    assert!(matches!(outcomes[0], EntryOutcome::Committed(_)));
    assert_eq!(outcomes[1], EntryOutcome::Refused(Refusal::TenantLimit));
    fresh.close().await;

    queue.tenants().set_erasing("a", true).await.expect("mark");
    assert_eq!(one(&queue, entry("a2", "a", "s", None)).await, EntryOutcome::Refused(Refusal::TenantErasing));
    queue.close().await;

    // Both survive a restart.
    let queue = Queue::open(dir.path(), config).expect("reopen");
    assert_eq!(queue.tenants().erasing(), ["a"]);
    assert_eq!(queue.tenants().holding(), 2);
    assert_eq!(one(&queue, entry("a3", "a", "s", None)).await, EntryOutcome::Refused(Refusal::TenantErasing));
    assert!(matches!(queue.tenants().forget_tenant("a").await, Err(QueueError::TenantHasRows(_))), "rows first");
    let purged = queue.tenants().purge_tenant("a", PurgeKinds::all()).expect("purge");
    assert_eq!(purged, PurgeCounts { pending: 2, inflight: Some(0), dead: 0 });
    queue.tenants().forget_tenant("a").await.expect("forget");
    queue.tenants().set_erasing("a", false).await.expect("unmark");
    assert_eq!(queue.tenants().holding(), 1);
    seq(&one(&queue, entry("c2", "c", "s", None)).await);
    assert_eq!(queue.tenants().holding(), 2, "the erased tenant's place went to another");
    assert_eq!(one(&queue, entry("a4", "a", "s", None)).await, EntryOutcome::Refused(Refusal::TenantLimit));
    queue.close().await;
}

#[tokio::test]
async fn dedupe_quotas_refuse_new_keys_only() {
    let dir = tempfile::tempdir().expect("dir");
    let config =
        QueueConfig { dedupe_max_entries: Some(3), dedupe_max_entries_per_tenant: Some(2), ..QueueConfig::default() };
    let queue = Queue::open(dir.path(), config).expect("open");
    seq(&one(&queue, entry("1", "a", "s", Some("k1"))).await);
    seq(&one(&queue, entry("2", "a", "s", Some("k2"))).await);
    assert_eq!(one(&queue, entry("3", "a", "s", Some("k3"))).await, EntryOutcome::Refused(Refusal::DedupeQuota));
    assert!(matches!(one(&queue, entry("4", "a", "s", Some("k1"))).await, EntryOutcome::Duplicate(e) if e.id == "1"));
    seq(&one(&queue, entry("5", "a", "s", None)).await);
    seq(&one(&queue, entry("6", "b", "s", Some("k1"))).await);
    assert_eq!(one(&queue, entry("7", "b", "s", Some("k9"))).await, EntryOutcome::Refused(Refusal::DedupeQuota));
    assert_eq!(queue.counter(None, "dedupe_keys").expect("counter"), 3);
    assert_eq!(
        queue.hooks(0, 100).expect("hooks").iter().map(|h| h.id.as_str()).collect::<Vec<_>>(),
        ["1", "2", "5", "6"]
    );

    // Swept keys free the quota.
    assert_eq!(queue.sweep_dedupe(LATER, 100).await.expect("sweep"), 3);
    assert_eq!(queue.counter(None, "dedupe_keys").expect("counter"), 0);
    assert_eq!(queue.counter(Some("a"), "dedupe_keys").expect("counter"), 0);
    seq(&one(&queue, entry("8", "a", "s", Some("k3"))).await);
    seq(&one(&queue, entry("9", "a", "s", Some("k1"))).await);
    queue.close().await;
}

#[tokio::test]
async fn a_purge_that_stops_part_way_finishes_when_called_again() {
    let dir = tempfile::tempdir().expect("dir");
    let queue = Queue::open(dir.path(), QueueConfig::default()).expect("open");
    let hooks = 700;
    for n in 0..hooks {
        seq(&one(&queue, entry(&format!("h{n}"), "acme", "s", None)).await);
    }
    seq(&one(&queue, entry("other", "globex", "s", None)).await);
    // 40 rows inflight, 60 dead, the rest due.
    let claimed = queue.deliveries().claim_due(LATER, 100).expect("claim");
    for row in &claimed[..60] {
        queue.deliveries().bury(row.seq, row.sink, LATER, "410", ErrorClass::Permanent).expect("bury");
    }

    // One chunk, then the process "dies".
    let step = queue
        .tenants()
        .purge_tenant_chunk("acme", PurgeKinds { pending: true, inflight: false, dead: true }, None)
        .expect("chunk");
    assert!(step.next.is_some(), "a chunk of {PURGE_CHUNK} rows out of {} is not the end", hooks * 2);
    let first = step.removed;
    assert!(first.pending + first.dead > 0 && first.inflight.is_none());
    queue.close().await;

    let queue = Queue::open(dir.path(), QueueConfig::default()).expect("reopen");
    let rest =
        queue.tenants().purge_tenant("acme", PurgeKinds { pending: true, inflight: false, dead: true }).expect("purge");
    assert_eq!(first.pending + rest.pending, hooks * 2 - 100, "every due row, once");
    assert_eq!(first.dead + rest.dead, 60, "every dead row, once");
    assert_eq!(rest.inflight, None);
    let again =
        queue.tenants().purge_tenant("acme", PurgeKinds { pending: true, inflight: false, dead: true }).expect("again");
    assert_eq!(again, PurgeCounts::default(), "idempotent");

    // Inflight rows were left alone, and hold their hooks.
    let counts = queue.pending_for_tenant("acme").expect("counters");
    assert_eq!((counts.pending, counts.inflight), (0, 40));
    assert_eq!(queue.dead_for_tenant("acme").expect("dead"), 0);
    assert_eq!(queue.pending_for_source("s", Some("acme")).expect("walk"), SourcePending { pending: 0, inflight: 40 });
    let inflight =
        queue.tenants().purge_tenant("acme", PurgeKinds { inflight: true, ..PurgeKinds::default() }).expect("purge");
    assert_eq!(inflight.inflight, Some(40));
    assert_eq!(queue.counter(Some("acme"), "bytes").expect("bytes"), 0);
    let left: Vec<String> = queue.hooks(0, 10_000).expect("hooks").into_iter().map(|h| h.id).collect();
    assert_eq!(left, ["other"], "only the other tenant's hook remains");
    assert_eq!(queue.pending_for_source("s", None).expect("walk"), SourcePending { pending: 2, inflight: 0 });
    let recount = queue.recount(false).expect("recount");
    assert!(recount.drifts.is_empty(), "counters match the rows: {:?}", recount.drifts);
    queue.close().await;
}

#[tokio::test]
async fn release_and_redrive_commit_their_extra_ops_atomically() {
    let dir = tempfile::tempdir().expect("dir");
    let queue = Queue::open(dir.path(), QueueConfig { tenants_max: Some(1), ..QueueConfig::default() }).expect("open");
    let first = seq(&one(&queue, entry("orig", "acme", "s", Some("evt-1"))).await);

    let cursor = |value: &[u8]| {
        let mut batch = Batch::new();
        batch.put(Cf::Jobs, b"job-1/cursor".to_vec(), value.to_vec());
        batch.delete(Cf::Quarantine, b"pen/1".to_vec());
        batch
    };
    // Every entry a duplicate: the extra ops still commit.
    let outcomes = queue
        .pen()
        .release(vec![entry("again", "acme", "s", Some("evt-1"))], "r-1", cursor(b"1"))
        .await
        .expect("release");
    assert!(matches!(&outcomes[..], [EntryOutcome::Duplicate(e)] if e.seq == first));
    // A tenant past the limit refuses the whole call: nothing commits.
    let refused = queue
        .pen()
        .release(vec![entry("ok", "acme", "s", None), entry("new", "other", "s", None)], "r-1", cursor(b"2"))
        .await;
    assert_eq!(refused, Err(QueueError::Refused(Refusal::TenantLimit)));
    assert_eq!(queue.hooks(0, 10).expect("hooks").len(), 1, "the release's first entry did not commit either");
    let released =
        queue.pen().release(vec![entry("ok", "acme", "s", None)], "r-1", cursor(b"3")).await.expect("release");
    let released_seq = seq(&released[0]);
    let row = queue.deliveries().claim_due(LATER, 10).expect("claim");
    assert!(row.iter().filter(|r| r.seq == released_seq).all(|r| r.replay_id.as_deref() == Some("r-1")));

    let redriven = queue
        .archive()
        .redrive(
            vec![Entry::new(entry("orig", "acme", "s", Some("evt-1")).envelope, vec![(0, "sha-a".into())])],
            "r-2",
            cursor(b"4"),
        )
        .await
        .expect("redrive");
    assert_eq!(redriven, 1, "redrive ignores dedupe: the live key does not stop it");
    let hooks = queue.hooks(0, 10).expect("hooks");
    assert_eq!(hooks.iter().map(|h| h.id.as_str()).collect::<Vec<_>>(), ["orig", "ok", "orig"]);
    assert!(hooks.windows(2).all(|w| w[0].seq < w[1].seq));
    queue.close().await;
    // The cursor is the last committed one: "3" (release) then "4" (redrive); "2" never landed.
    let store =
        ankusa_store::store::RocksStore::open(&ankusa_store::store::StoreOptions::new(dir.path())).expect("store");
    use ankusa_store::store::Store as _;
    assert_eq!(store.get(Cf::Jobs, b"job-1/cursor").expect("read"), Some(b"4".to_vec()));
}

#[tokio::test]
async fn recount_finds_and_repairs_drift() {
    let dir = tempfile::tempdir().expect("dir");
    let queue = Queue::open(dir.path(), QueueConfig::default()).expect("open");
    for n in 0..10 {
        seq(&one(&queue, entry(&format!("h{n}"), "acme", "s", Some(&format!("k{n}")))).await);
    }
    assert!(queue.recount(false).expect("recount").drifts.is_empty());
    queue.close().await;
    {
        use ankusa_store::store::{Durability, RocksStore, Store as _, StoreOptions};
        let store = RocksStore::open(&StoreOptions::new(dir.path())).expect("store");
        let mut batch = Batch::new();
        batch.add_counter(ankusa_queue::queue::counter_key(Some("acme"), "pending"), 7);
        batch.add_counter(ankusa_queue::queue::counter_key(None, "dedupe_keys"), -3);
        store.write(&batch, Durability::Synced).expect("damage the counters");
    }
    let queue = Queue::open(dir.path(), QueueConfig::default()).expect("reopen");
    let report = queue.recount(true).expect("recount");
    assert_eq!((report.rows, report.dedupe_keys), (20, 10));
    let drifted: Vec<(Option<&str>, &str, i64, i64)> =
        report.drifts.iter().map(|d| (d.tenant.as_deref(), d.kind, d.stored, d.actual)).collect();
    assert_eq!(drifted, [(None, "dedupe_keys", 7, 10), (Some("acme"), "pending", 27, 20)]);
    assert!(report.repaired);
    assert!(queue.recount(false).expect("recount").drifts.is_empty(), "repaired");
    queue.close().await;
}
