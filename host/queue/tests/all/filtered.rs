//! Filtered rows in the queue: a row a transform dropped stays, as
//! `filtered` with its reason, while its hook has another row to finish;
//! it goes with the hook's last live row (delivered, purged) and a hook
//! whose rows are all filtered goes at once. Counters never count it, and
//! agree with a recount throughout.

use crate::common::no_drift;
use ankusa_queue::queue::{Entry, EntryOutcome, Envelope, PurgeKinds, Queue, QueueConfig, RowState, Settlement};

const NOW: u64 = 1_800_000_000_000;

/// Enqueue one hook per id, each with a row for `sinks` sinks.
async fn enqueue(queue: &Queue, ids: &[&str], sinks: u16) -> Vec<u64> {
    let entries = ids
        .iter()
        .map(|id| {
            let envelope = Envelope::new(id.to_string(), "shop".into(), "acme".into(), NOW, b"{}".to_vec());
            Entry::new(envelope, (0..sinks).map(|i| (i, format!("sink-{i}"))).collect())
        })
        .collect();
    let outcomes = queue.intake().enqueue(entries, None).await.expect("enqueue");
    outcomes
        .into_iter()
        .map(|outcome| match outcome {
            EntryOutcome::Committed(e) => e.seq,
            other => panic!("{other:?}"),
        })
        .collect()
}

fn filter(queue: &Queue, seq: u64, sink: u16) {
    let reason = format!("transform `f`: dropped {seq}/{sink}");
    queue.deliveries().settle(&[(seq, sink, Settlement::Filter { at: NOW + 5, reason })]).expect("filter");
}

fn states(queue: &Queue, seq: u64) -> Vec<String> {
    let rows = queue.deliveries().rows_of_hook(seq).expect("rows");
    rows.iter()
        .map(|row| match &row.state {
            RowState::Filtered { at, reason } => format!("filtered at {at}: {reason}"),
            RowState::Due { .. } => "due".into(),
            RowState::Inflight { .. } => "inflight".into(),
            RowState::Dead { .. } => "dead".into(),
            RowState::Waiting => "waiting".into(),
        })
        .collect()
}

fn stored(queue: &Queue, seq: u64) -> bool {
    queue.deliveries().hook(seq).expect("read").is_some()
}

fn counts(queue: &Queue) -> (i64, i64, i64, i64) {
    let c = |kind| queue.counter(None, kind).expect("counter");
    (c("pending"), c("inflight"), c("dead"), c("bytes"))
}

#[tokio::test]
async fn a_filtered_row_stays_while_its_hook_has_another_and_goes_with_the_last() {
    let dir = tempfile::tempdir().expect("dir");
    let queue = Queue::open(dir.path(), QueueConfig::default()).expect("open");
    let [seq] = enqueue(&queue, &["h1"], 2).await[..] else { panic!() };
    let claimed = queue.deliveries().claim_due(NOW, 10).expect("claim");
    assert_eq!(claimed.len(), 2);

    filter(&queue, seq, 1);
    assert_eq!(
        states(&queue, seq),
        ["inflight".to_string(), format!("filtered at {}: transform `f`: dropped {seq}/1", NOW + 5)]
    );
    assert!(stored(&queue, seq), "the hook stays for its other row");
    let (pending, inflight, dead, _) = counts(&queue);
    assert_eq!((pending, inflight, dead), (0, 1, 0), "a filtered row is neither pending nor dead");
    assert!(queue.deliveries().claim_due(NOW + 10_000, 10).expect("claim").is_empty(), "never claimed again");
    no_drift(&queue);

    queue.deliveries().complete(seq, 0).expect("complete");
    assert!(states(&queue, seq).is_empty(), "the filtered row went with the last live one");
    assert!(!stored(&queue, seq), "and the hook with them");
    assert_eq!(counts(&queue), (0, 0, 0, 0), "nothing counted, not even bytes");
    no_drift(&queue);
}

#[tokio::test]
async fn a_hook_whose_rows_are_all_filtered_goes_at_once() {
    let dir = tempfile::tempdir().expect("dir");
    let queue = Queue::open(dir.path(), QueueConfig::default()).expect("open");
    let [one] = enqueue(&queue, &["one-row"], 1).await[..] else { panic!() };
    let [two, at_once] = enqueue(&queue, &["two-rows", "two-at-once"], 2).await[..] else { panic!() };
    queue.deliveries().claim_due(NOW, 100).expect("claim");

    filter(&queue, one, 0);
    assert!(!stored(&queue, one) && states(&queue, one).is_empty(), "a hook's only row");

    filter(&queue, two, 0);
    assert!(stored(&queue, two));
    filter(&queue, two, 1);
    assert!(!stored(&queue, two) && states(&queue, two).is_empty(), "the second of two, one at a time");

    let both = [0, 1].map(|sink| (at_once, sink, Settlement::Filter { at: NOW, reason: "r".into() }));
    queue.deliveries().settle(&both).expect("settle");
    assert!(!stored(&queue, at_once) && states(&queue, at_once).is_empty(), "both in one batch");
    assert_eq!(counts(&queue), (0, 0, 0, 0));
    no_drift(&queue);
}

#[tokio::test]
async fn a_purge_of_a_hooks_last_live_row_takes_its_filtered_rows_and_survives_a_restart() {
    let dir = tempfile::tempdir().expect("dir");
    let seq = {
        let queue = Queue::open(dir.path(), QueueConfig::default()).expect("open");
        let [seq] = enqueue(&queue, &["h"], 3).await[..] else { panic!() };
        queue.deliveries().claim_due(NOW, 10).expect("claim");
        filter(&queue, seq, 0);
        queue
            .deliveries()
            .bury(seq, 1, NOW, "410 gone", ankusa_common::error_class::ErrorClass::Permanent)
            .expect("bury");
        filter(&queue, seq, 2);
        queue.close().await;
        seq
    };
    let queue = Queue::open(dir.path(), QueueConfig::default()).expect("open again");
    queue.recover_inflight(NOW).expect("recover");
    let kept = states(&queue, seq);
    assert_eq!(kept.len(), 3, "{kept:?}");
    assert!(kept[0].starts_with("filtered") && kept[1] == "dead" && kept[2].starts_with("filtered"), "{kept:?}");
    no_drift(&queue);

    let purged =
        queue.tenants().purge_tenant("acme", PurgeKinds { dead: true, ..PurgeKinds::default() }).expect("purge");
    assert_eq!(purged.dead, 1);
    assert!(states(&queue, seq).is_empty() && !stored(&queue, seq), "the dead row took the filtered ones and the hook");
    assert_eq!(counts(&queue), (0, 0, 0, 0));
    no_drift(&queue);
}

/// The store refusing the write that files a hook's last row as filtered
/// (the write that also deletes its other filtered row and the hook)
/// leaves everything as it was; after a restart the row is due again and
/// filing it then takes the hook.
#[tokio::test]
async fn a_refused_filter_write_leaves_the_hook_and_its_rows_as_they_were() {
    use std::sync::Arc;
    use std::sync::atomic::Ordering;
    let dir = tempfile::tempdir().expect("dir");
    let faults = Arc::new(ankusa_store::store::Faults::default());
    let seq = {
        let config = QueueConfig { store_faults: Some(faults.clone()), ..QueueConfig::default() };
        let queue = Queue::open(dir.path(), config).expect("open");
        let [seq] = enqueue(&queue, &["h"], 2).await[..] else { panic!() };
        queue.deliveries().claim_due(NOW, 10).expect("claim");
        filter(&queue, seq, 0);

        faults.fail_writes.store(true, Ordering::Relaxed);
        let refused = queue.deliveries().settle(&[(seq, 1, Settlement::Filter { at: NOW, reason: "r".into() })]);
        assert!(refused.is_err(), "the store refused the write");
        faults.fail_writes.store(false, Ordering::Relaxed);
        let kept = states(&queue, seq);
        assert!(kept.len() == 2 && kept[0].starts_with("filtered") && kept[1] == "inflight", "{kept:?}");
        assert!(stored(&queue, seq), "the hook is still stored");
        no_drift(&queue);
        queue.close().await;
        seq
    };
    let queue = Queue::open(dir.path(), QueueConfig::default()).expect("open again");
    queue.recover_inflight(NOW).expect("recover");
    let due = queue.deliveries().claim_due(NOW, 10).expect("claim");
    assert_eq!(due.iter().map(|r| (r.seq, r.sink)).collect::<Vec<_>>(), [(seq, 1)], "only the unfinished row again");
    filter(&queue, seq, 1);
    assert!(states(&queue, seq).is_empty() && !stored(&queue, seq));
    assert_eq!(counts(&queue), (0, 0, 0, 0));
    no_drift(&queue);
}
