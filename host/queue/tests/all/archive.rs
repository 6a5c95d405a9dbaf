//! The archive: written with each accepted hook when on, walked tenant by
//! tenant over a receive window, swept past its retention, purged by
//! tenant, and never written by a redrive.

use ankusa_queue::queue::{Entry, Envelope, Queue, QueueConfig};

fn entry(id: &str, tenant: &str, received_at: u64) -> Entry {
    let envelope = Envelope::new(id.into(), "src".into(), tenant.into(), received_at, b"{}".to_vec());
    Entry::new(envelope, vec![(0, "log".into())])
}

fn ids(queue: &Queue, tenant: &str, since: u64, until: u64) -> Vec<String> {
    queue
        .archive()
        .archived(tenant, since, until, None, 100)
        .expect("archived")
        .into_iter()
        .map(|a| a.envelope.id)
        .collect()
}

#[tokio::test]
async fn the_archive_keeps_windows_sweeps_and_purges() {
    let dir = tempfile::tempdir().expect("dir");
    let config = QueueConfig { archive_retention_ms: Some(60_000), ..QueueConfig::default() };
    let queue = Queue::open(dir.path(), config).expect("open");
    let entries = vec![
        entry("a-old", "acme", 1_000),
        entry("a-new", "acme", 5_000),
        entry("b-old", "beta", 2_000),
        entry("b-new", "beta", 6_000),
    ];
    queue.intake().enqueue(entries, None).await.expect("enqueue");
    assert_eq!(queue.archive().archive_tenants().expect("tenants"), ["acme", "beta"]);
    assert_eq!(ids(&queue, "acme", 0, u64::MAX), ["a-old", "a-new"]);
    assert_eq!(ids(&queue, "acme", 2_000, 6_000), ["a-new"], "[since, until)");
    let first = queue.archive().archived("beta", 0, u64::MAX, None, 1).expect("page");
    let rest = queue.archive().archived("beta", 0, u64::MAX, Some(&first[0].key), 10).expect("page");
    assert_eq!((first[0].envelope.id.as_str(), rest[0].envelope.id.as_str()), ("b-old", "b-new"), "paged by key");

    let redriven = Entry::new(first[0].envelope.clone(), vec![(0, "log".into())]);
    assert_eq!(queue.archive().redrive(vec![redriven], "r1", Default::default()).await.expect("redrive"), 1);
    assert_eq!(ids(&queue, "beta", 0, u64::MAX).len(), 2, "a redriven hook is not archived again");

    assert_eq!(queue.archive().sweep_archive(3_000).expect("sweep"), 2, "the two received before 3 000");
    assert_eq!(ids(&queue, "acme", 0, u64::MAX), ["a-new"]);
    assert_eq!(queue.archive().purge_archive("beta").expect("purge"), 1);
    assert_eq!(queue.archive().archive_tenants().expect("tenants"), ["acme"]);
    queue.close().await;
}

#[tokio::test]
async fn without_retention_nothing_is_archived() {
    let dir = tempfile::tempdir().expect("dir");
    let queue = Queue::open(dir.path(), QueueConfig::default()).expect("open");
    queue.intake().enqueue(vec![entry("x", "acme", 1_000)], None).await.expect("enqueue");
    assert!(queue.archive().archive_tenants().expect("tenants").is_empty());
    queue.close().await;
}
