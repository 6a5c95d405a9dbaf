//! Ordered lines in the queue: only a line's head is claimed, a retrying
//! head holds its line, a dead head is skipped (marking the next row) or
//! holds the line until revived or released, and counters follow; a row
//! committed while its head completes is never stranded, and the lines
//! survive a restart.

use std::sync::Arc;

use crate::common::no_drift;
use ankusa_common::error_class::ErrorClass;
use ankusa_queue::queue::{
    ClaimDecision, DeliveryRow, Entry, EntryOutcome, Envelope, LastFailure, Line, LineId, Queue, QueueConfig,
    QueueError, RowState,
};
use ankusa_store::store::{Batch, Faults};

const NOW: u64 = 1_800_000_000_000;

fn ordered(id: &str, key: Option<&str>, hold: bool) -> Entry {
    let envelope = Envelope::new(id.into(), "shop".into(), "acme".into(), NOW, b"{}".to_vec());
    let mut entry = Entry::new(envelope, vec![(0, "sha".into())]);
    if let Some(key) = key {
        entry.lines.push((0, Line { key: key.into(), hold }));
    }
    entry
}

/// Enqueue `(id, key)` in this order; their seqs.
async fn enqueue(queue: &Queue, hooks: &[(&str, Option<&str>)], hold: bool) -> Vec<u64> {
    let entries = hooks.iter().map(|(id, key)| ordered(id, *key, hold)).collect();
    queue
        .intake()
        .enqueue(entries, None)
        .await
        .expect("enqueue")
        .into_iter()
        .map(|outcome| match outcome {
            EntryOutcome::Committed(e) => e.seq,
            other => panic!("{other:?}"),
        })
        .collect()
}

fn claimed(queue: &Queue, at: u64) -> Vec<u64> {
    let mut seqs: Vec<u64> = queue.deliveries().claim_due(at, 100).expect("claim").iter().map(|r| r.seq).collect();
    seqs.sort_unstable();
    seqs
}

/// (seq, gap marker) of each row, in order.
fn marks(rows: &[DeliveryRow]) -> Vec<(u64, Option<&str>)> {
    rows.iter().map(|r| (r.seq, r.previous_dead.as_deref())).collect()
}

/// A queue config whose store takes its faults from `faults`.
fn faulty(faults: &Arc<Faults>) -> QueueConfig {
    QueueConfig { store_faults: Some(faults.clone()), ..QueueConfig::default() }
}

/// What `op` gives while the store refuses every write.
fn writes_refused<T>(faults: &Faults, op: impl FnOnce() -> T) -> T {
    faults.fail_writes.store(true, std::sync::atomic::Ordering::Relaxed);
    let result = op();
    faults.fail_writes.store(false, std::sync::atomic::Ordering::Relaxed);
    result
}

fn counter(queue: &Queue, kind: &str) -> i64 {
    queue.counter(None, kind).expect("counter")
}

fn line(key: &str) -> LineId {
    LineId { tenant: "acme".into(), source: "shop".into(), sink: 0, key: key.into() }
}

#[tokio::test]
async fn only_a_lines_head_is_claimed_and_a_retrying_head_holds_its_line() {
    let dir = tempfile::tempdir().expect("dir");
    let queue = Queue::open(dir.path(), QueueConfig::default()).expect("open");
    let seqs = enqueue(
        &queue,
        &[("a1", Some("a")), ("a2", Some("a")), ("b1", Some("b")), ("a3", Some("a")), ("u1", None)],
        false,
    )
    .await;
    let [a1, a2, b1, a3, u1] = seqs[..] else { panic!("{seqs:?}") };
    assert_eq!(claimed(&queue, NOW), vec![a1, b1, u1], "each line's head and the unordered row");
    assert_eq!(counter(&queue, "waiting"), 2, "a2 and a3 wait behind a1");
    assert_eq!(counter(&queue, "pending"), 2, "waiting rows are pending");
    no_drift(&queue);

    let failure = LastFailure::new(ErrorClass::Transient, "503", NOW);
    queue.deliveries().retry(a1, 0, NOW + 1_000, failure).expect("retry");
    assert!(claimed(&queue, NOW + 999).is_empty(), "the rows behind a retrying head wait");
    assert_eq!(claimed(&queue, NOW + 1_000), vec![a1], "the head again, not a2");
    queue.deliveries().complete(a1, 0).expect("complete");
    let next = queue.deliveries().claim_due(NOW + 1_000, 100).expect("claim");
    assert_eq!(next.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![a2], "a2 is the head now");
    assert_eq!(next[0].attempts, 0, "a2 spent no attempt while it waited");
    assert_eq!(next[0].previous_dead, None);
    queue.deliveries().complete(a2, 0).expect("complete");
    assert_eq!(claimed(&queue, NOW + 1_000), vec![a3]);
    for seq in [a3, b1, u1] {
        queue.deliveries().complete(seq, 0).expect("complete");
    }
    assert_eq!((counter(&queue, "pending"), counter(&queue, "waiting"), counter(&queue, "inflight")), (0, 0, 0));
    no_drift(&queue);
}

/// k1, k2, k3 in line k (`skip`), k1 claimed and dead; their seqs.
async fn head_of_three_skipped(queue: &Queue) -> [u64; 3] {
    let seqs = enqueue(queue, &[("k1", Some("k")), ("k2", Some("k")), ("k3", Some("k"))], false).await;
    let [k1, k2, k3] = seqs[..] else { panic!("{seqs:?}") };
    assert_eq!(claimed(queue, NOW), vec![k1]);
    queue.deliveries().bury(k1, 0, NOW, "410", ErrorClass::Permanent).expect("bury");
    [k1, k2, k3]
}

#[tokio::test]
async fn a_skipped_dead_head_lets_its_line_go_on_and_marks_the_next_row() {
    let dir = tempfile::tempdir().expect("dir");
    let queue = Queue::open(dir.path(), QueueConfig::default()).expect("open");
    let [k1, k2, k3] = head_of_three_skipped(&queue).await;
    let next = queue.deliveries().claim_due(NOW, 100).expect("claim");
    assert_eq!((next.len(), next[0].seq), (1, k2));
    assert_eq!(next[0].previous_dead.as_deref(), Some("k1"), "the next row names the dead hook");
    assert!(queue.dead_letters().held_lines(None, 10).expect("held").is_empty(), "skip holds nothing");
    queue.deliveries().complete(k2, 0).expect("complete");
    let last = queue.deliveries().claim_due(NOW, 100).expect("claim");
    assert_eq!((last[0].seq, last[0].previous_dead.as_deref()), (k3, None), "only the next row is marked");

    // A skipped hook replayed is delivered out of line: it does not wait
    // behind k3, nor hold anything.
    let revived = queue.dead_letters().revive(&[(k1, 0)], "r1", NOW, Batch::new()).expect("revive");
    assert_eq!(revived, 1);
    let replayed = queue.deliveries().claim_due(NOW + 1, 100).expect("claim");
    assert_eq!((replayed.len(), replayed[0].seq, replayed[0].line.clone()), (1, k1, None));
    no_drift(&queue);
}

#[tokio::test]
async fn a_held_line_waits_for_its_revived_head_or_a_release() {
    let dir = tempfile::tempdir().expect("dir");
    let queue = Queue::open(dir.path(), QueueConfig::default()).expect("open");
    let seqs = enqueue(
        &queue,
        &[("a1", Some("a")), ("a2", Some("a")), ("c1", Some("c")), ("c2", Some("c")), ("c3", Some("c"))],
        true,
    )
    .await;
    let [a1, a2, c1, c2, c3] = seqs[..] else { panic!("{seqs:?}") };
    assert_eq!(claimed(&queue, NOW), vec![a1, c1]);
    queue.deliveries().bury(a1, 0, NOW, "410", ErrorClass::Permanent).expect("bury");
    queue.deliveries().bury(c1, 0, NOW, "410", ErrorClass::Permanent).expect("bury");
    assert!(claimed(&queue, NOW + 60_000).is_empty(), "both lines are held");
    let held = queue.dead_letters().held_lines(None, 10).expect("held");
    assert_eq!(held.iter().map(|h| (h.line.key.as_str(), h.seq)).collect::<Vec<_>>(), vec![("a", a1), ("c", c1)]);
    assert_eq!(queue.dead_letters().held_lines(Some("other"), 10).expect("held"), vec![]);
    assert_eq!((counter(&queue, "held"), counter(&queue, "dead"), counter(&queue, "waiting")), (2, 2, 3));
    no_drift(&queue);

    // A replay of a's head: it goes first, then a2.
    queue.dead_letters().revive(&[(a1, 0)], "r1", NOW, Batch::new()).expect("revive");
    assert_eq!(counter(&queue, "held"), 1);
    assert_eq!(claimed(&queue, NOW + 1), vec![a1], "the revived head, and not a2");
    queue.deliveries().complete(a1, 0).expect("complete");
    assert_eq!(claimed(&queue, NOW + 1), vec![a2]);

    // c is released: c1 stays dead, c2 goes, marked.
    assert_eq!(queue.dead_letters().release_line(&line("c"), NOW).expect("release"), Some(c1));
    assert_eq!(queue.dead_letters().release_line(&line("c"), NOW).expect("release"), None, "not held any more");
    let next = queue.deliveries().claim_due(NOW + 1, 100).expect("claim");
    assert_eq!((next.len(), next[0].seq, next[0].previous_dead.as_deref()), (1, c2, Some("c1")));
    let dead = queue.deliveries().rows_of_hook(c1).expect("rows");
    assert!(matches!(dead[0].state, RowState::Dead { .. }), "the released hook is still a dead letter");
    queue.deliveries().complete(c2, 0).expect("complete");
    assert_eq!(claimed(&queue, NOW + 1), vec![c3]);
    assert_eq!((counter(&queue, "held"), counter(&queue, "dead")), (0, 1));
    no_drift(&queue);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_committed_while_its_head_completes_is_never_stranded() {
    const HOOKS: usize = 300;
    let dir = tempfile::tempdir().expect("dir");
    let queue = Arc::new(Queue::open(dir.path(), QueueConfig::default()).expect("open"));
    // One writer adds the key's rows one by one while a deliverer claims
    // and completes heads as fast as it can: each commit races a head's
    // completion and the promotion of the row behind it.
    let writer = {
        let queue = queue.clone();
        tokio::spawn(async move {
            let mut seqs = Vec::new();
            for i in 0..HOOKS {
                seqs.extend(enqueue(&queue, &[(&format!("k{i}"), Some("k"))], false).await);
            }
            seqs
        })
    };
    let mut delivered = Vec::new();
    let started = std::time::Instant::now();
    while delivered.len() < HOOKS {
        assert!(started.elapsed() < std::time::Duration::from_secs(30), "stranded after {}", delivered.len());
        let rows = queue.deliveries().claim_due(NOW, 100).expect("claim");
        assert!(rows.len() <= 1, "one row of a key at a time: {rows:?}");
        for row in rows {
            delivered.push(row.seq);
            queue.deliveries().complete(row.seq, 0).expect("complete");
        }
        tokio::task::yield_now().await;
    }
    let seqs = writer.await.expect("writer");
    assert_eq!(delivered, seqs, "delivered in seq order, every one");
    assert_eq!((counter(&queue, "pending"), counter(&queue, "waiting")), (0, 0));
    no_drift(&queue);
}

#[tokio::test]
async fn lines_survive_a_restart_with_their_head_in_flight() {
    let dir = tempfile::tempdir().expect("dir");
    let seqs = {
        let queue = Queue::open(dir.path(), QueueConfig::default()).expect("open");
        let seqs = enqueue(&queue, &[("k1", Some("k")), ("k2", Some("k")), ("k3", Some("k"))], false).await;
        assert_eq!(claimed(&queue, NOW), vec![seqs[0]], "k1 in flight, k2 and k3 waiting");
        queue.close().await;
        seqs
    };
    let queue = Queue::open(dir.path(), QueueConfig::default()).expect("reopen");
    assert_eq!(queue.recover_inflight(NOW).expect("recover"), 1);
    assert_eq!(claimed(&queue, NOW), vec![seqs[0]], "the head in flight at the stop goes first again");
    queue.deliveries().complete(seqs[0], 0).expect("complete");
    assert_eq!(claimed(&queue, NOW), vec![seqs[1]]);
    no_drift(&queue);
}

/// A node stopped in the middle of a run (its first row settled, the rest
/// in flight) hands the rest out again after a restart, from the line's
/// new head, in order, with the rows behind it.
#[tokio::test]
async fn a_run_in_flight_at_a_stop_goes_again_in_order_after_the_restart() {
    let dir = tempfile::tempdir().expect("dir");
    let hooks = [("r1", Some("r")), ("r2", Some("r")), ("r3", Some("r")), ("r4", Some("r")), ("r5", Some("r"))];
    let seqs = {
        let queue = Queue::open(dir.path(), QueueConfig::default()).expect("open");
        let seqs = enqueue(&queue, &hooks, false).await;
        assert_eq!(claimed_runs(&queue, NOW, 3, u64::MAX), seqs[..3].to_vec());
        queue.deliveries().complete(seqs[0], 0).expect("complete");
        queue.close().await;
        seqs
    };
    let queue = Queue::open(dir.path(), QueueConfig::default()).expect("reopen");
    assert_eq!(queue.recover_inflight(NOW).expect("recover"), 2);
    assert_eq!(claimed_runs(&queue, NOW, 8, u64::MAX), seqs[1..].to_vec(), "r2 first, then the rest in order");
    no_drift(&queue);
}

/// A settle whose write fails (the disk refuses it mid-drain) changes
/// nothing of its line: the head stays in flight and the row behind it is
/// not handed out, however far the line had already moved.
#[tokio::test]
async fn a_failed_settle_write_leaves_its_line_as_it_was() {
    let dir = tempfile::tempdir().expect("dir");
    let faults = Arc::new(Faults::default());
    let queue = Queue::open(dir.path(), faulty(&faults)).expect("open");
    let seqs = enqueue(&queue, &[("k1", Some("k")), ("k2", Some("k")), ("k3", Some("k"))], false).await;
    assert_eq!(claimed(&queue, NOW), vec![seqs[0]]);
    queue.deliveries().complete(seqs[0], 0).expect("complete");
    assert_eq!(claimed(&queue, NOW), vec![seqs[1]], "the line has moved once");

    assert!(writes_refused(&faults, || queue.deliveries().complete(seqs[1], 0)).is_err(), "the settle is refused");
    assert!(claimed(&queue, NOW).is_empty(), "k2 is still in flight: k3 is not handed out");
    queue.deliveries().complete(seqs[1], 0).expect("complete");
    assert_eq!(claimed(&queue, NOW), vec![seqs[2]]);
    no_drift(&queue);
}

/// A dead hook skipped as the last row of its line: the key's next hook,
/// however much later it comes (here after a restart), names it, and only
/// that one; a claim whose write the store refuses leaves the name for the
/// next claim. A held line released with nothing behind it does the same.
#[tokio::test]
async fn a_dead_hook_skipped_as_its_lines_last_row_is_named_by_the_keys_next_hook() {
    let dir = tempfile::tempdir().expect("dir");
    let faults = Arc::new(Faults::default());
    {
        let queue = Queue::open(dir.path(), faulty(&faults)).expect("open");
        let [k1] = enqueue(&queue, &[("k1", Some("k"))], false).await[..] else { panic!() };
        assert_eq!(claimed(&queue, NOW), vec![k1]);
        // The write that buries k1 and keeps its gap is refused: nothing of
        // it lands, and the bury done again keeps the gap.
        assert!(
            writes_refused(&faults, || queue.deliveries().bury(k1, 0, NOW, "410", ErrorClass::Permanent)).is_err(),
            "refused"
        );
        queue.deliveries().bury(k1, 0, NOW, "410", ErrorClass::Permanent).expect("bury");
        queue.close().await;
    }
    let queue = Queue::open(dir.path(), faulty(&faults)).expect("reopen");
    let seqs = enqueue(&queue, &[("k2", Some("k")), ("k3", Some("k")), ("j1", Some("j"))], false).await;
    let [k2, k3, j1] = seqs[..] else { panic!("{seqs:?}") };
    assert!(writes_refused(&faults, || queue.deliveries().claim_due(NOW, 100)).is_err(), "the claim is refused");
    let next = queue.deliveries().claim_due(NOW, 100).expect("claim");
    assert_eq!(marks(&next), vec![(k2, Some("k1")), (j1, None)], "k's next hook names k1, j's names nothing");
    queue.deliveries().complete(k2, 0).expect("complete");
    let last = queue.deliveries().claim_due(NOW, 100).expect("claim");
    assert_eq!((last[0].seq, last[0].previous_dead.as_deref()), (k3, None), "only the next hook is marked");
    queue.deliveries().complete(k3, 0).expect("complete");
    queue.deliveries().complete(j1, 0).expect("complete");

    // Held, released with nothing behind it, then a new hook of the key.
    let [h1] = enqueue(&queue, &[("h1", Some("h"))], true).await[..] else { panic!() };
    assert_eq!(claimed(&queue, NOW), vec![h1]);
    queue.deliveries().bury(h1, 0, NOW, "410", ErrorClass::Permanent).expect("bury");
    assert_eq!(queue.dead_letters().release_line(&line("h"), NOW).expect("release"), Some(h1));
    let [h2] = enqueue(&queue, &[("h2", Some("h"))], true).await[..] else { panic!() };
    let next = queue.deliveries().claim_due(NOW, 100).expect("claim");
    assert_eq!((next[0].seq, next[0].previous_dead.as_deref()), (h2, Some("h1")));
    no_drift(&queue);
}

/// An erased tenant's gaps go with it: nothing of its keys stays in the
/// store, and another tenant's gap is kept.
#[tokio::test]
async fn forgetting_a_tenant_takes_its_lines_gaps() {
    use ankusa_queue::queue::PurgeKinds;
    use ankusa_store::store::keys::meta;
    use ankusa_store::store::{Cf, RocksStore, Scan, Store as _, StoreOptions};
    let dir = tempfile::tempdir().expect("dir");
    {
        let queue = Queue::open(dir.path(), QueueConfig::default()).expect("open");
        let mut other = ordered("o1", Some("k"), false);
        other.envelope.tenant_id = "other".into();
        queue.intake().enqueue(vec![ordered("k1", Some("k"), false), other], None).await.expect("enqueue");
        let heads = queue.deliveries().claim_due(NOW, 100).expect("claim");
        for head in &heads {
            queue.deliveries().bury(head.seq, 0, NOW, "410", ErrorClass::Permanent).expect("bury");
        }
        queue.tenants().set_erasing("acme", true).await.expect("mark");
        queue.tenants().purge_tenant("acme", PurgeKinds::all()).expect("purge");
        queue.tenants().forget_tenant("acme").await.expect("forget");
        queue.close().await;
    }
    let store = RocksStore::open(&StoreOptions::new(dir.path())).expect("store");
    let gaps = store.scan(&Scan::prefix(Cf::Meta, &meta::gap_prefix(None), 10)).expect("scan");
    let tenants: Vec<String> =
        gaps.iter().filter_map(|(key, _)| meta::parse_gap(key)).map(|line| line.tenant).collect();
    assert_eq!(tenants, vec!["other".to_string()]);
}

/// The hook that would name a skipped dead one is dropped by a transform:
/// the name passes to the next delivery of the key, the only one the sink
/// hears of it from.
#[tokio::test]
async fn a_filtered_hook_passes_its_gap_marker_on() {
    use ankusa_queue::queue::Settlement;
    let dir = tempfile::tempdir().expect("dir");
    let queue = Queue::open(dir.path(), QueueConfig::default()).expect("open");
    let [_, k2, k3] = head_of_three_skipped(&queue).await;
    let next = queue.deliveries().claim_due(NOW, 100).expect("claim");
    assert_eq!((next[0].seq, next[0].previous_dead.as_deref()), (k2, Some("k1")));
    let dropped = Settlement::Filter { at: NOW, reason: "transform `f`: a ping".into() };
    queue.deliveries().settle(&[(k2, 0, dropped)]).expect("filter");
    let last = queue.deliveries().claim_due(NOW, 100).expect("claim");
    assert_eq!((last[0].seq, last[0].previous_dead.as_deref()), (k3, Some("k1")), "k3 names k1 instead");
    no_drift(&queue);
}

/// Claim due rows as a batching sink's dispatch does: each ordered head
/// with up to `rows` rows behind it and `bytes` of bodies; the seqs, in the
/// order handed out.
fn claimed_runs(queue: &Queue, at: u64, rows: usize, bytes: u64) -> Vec<u64> {
    claim_runs(queue, at, rows, bytes).expect("claim").iter().map(|r| r.seq).collect()
}

fn claim_runs(queue: &Queue, at: u64, rows: usize, bytes: u64) -> Result<Vec<DeliveryRow>, QueueError> {
    queue.deliveries().claim_due_with(at, 100, 400, |_| ClaimDecision::Run { rows, bytes })
}

/// A run is a head and the rows right behind it, in seq order, within its
/// bounds; nothing more of its line is handed out while it is in flight;
/// once it is done, the next run starts where it stopped.
#[tokio::test]
async fn a_run_is_its_heads_next_rows_in_order_within_its_bounds() {
    let dir = tempfile::tempdir().expect("dir");
    let queue = Queue::open(dir.path(), QueueConfig::default()).expect("open");
    let hooks = [("a1", Some("a")), ("a2", Some("a")), ("b1", Some("b")), ("a3", Some("a"))];
    let mut seqs = enqueue(&queue, &hooks, false).await;
    seqs.extend(enqueue(&queue, &[("a4", Some("a")), ("a5", Some("a")), ("u1", None)], false).await);
    let [a1, a2, b1, a3, a4, a5, u1] = seqs[..] else { panic!("{seqs:?}") };
    assert_eq!(claimed_runs(&queue, NOW, 3, u64::MAX), vec![a1, a2, a3, b1, u1], "a's run, b's head, u1");
    assert_eq!((counter(&queue, "inflight"), counter(&queue, "waiting")), (5, 2));
    assert!(claimed_runs(&queue, NOW, 3, u64::MAX).is_empty(), "a4 waits while a's run is in flight");
    no_drift(&queue);
    queue.deliveries().complete(a1, 0).expect("complete");
    queue.deliveries().complete(a2, 0).expect("complete");
    assert!(claimed_runs(&queue, NOW, 3, u64::MAX).is_empty(), "a3, still in flight, heads the line");
    queue.deliveries().complete(a3, 0).expect("complete");
    // Bodies are 2 bytes: a 5-byte bound takes the head and one more.
    assert_eq!(claimed_runs(&queue, NOW, 10, 5), vec![a4, a5]);
    for seq in [a4, a5, b1, u1] {
        queue.deliveries().complete(seq, 0).expect("complete");
    }
    assert_eq!((counter(&queue, "pending"), counter(&queue, "inflight")), (0, 0));
    no_drift(&queue);
}

/// The rows of a run behind one that failed are put back (parked at once)
/// and go again after it; under `skip`, behind a dead one, the first of
/// them names it, whether its put-back is settled with the dead row or
/// after it. A claim refused by the store in the middle of a run leaves
/// the whole run due.
#[tokio::test]
async fn a_run_put_back_behind_its_failed_row_goes_again_after_it() {
    use ankusa_queue::queue::Settlement;
    let dir = tempfile::tempdir().expect("dir");
    let faults = Arc::new(Faults::default());
    let queue = Queue::open(dir.path(), faulty(&faults)).expect("open");
    let hooks = [("a1", Some("a")), ("a2", Some("a")), ("a3", Some("a")), ("a4", Some("a"))];
    let [a1, a2, a3, a4] = enqueue(&queue, &hooks, false).await[..] else { panic!() };
    assert!(writes_refused(&faults, || claim_runs(&queue, NOW, 4, u64::MAX)).is_err(), "the claim is refused");
    assert_eq!(claimed_runs(&queue, NOW, 4, u64::MAX), vec![a1, a2, a3, a4], "the whole run, claimed again");

    // a2 fails: a3 and a4 (delivered or not) go back behind it.
    let failure = LastFailure::new(ErrorClass::Transient, "503", NOW);
    queue
        .deliveries()
        .settle(&[
            (a1, 0, Settlement::Complete),
            (a2, 0, Settlement::Retry { due_at: NOW + 1_000, failure }),
            (a3, 0, Settlement::Park { due_at: NOW }),
        ])
        .expect("settle");
    queue.deliveries().park(a4, 0, NOW).expect("park");
    assert!(claimed_runs(&queue, NOW, 4, u64::MAX).is_empty(), "a3 and a4 wait behind the retrying a2");
    assert_eq!(counter(&queue, "waiting"), 2);
    let again = claim_runs(&queue, NOW + 1_000, 4, u64::MAX).expect("claim");
    let runs: Vec<(u64, u32)> = again.iter().map(|r| (r.seq, r.attempts)).collect();
    assert_eq!(runs, vec![(a2, 1), (a3, 0), (a4, 0)], "a2 first; the put-back rows spent no attempt");

    // a2 dies, skipped: a3 goes again naming it, with a4 behind. The dead
    // row and a3's put-back settled together...
    queue
        .deliveries()
        .settle(&[
            (a2, 0, Settlement::Bury { dead_at: NOW, reason: "410".into(), class: ErrorClass::Permanent }),
            (a3, 0, Settlement::Park { due_at: NOW }),
            (a4, 0, Settlement::Park { due_at: NOW }),
        ])
        .expect("settle");
    let again = claim_runs(&queue, NOW + 1_000, 4, u64::MAX).expect("claim");
    assert_eq!(marks(&again), vec![(a3, Some("a2")), (a4, None)]);

    // ...or one after the other.
    queue.deliveries().bury(a3, 0, NOW, "410", ErrorClass::Permanent).expect("bury");
    queue.deliveries().park(a4, 0, NOW).expect("park");
    let again = claim_runs(&queue, NOW + 1_000, 4, u64::MAX).expect("claim");
    assert_eq!(marks(&again), vec![(a4, Some("a3"))]);
    queue.deliveries().complete(a4, 0).expect("complete");
    assert_eq!((counter(&queue, "pending"), counter(&queue, "inflight"), counter(&queue, "waiting")), (0, 0, 0));
    no_drift(&queue);
}

/// The row behind a head that leaves is claimed as it waits: named in
/// memory, not rewritten due. A claim the store refuses leaves it named; a
/// hook committed to its line meanwhile does not hand it out twice; named
/// only in memory when the node stops, it is found again by the boot's
/// walk of the lines.
#[tokio::test]
async fn a_head_moved_up_is_claimed_as_it_waits_and_found_again_after_a_stop() {
    let dir = tempfile::tempdir().expect("dir");
    let faults = Arc::new(Faults::default());
    let [k3, k4] = {
        let queue = Queue::open(dir.path(), faulty(&faults)).expect("open");
        let [k1, k2, k3] = enqueue(&queue, &[("k1", Some("k")), ("k2", Some("k")), ("k3", Some("k"))], false).await[..]
        else {
            panic!()
        };
        assert_eq!(claimed(&queue, NOW), vec![k1]);
        queue.deliveries().complete(k1, 0).expect("complete");
        assert_eq!((counter(&queue, "pending"), counter(&queue, "waiting")), (2, 2), "k2 heads the line as it waits");
        assert_eq!(queue.deliveries().next_due_at().expect("next due"), Some(0), "and can be claimed now");
        no_drift(&queue);

        assert!(writes_refused(&faults, || queue.deliveries().claim_due(NOW, 100)).is_err(), "the claim is refused");
        let [k4] = enqueue(&queue, &[("k4", Some("k"))], false).await[..] else { panic!() };
        let rows = queue.deliveries().claim_due(NOW, 100).expect("claim");
        assert_eq!(rows.iter().map(|r| (r.seq, r.attempts)).collect::<Vec<_>>(), vec![(k2, 0)], "k2 once, alone");
        assert!(claimed(&queue, NOW).is_empty(), "nothing more of the line while k2 is in flight");
        queue.deliveries().complete(k2, 0).expect("complete");
        queue.close().await;
        [k3, k4]
    };
    let queue = Queue::open(dir.path(), QueueConfig::default()).expect("reopen");
    assert_eq!(queue.recover_inflight(NOW).expect("recover"), 0);
    assert_eq!(claimed(&queue, NOW), vec![k3], "k3, named only in memory at the stop, heads the line");
    queue.deliveries().complete(k3, 0).expect("complete");
    assert_eq!(claimed(&queue, NOW), vec![k4]);
    queue.deliveries().complete(k4, 0).expect("complete");
    assert_eq!((counter(&queue, "pending"), counter(&queue, "waiting"), counter(&queue, "inflight")), (0, 0, 0));
    no_drift(&queue);
}

/// Random steps against a model of three keys: hooks committed, claims,
/// completions, retries, skipped dead heads and restarts in any order.
/// Every claim hands out, per key, only the oldest hook not yet done, and
/// only while none of the key is in flight; in the end every hook is done
/// and the counters agree with the rows.
#[tokio::test]
async fn lines_follow_a_model_through_random_steps_and_restarts() {
    use std::collections::{BTreeSet, HashMap};
    for seed in [7_u64, 1_234, 99_991] {
        let dir = tempfile::tempdir().expect("dir");
        let mut queue = Queue::open(dir.path(), QueueConfig::default()).expect("open");
        let mut rng = seed;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        // Per key: the seqs not yet done, and the one in flight.
        let mut open: HashMap<String, BTreeSet<u64>> = HashMap::new();
        let mut inflight: HashMap<String, u64> = HashMap::new();
        let mut hooks = 0;
        let check =
            |rows: Vec<DeliveryRow>, open: &HashMap<String, BTreeSet<u64>>, inflight: &mut HashMap<String, u64>| {
                for row in rows {
                    let key = row.line.as_ref().expect("ordered").key.clone();
                    assert!(
                        !inflight.contains_key(&key),
                        "seed {seed}: {key} handed out while {:?} is in flight",
                        inflight[&key]
                    );
                    let oldest = open[&key].first().copied();
                    assert_eq!(Some(row.seq), oldest, "seed {seed}: {key} hands out its oldest hook not done");
                    inflight.insert(key, row.seq);
                }
            };
        for _ in 0..400 {
            match next() % 10 {
                0..=2 => {
                    let key = ["a", "b", "c"][(next() % 3) as usize];
                    hooks += 1;
                    let [seq] = enqueue(&queue, &[(&format!("h{hooks}"), Some(key))], false).await[..] else {
                        panic!()
                    };
                    open.entry(key.to_string()).or_default().insert(seq);
                }
                3..=5 => check(queue.deliveries().claim_due(NOW, 100).expect("claim"), &open, &mut inflight),
                step @ 6..=8 if !inflight.is_empty() => {
                    let mut keys: Vec<String> = inflight.keys().cloned().collect();
                    keys.sort();
                    let key = keys[(next() % keys.len() as u64) as usize].clone();
                    let seq = inflight.remove(&key).expect("in flight");
                    let deliveries = queue.deliveries();
                    match step {
                        6 => deliveries.complete(seq, 0).expect("complete"),
                        7 => deliveries
                            .retry(seq, 0, NOW, LastFailure::new(ErrorClass::Transient, "503", NOW))
                            .expect("retry"),
                        _ => deliveries.bury(seq, 0, NOW, "410", ErrorClass::Permanent).expect("bury"),
                    }
                    if step != 7 {
                        open.get_mut(&key).expect("key").remove(&seq);
                    }
                }
                9 => {
                    queue.close().await;
                    queue = Queue::open(dir.path(), QueueConfig::default()).expect("reopen");
                    queue.recover_inflight(NOW).expect("recover");
                    inflight.clear();
                }
                _ => {}
            }
        }
        let started = std::time::Instant::now();
        while open.values().any(|seqs| !seqs.is_empty()) {
            assert!(started.elapsed() < std::time::Duration::from_secs(20), "seed {seed}: stranded: {open:?}");
            for (key, seq) in inflight.drain() {
                queue.deliveries().complete(seq, 0).expect("complete");
                open.get_mut(&key).expect("key").remove(&seq);
            }
            check(queue.deliveries().claim_due(NOW, 100).expect("claim"), &open, &mut inflight);
        }
        assert_eq!((counter(&queue, "pending"), counter(&queue, "waiting"), counter(&queue, "inflight")), (0, 0, 0));
        no_drift(&queue);
    }
}
