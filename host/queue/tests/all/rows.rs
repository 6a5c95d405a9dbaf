//! Delivery row transitions and the counters that follow them.

use ankusa_common::error_class::ErrorClass;
use ankusa_queue::queue::{
    Entry, EntryOutcome, Envelope, LastFailure, Queue, QueueConfig, RowState, Settlement, TenantPending,
};

const NOW: u64 = 1_800_000_000_000;

fn entry(id: &str, sinks: u16) -> Entry {
    let envelope = Envelope::new(id.into(), "stripe".into(), "acme".into(), NOW, b"{\"type\":\"x\"}".to_vec());
    Entry::new(envelope, (0..sinks).map(|i| (i, format!("sha-{i}"))).collect())
}

async fn enqueue(queue: &Queue, id: &str, sinks: u16) -> u64 {
    match &queue.intake().enqueue(vec![entry(id, sinks)], None).await.expect("enqueue")[..] {
        [EntryOutcome::Committed(e)] => e.seq,
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn rows_move_through_their_states_and_counters_follow() {
    let dir = tempfile::tempdir().expect("temp dir");
    let queue = Queue::open(dir.path(), QueueConfig::default()).expect("open");
    let seq = enqueue(&queue, "h1", 2).await;
    let size = 12;
    assert_eq!(
        queue.pending_for_tenant("acme").expect("counters"),
        TenantPending { pending: 2, scheduled: 0, inflight: 0, bytes: 2 * size }
    );

    // Rows enqueued "now" (wall clock) are due well before NOW.
    let claimed = queue.deliveries().claim_due(NOW, 10).expect("claim");
    assert_eq!(claimed.len(), 2);
    assert!(claimed.iter().all(|r| r.seq == seq && matches!(r.state, RowState::Inflight { claimed_at: NOW })));
    assert!(queue.deliveries().claim_due(NOW, 10).expect("claim").is_empty(), "a claimed row is not claimed twice");
    assert_eq!(queue.pending_for_tenant("acme").expect("counters").inflight, 2);

    let failure = LastFailure::new(ErrorClass::Fault, "wasm trap: unreachable", NOW);
    queue.deliveries().retry(seq, 0, NOW + 5_000, failure.clone()).expect("retry");
    let counts = queue.pending_for_tenant("acme").expect("counters");
    assert_eq!((counts.pending, counts.scheduled, counts.inflight), (1, 1, 1));
    assert!(
        queue.deliveries().claim_due(NOW + 4_999, 10).expect("claim").is_empty(),
        "not due before its backoff ends"
    );
    let again = queue.deliveries().claim_due(NOW + 5_000, 10).expect("claim");
    assert_eq!((again.len(), again[0].attempts), (1, 1));
    assert_eq!(again[0].last_failure, Some(failure), "a retrying row keeps why its attempt failed");

    queue.deliveries().bury(seq, 0, NOW + 6_000, "destination answered 410", ErrorClass::Permanent).expect("bury");
    assert_eq!(queue.dead_for_tenant("acme").expect("dead"), 1);
    queue.deliveries().complete(seq, 1).expect("complete");
    let counts = queue.pending_for_tenant("acme").expect("counters");
    assert_eq!(
        counts,
        TenantPending { pending: 0, scheduled: 0, inflight: 0, bytes: size },
        "the dead row still holds the hook"
    );
    assert_eq!(queue.hooks(0, 10).expect("hooks").len(), 1, "a dead row keeps its hook");
    assert_eq!(queue.counter(None, "dead").expect("node counter"), 1);
}

#[tokio::test]
async fn a_hook_goes_with_its_last_delivered_row() {
    let dir = tempfile::tempdir().expect("temp dir");
    let queue = Queue::open(dir.path(), QueueConfig::default()).expect("open");
    let seq = enqueue(&queue, "h1", 2).await;
    queue.deliveries().claim_due(NOW, 10).expect("claim");
    queue.deliveries().complete(seq, 0).expect("complete");
    assert_eq!(queue.hooks(0, 10).expect("hooks").len(), 1, "one row still owes a delivery");
    queue.deliveries().complete(seq, 1).expect("complete");
    assert!(queue.hooks(0, 10).expect("hooks").is_empty());
    assert_eq!(queue.pending_for_tenant("acme").expect("counters"), TenantPending::default());
    queue.deliveries().complete(seq, 1).expect("completing a gone row is a no-op");
}

#[tokio::test]
async fn one_settle_batch_removes_each_hook_with_its_last_row() {
    let dir = tempfile::tempdir().expect("temp dir");
    let queue = Queue::open(dir.path(), QueueConfig::default()).expect("open");
    let both = enqueue(&queue, "both rows delivered", 2).await;
    let single = enqueue(&queue, "its only row delivered", 1).await;
    let half = enqueue(&queue, "one of two delivered", 2).await;
    assert_eq!(queue.deliveries().claim_due(NOW, 10).expect("claim").len(), 5);
    queue
        .deliveries()
        .settle(&[
            (both, 0, Settlement::Complete),
            (half, 0, Settlement::Complete),
            (single, 0, Settlement::Complete),
            (both, 1, Settlement::Complete),
            (
                half,
                1,
                Settlement::Retry { due_at: NOW + 1, failure: LastFailure::new(ErrorClass::Transient, "503", NOW) },
            ),
        ])
        .expect("settle");
    let left: Vec<u64> = queue.hooks(0, 10).expect("hooks").iter().map(|h| h.seq).collect();
    assert_eq!(left, [half], "a hook goes once no row of it is left");
    let counts = queue.pending_for_tenant("acme").expect("counters");
    assert_eq!((counts.pending, counts.scheduled, counts.inflight), (1, 1, 0));
    assert_eq!(queue.deliveries().claim_due(NOW + 1, 10).expect("claim").len(), 1);
    queue.deliveries().settle(&[(half, 1, Settlement::Complete)]).expect("settle");
    assert!(queue.hooks(0, 10).expect("hooks").is_empty());
}

#[tokio::test]
async fn inflight_rows_are_due_again_after_a_restart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let queue = Queue::open(dir.path(), QueueConfig::default()).expect("open");
    let seq = enqueue(&queue, "h1", 3).await;
    assert_eq!(queue.deliveries().claim_due(NOW, 2).expect("claim").len(), 2);
    queue.close().await;

    let queue = Queue::open(dir.path(), QueueConfig::default()).expect("reopen");
    assert_eq!(queue.recover_inflight(NOW + 1).expect("recover"), 2);
    let counts = queue.pending_for_tenant("acme").expect("counters");
    assert_eq!((counts.pending, counts.inflight), (3, 0));
    let claimed = queue.deliveries().claim_due(NOW + 1, 10).expect("claim");
    assert_eq!(claimed.len(), 3, "nothing lost: every row is claimable again");
    assert!(claimed.iter().all(|r| r.seq == seq));
    queue.close().await;
}

#[tokio::test]
async fn claims_and_attempts_are_bound_to_a_proven_lease() {
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().expect("temp dir");
    let queue = Queue::open(dir.path(), QueueConfig::default()).expect("open");
    enqueue(&queue, "h1", 1).await;
    assert!(!queue.deliveries().leased(), "outside a fleet claims are bound to nothing");

    // Proven for 200 ms: claims open, an attempt runs.
    let soon = Instant::now() + Duration::from_millis(200);
    queue.handover().prove_lease(soon, soon);
    assert!(queue.deliveries().leased() && queue.deliveries().claims_open());
    let deliveries = queue.deliveries();
    let lapsed = deliveries.lease_lapsed();
    tokio::pin!(lapsed);
    assert!(
        tokio::time::timeout(Duration::from_millis(50), &mut lapsed).await.is_err(),
        "the lease holds for its proof"
    );
    // Proven again before it lapses: the attempt keeps running past the
    // first proof's end.
    let later = Instant::now() + Duration::from_millis(400);
    queue.handover().prove_lease(later, later);
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), &mut lapsed).await.expect("the lease lapses");
    assert!(started.elapsed() >= Duration::from_millis(300), "it waited for the later proof: {:?}", started.elapsed());
    assert!(!queue.deliveries().claims_open());
    assert!(queue.deliveries().claim_due(NOW, 10).expect("claim").is_empty(), "no claim once the lease lapsed");

    // A proof already past resolves at once, before any timer could fire:
    // a node resumed after a pause withdraws before it does anything else.
    let deliveries = queue.deliveries();
    let lapsed = deliveries.lease_lapsed();
    tokio::pin!(lapsed);
    assert!(tokio::time::timeout(Duration::ZERO, &mut lapsed).await.is_ok(), "ready on its first poll");
    let (claims, attempts) = (Instant::now() + Duration::from_millis(100), Instant::now() + Duration::from_millis(400));
    queue.handover().prove_lease(claims, attempts);
    assert_eq!(queue.deliveries().claim_due(NOW, 10).expect("claim").len(), 1, "claims reopen with the proof");

    // Claims close before attempts: an attempt sent before claims closed
    // runs on until the later bound (dropped, it may be delivered twice).
    let deliveries = queue.deliveries();
    let lapsed = deliveries.lease_lapsed();
    tokio::pin!(lapsed);
    tokio::time::sleep_until(tokio::time::Instant::from_std(claims)).await;
    assert!(!queue.deliveries().claims_open(), "claims closed at their bound");
    assert!(
        tokio::time::timeout(Duration::from_millis(150), &mut lapsed).await.is_err(),
        "the attempt is not dropped with the claims"
    );
    tokio::time::timeout(Duration::from_secs(5), &mut lapsed).await.expect("dropped at the attempts' bound");
    assert!(Instant::now() >= attempts);
}
