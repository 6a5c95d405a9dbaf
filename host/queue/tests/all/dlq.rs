//! DLQ pages: newest first, bounded work per call, authenticated cursors.

use ankusa_common::error_class::ErrorClass;
use ankusa_queue::queue::{DeadQuery, Entry, Envelope, MAX_EXAMINED, Queue, QueueConfig, QueueError, SinkSelector};

const NOW: u64 = 1_800_000_000_000;

/// A queue with `count` dead rows; the seqs listed in `rare` come from
/// source `rare`, the rest from `common`. Row n dies at NOW + n.
async fn dlq_with(dir: &std::path::Path, count: u64, rare: &[u64]) -> Queue {
    let queue = Queue::open(dir, QueueConfig::default()).expect("open");
    let mut n = 0;
    while n < count {
        let entries: Vec<Entry> = (n..(n + 1000).min(count))
            .map(|i| {
                let source = if rare.contains(&(i + 1)) { "rare" } else { "common" };
                let tenant = if i % 2 == 0 { "acme" } else { "globex" };
                Entry::new(
                    Envelope::new(format!("h{i}"), source.into(), tenant.into(), NOW, b"{}".to_vec()),
                    vec![(0, "sha".into())],
                )
            })
            .collect();
        n += entries.len() as u64;
        queue.intake().enqueue(entries, None).await.expect("enqueue");
    }
    let mut claimed = queue.deliveries().claim_due(NOW, count as usize).expect("claim");
    claimed.sort_by_key(|r| r.seq);
    for row in claimed {
        queue.deliveries().bury(row.seq, row.sink, NOW + row.seq, "gave up", ErrorClass::Transient).expect("bury");
    }
    queue
}

#[tokio::test]
async fn a_rare_filter_over_a_big_dlq_pages_in_bounded_calls() {
    let dir = tempfile::tempdir().expect("temp dir");
    let rare = [7, 25_000, 49_990];
    let queue = dlq_with(dir.path(), 50_000, &rare).await;
    let mut query = DeadQuery { limit: 10, source_id: Some("rare".into()), ..DeadQuery::default() };
    let mut found = Vec::new();
    let mut calls = 0;
    loop {
        let page = queue.dead_letters().dead(&query).expect("page");
        calls += 1;
        assert!(page.examined <= MAX_EXAMINED, "call {calls} examined {}", page.examined);
        assert_eq!(page.total, None, "a filtered scan that did not reach the end cannot count");
        found.extend(page.entries.iter().map(|e| e.envelope.seq));
        match page.next_cursor {
            Some(cursor) => query.cursor = Some(cursor),
            None => break,
        }
        assert!(calls < 20, "the cursors must make progress");
    }
    assert_eq!(found, [49_990, 25_000, 7], "exactly the matches, newest first");
    assert!(calls >= 5, "50 000 keys take at least five bounded calls, took {calls}");

    let everything = queue.dead_letters().dead(&DeadQuery { limit: 5, ..DeadQuery::default() }).expect("page");
    assert_eq!(everything.total, Some(50_000), "unfiltered total comes from the counters");
    let seqs: Vec<u64> = everything.entries.iter().map(|e| e.envelope.seq).collect();
    assert_eq!(seqs, [50_000, 49_999, 49_998, 49_997, 49_996]);
    assert_eq!(everything.entries[0].error_class, Some(ErrorClass::Transient));
    assert_eq!(everything.entries[0].attempts, 1);
}

#[tokio::test]
async fn a_tenant_filter_reads_its_own_range_with_counter_totals() {
    let dir = tempfile::tempdir().expect("temp dir");
    let queue = dlq_with(dir.path(), 100, &[]).await;
    let mut query = DeadQuery { limit: 30, tenants: Some(vec!["globex".into()]), ..DeadQuery::default() };
    let mut seen = Vec::new();
    loop {
        let page = queue.dead_letters().dead(&query).expect("page");
        assert_eq!(page.total, Some(50));
        assert!(page.entries.iter().all(|e| e.envelope.tenant_id == "globex"));
        seen.extend(page.entries.iter().map(|e| e.envelope.seq));
        match page.next_cursor {
            Some(c) => query.cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(seen.len(), 50);
    assert!(seen.windows(2).all(|w| w[0] > w[1]), "newest first across pages");
    let small = queue
        .dead_letters()
        .dead(&DeadQuery { limit: 1000, sink: Some(SinkSelector::Index(0)), ..DeadQuery::default() })
        .expect("page");
    assert_eq!(
        (small.total, small.next_cursor),
        (Some(100), None),
        "a filtered scan that reached the end counts exactly"
    );
    // By the sink's name, as a person filters: the name is in every entry.
    let named = DeadQuery { limit: 1000, sink: Some(SinkSelector::Name("sha".into())), ..DeadQuery::default() };
    let named = queue.dead_letters().dead(&named).expect("page");
    assert_eq!(named.total, Some(100));
    assert!(named.entries.iter().all(|e| e.sink_name == "sha"));
    let other = DeadQuery { limit: 1000, sink: Some(SinkSelector::Name("other".into())), ..DeadQuery::default() };
    assert_eq!(queue.dead_letters().dead(&other).expect("page").total, Some(0), "another sink's name matches nothing");
}

#[tokio::test]
async fn forged_cursors_are_invalid() {
    let dir = tempfile::tempdir().expect("temp dir");
    let queue = dlq_with(dir.path(), 20, &[]).await;
    let page = queue.dead_letters().dead(&DeadQuery { limit: 5, ..DeadQuery::default() }).expect("page");
    let cursor = page.next_cursor.expect("more pages");
    assert!(queue.dead_letters().dead(&DeadQuery { cursor: Some(cursor.clone()), ..DeadQuery::default() }).is_ok());
    let truncated = cursor[..cursor.len() - 3].to_string();
    let mut tampered = cursor.clone().into_bytes();
    tampered[2] = if tampered[2] == b'A' { b'B' } else { b'A' };
    for forged in [truncated, String::from_utf8(tampered).expect("ascii"), "AAAA".into(), "not base64!".into()] {
        let result = queue.dead_letters().dead(&DeadQuery { cursor: Some(forged.clone()), ..DeadQuery::default() });
        assert_eq!(result.err(), Some(QueueError::InvalidCursor), "{forged}");
    }
}

#[tokio::test]
async fn a_full_last_page_carries_no_cursor() {
    let dir = tempfile::tempdir().expect("temp dir");
    let queue = dlq_with(dir.path(), 10, &[]).await;
    let first = queue.dead_letters().dead(&DeadQuery { limit: 5, ..DeadQuery::default() }).expect("page");
    assert_eq!(first.entries.len(), 5);
    let cursor = first.next_cursor.expect("five more rows follow");
    let last =
        queue.dead_letters().dead(&DeadQuery { limit: 5, cursor: Some(cursor), ..DeadQuery::default() }).expect("page");
    assert_eq!(last.entries.len(), 5, "exactly the five rows left");
    assert_eq!(last.next_cursor, None, "the scan reached the end: nothing follows");
    // Exactly `limit` rows in the whole DLQ: one page, and it is the last.
    let all = queue.dead_letters().dead(&DeadQuery { limit: 10, ..DeadQuery::default() }).expect("page");
    assert_eq!((all.entries.len(), all.next_cursor), (10, None));
}

#[tokio::test]
async fn a_filtered_scan_that_ends_with_a_full_page_knows_its_total() {
    let dir = tempfile::tempdir().expect("temp dir");
    let queue = dlq_with(dir.path(), 20, &[3, 9, 14]).await;
    let page = queue
        .dead_letters()
        .dead(&DeadQuery { limit: 3, source_id: Some("rare".into()), ..DeadQuery::default() })
        .expect("page");
    let seqs: Vec<u64> = page.entries.iter().map(|e| e.envelope.seq).collect();
    assert_eq!(seqs, [14, 9, 3]);
    assert_eq!(page.next_cursor, None, "no row left could match");
    assert_eq!(page.total, Some(3), "the scan reached the end within the page");
}

#[tokio::test]
async fn a_tenant_named_twice_lists_and_counts_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let queue = dlq_with(dir.path(), 10, &[]).await;
    let once =
        queue.dead_letters().dead(&DeadQuery { limit: 50, tenants: Some(vec!["acme".into()]), ..DeadQuery::default() });
    let twice = queue.dead_letters().dead(&DeadQuery {
        limit: 50,
        tenants: Some(vec!["acme".into(), "acme".into()]),
        ..DeadQuery::default()
    });
    let (once, twice) = (once.expect("page"), twice.expect("page"));
    assert_eq!(once.entries.len(), 5, "acme holds every other row");
    assert_eq!(twice.entries, once.entries);
    assert_eq!((twice.total, twice.next_cursor), (Some(5), None));
}

#[tokio::test]
async fn more_tenants_than_the_budget_is_refused_not_an_empty_last_page() {
    let dir = tempfile::tempdir().expect("temp dir");
    let queue = dlq_with(dir.path(), 4, &[]).await;
    let many: Vec<String> = (0..=MAX_EXAMINED).map(|i| format!("t{i}")).collect();
    let err =
        queue.dead_letters().dead(&DeadQuery { tenants: Some(many), ..DeadQuery::default() }).expect_err("refused");
    assert!(matches!(err, QueueError::TooManyTenants { .. }), "{err}");
    // At the budget, every tenant still gets a key's share, and the
    // tenants that hold rows list them.
    let mut tenants: Vec<String> = (0..MAX_EXAMINED - 2).map(|i| format!("t{i}")).collect();
    tenants.extend(["acme".into(), "globex".into()]);
    let mut query = DeadQuery { limit: 10, tenants: Some(tenants), ..DeadQuery::default() };
    let mut found = Vec::new();
    for _ in 0..10 {
        let page = queue.dead_letters().dead(&query).expect("page");
        found.extend(page.entries.iter().map(|e| e.envelope.seq));
        match page.next_cursor {
            Some(cursor) => query.cursor = Some(cursor),
            None => break,
        }
    }
    assert_eq!(found, [4, 3, 2, 1], "every dead row, newest first");
}
