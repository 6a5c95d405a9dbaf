use super::*;
use crate::store::keys::{hooks, index};

fn open(dir: &Path) -> RocksStore {
    RocksStore::open(&StoreOptions::new(dir)).expect("open the store")
}

#[test]
fn synced_writes_survive_a_reopen() {
    let dir = tempfile::tempdir().expect("temp dir");
    {
        let store = open(dir.path());
        let mut batch = Batch::new();
        batch.put(Cf::Hooks, hooks::hook(7), b"hook seven".to_vec());
        batch.put(Cf::Hooks, hooks::hook(9), vec![b'x'; 10_000]);
        store.write(&batch, Durability::Synced).expect("write");
    }
    let store = open(dir.path());
    assert_eq!(store.get(Cf::Hooks, &hooks::hook(7)).expect("read"), Some(b"hook seven".to_vec()));
    assert_eq!(store.last_key(Cf::Hooks).expect("last"), Some(hooks::hook(9)));
    let big = store.get(Cf::Hooks, &hooks::hook(9)).expect("read").expect("present");
    assert_eq!(big.len(), 10_000, "a blob-file value reads back whole");
}

#[test]
fn counters_add_up_across_batches() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(dir.path());
    for delta in [5, -2, 10] {
        let mut batch = Batch::new();
        batch.add_counter(b"n/pending".to_vec(), delta);
        store.write(&batch, Durability::Buffered).expect("write");
    }
    assert_eq!(store.counter(b"n/pending").expect("read"), 13);
    assert_eq!(store.counter(b"n/never").expect("read"), 0);
}

#[test]
fn folded_counter_operands_keep_the_exact_sum() {
    // Far past the folding threshold, with several operands of one key
    // in a single batch (a fold must see the earlier ones of its batch),
    // then across a reopen that replays the WAL without folding.
    let dir = tempfile::tempdir().expect("temp dir");
    let mut expected = 0i64;
    {
        let store = open(dir.path());
        for round in 0..(COUNTER_OPERANDS_IN_MEMTABLE as i64 * 5) {
            let mut batch = Batch::new();
            for delta in [round, -1, 3] {
                batch.add_counter(b"n/dead".to_vec(), delta);
                expected += delta;
            }
            store.write(&batch, Durability::Synced).expect("write");
            if round % 97 == 0 {
                assert_eq!(store.counter(b"n/dead").expect("read"), expected, "after round {round}");
            }
        }
        assert_eq!(store.counter(b"n/dead").expect("read"), expected);
    }
    let store = open(dir.path());
    assert_eq!(store.counter(b"n/dead").expect("read after reopen"), expected);
}

#[test]
fn ops_on_one_key_apply_in_batch_order() {
    // The store reorders a batch by key; ops on the same key must still
    // apply in the order they were added.
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(dir.path());
    let key = |n: u64| index::due(n, n, 0);
    let mut batch = Batch::new();
    batch.put(Cf::Index, key(2), b"first".to_vec());
    batch.put(Cf::Index, key(1), b"kept".to_vec());
    batch.delete(Cf::Index, key(2));
    batch.put(Cf::Index, key(3), b"gone".to_vec());
    batch.put(Cf::Index, key(2), b"last".to_vec());
    batch.delete(Cf::Index, key(3));
    store.write(&batch, Durability::Synced).expect("write");
    assert_eq!(store.get(Cf::Index, &key(1)).expect("read"), Some(b"kept".to_vec()));
    assert_eq!(store.get(Cf::Index, &key(2)).expect("read"), Some(b"last".to_vec()));
    assert_eq!(store.get(Cf::Index, &key(3)).expect("read"), None);
}

#[test]
fn a_batch_is_all_or_nothing_and_scans_respect_bounds() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(dir.path());
    let mut batch = Batch::new();
    for n in 0..10u64 {
        batch.put(Cf::Index, index::due(n, n, 0), Vec::new());
    }
    batch.put(Cf::Index, index::dead(1, 1, 0), Vec::new());
    store.write(&batch, Durability::Synced).expect("write");
    let due = store.scan(&Scan::prefix(Cf::Index, b"d", 100)).expect("scan");
    assert_eq!(due.len(), 10);
    let newest = store.scan(&Scan { reverse: true, limit: 3, ..Scan::prefix(Cf::Index, b"d", 0) }).expect("scan");
    let firsts: Vec<u64> = newest.iter().map(|(k, _)| u64::from_be_bytes(k[1..9].try_into().expect("8"))).collect();
    assert_eq!(firsts, [9, 8, 7]);
}

#[test]
fn a_damaged_store_is_refused_not_recreated() {
    let dir = tempfile::tempdir().expect("temp dir");
    drop(open(dir.path()));
    std::fs::remove_file(dir.path().join("CURRENT")).expect("remove CURRENT");
    let err = RocksStore::open(&StoreOptions::new(dir.path())).err().expect("refused");
    assert!(err.to_string().contains("not treated as a new store"), "{err}");
}

#[test]
fn a_missing_directory_becomes_a_new_store() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(&dir.path().join("fresh"));
    assert_eq!(store.last_key(Cf::Hooks).expect("scan"), None);
    assert_eq!(store.seq_marker().expect("read"), None);
}

/// The nice value in a `/proc/.../stat` line.
#[cfg(target_os = "linux")]
fn nice_in_stat(stat: &str) -> Option<i64> {
    // Fields after the command name, which ends at the last ')': the
    // state is field 3, the nice value field 19.
    let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    fields.get(19 - 3)?.parse().ok()
}

/// The nice value of every thread of this process named `name`.
#[cfg(target_os = "linux")]
fn nice_of_threads(name: &str) -> Vec<i64> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return Vec::new() };
    tasks
        .flatten()
        .filter(|task| std::fs::read_to_string(task.path().join("comm")).is_ok_and(|comm| comm.trim() == name))
        .filter_map(|task| nice_in_stat(&std::fs::read_to_string(task.path().join("stat")).ok()?))
        .collect()
}

#[cfg(target_os = "linux")]
#[test]
fn compactions_run_at_the_lowest_cpu_priority() {
    let own = std::fs::read_to_string("/proc/thread-self/stat").ok().and_then(|stat| nice_in_stat(&stat));
    let own = own.expect("this thread's nice value");
    assert!(own < 19, "the test must start above the lowest priority to see it lowered");
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(dir.path());
    // Five overlapping L0 files: one more than the compaction trigger.
    for round in 0..5u64 {
        let mut batch = Batch::new();
        for i in 0..100u64 {
            batch.put(Cf::Deliveries, hooks::hook(i), round.to_be_bytes().to_vec());
        }
        store.write(&batch, Durability::Buffered).expect("write");
        store.flush().expect("flush");
    }
    // A pool thread lowers itself when it takes its next job.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !nice_of_threads("rocksdb:low").contains(&19) {
        assert!(
            std::time::Instant::now() < deadline,
            "no compaction thread at nice 19: {:?}",
            nice_of_threads("rocksdb:low")
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(nice_of_threads("rocksdb:high").iter().all(|nice| *nice == own), "flushes keep the process's priority");
}
