//! kill -9: a child process enqueues from 64 concurrent callers and prints
//! every ack; the parent SIGKILLs it mid-stream (group commits are running
//! all the time), reopens the store, and checks that every acked hook is
//! there byte for byte and that no seq is ever handed out twice, over
//! several rounds on the same store, in `disk` and `dual` mode, and with a
//! store WAL bound small enough that the store reuses retired WAL files
//! during the rounds (so recovery reads recycled files with stale tails).

use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ankusa::queue::{Envelope, Queue, QueueConfig, WalMode};
use ankusa_tests::crash::hook_envelope;

const CHILD: &str = env!("CARGO_BIN_EXE_queue-child");
/// Acks to wait for before each kill: early, mid and late in a run.
const KILL_AFTER: [usize; 4] = [40, 700, 2500, 1];

struct Round {
    acked: BTreeMap<u64, String>,
}

/// Run the child until it has printed `acks` acks, then SIGKILL it and
/// collect every ack it printed.
fn run_child(store: &Path, mode: &str, intake: &Path, prefix: &str, acks: usize, wal_bytes: u64) -> Round {
    let mut child = Command::new(CHILD)
        .arg(store)
        .arg(mode)
        .arg(intake)
        .args(["64", prefix, &wal_bytes.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the child");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    assert_eq!(lines.next().and_then(Result::ok).as_deref(), Some("ready"), "the child opened the store");
    let mut acked = BTreeMap::new();
    let started = Instant::now();
    let parse = |line: &str, acked: &mut BTreeMap<u64, String>| {
        // A line cut by the kill is not a whole ack; skip it.
        if let Some((id, seq)) = line.split_once(' ')
            && let Ok(seq) = seq.parse::<u64>()
        {
            assert!(acked.insert(seq, id.to_string()).is_none(), "seq {seq} acked twice in one run");
        }
    };
    while acked.len() < acks && started.elapsed() < Duration::from_secs(60) {
        match lines.next() {
            Some(Ok(line)) => parse(&line, &mut acked),
            _ => break,
        }
    }
    child.kill().expect("SIGKILL the child");
    child.wait().expect("reap the child");
    // Acks printed before the kill are still in the pipe.
    for line in lines.map_while(Result::ok) {
        parse(&line, &mut acked);
    }
    Round { acked }
}

/// RocksDB's info log notes each WAL file it takes from its recycle list.
fn wal_files_reused(store: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(store) else { return 0 };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("LOG"))
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .map(|log| log.matches("from recycle list").count())
        .sum()
}

/// The rounds; returns the directory so a caller can look at the store.
async fn rounds(mode: WalMode, wal_bytes: u64) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("dir");
    let store = dir.path().join("store");
    let intake = dir.path().join("intake");
    let config = QueueConfig {
        wal: mode,
        intake_dir: Some(intake.clone()),
        store_wal_max_bytes: wal_bytes,
        ..QueueConfig::default()
    };
    let mut every_seq: HashSet<u64> = HashSet::new();
    let mut highest = 0u64;
    let mut examined = 0usize;
    for (round, acks) in KILL_AFTER.iter().enumerate() {
        let prefix = format!("r{round}");
        let result = run_child(&store, mode.label(), &intake, &prefix, *acks, wal_bytes);
        assert!(!result.acked.is_empty(), "round {round} acked nothing: the check would examine nothing");

        let queue = Queue::open(&store, config.clone()).expect("reopen after SIGKILL");
        let stored: BTreeMap<u64, Envelope> =
            queue.hooks(0, usize::MAX).expect("hooks").into_iter().map(|e| (e.seq, e)).collect();
        for (seq, id) in &result.acked {
            let found = stored.get(seq).unwrap_or_else(|| panic!("round {round}: acked {id} (seq {seq}) is missing"));
            let expected = Envelope { seq: *seq, ..hook_envelope(id) };
            assert_eq!(found, &expected, "round {round}: acked {id} is stored byte for byte");
            assert!(*seq > highest, "round {round}: seq {seq} reuses or precedes an earlier round's {highest}");
            assert!(every_seq.insert(*seq));
        }
        let next_seq = queue.stats().expect("stats").next_seq;
        highest = *result.acked.keys().last().expect("acked");
        assert!(next_seq > highest, "next_seq {next_seq} is past every acked seq {highest}");
        // Hooks committed but not acked (killed before the print) hold seqs too.
        highest = highest.max(stored.keys().last().copied().unwrap_or(0));
        examined += result.acked.len();
        println!(
            "kill -9 {} round {round}: {} acks examined, all present; {} hooks stored",
            mode.label(),
            result.acked.len(),
            stored.len()
        );
        queue.close().await;
    }
    println!("kill -9 {}: {} rounds, {examined} acked hooks examined", mode.label(), KILL_AFTER.len());
    assert!(examined >= KILL_AFTER.iter().sum::<usize>(), "every round reached its ack count: {examined}");
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_ack_survives_sigkill_in_disk_mode() {
    rounds(WalMode::Disk, ankusa::store::DEFAULT_WAL_MAX_BYTES).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_ack_survives_sigkill_in_dual_mode() {
    rounds(WalMode::Dual, ankusa::store::DEFAULT_WAL_MAX_BYTES).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_ack_survives_sigkill_while_wal_files_are_reused() {
    // 256 KiB of live WAL: the store retires and reuses files every few
    // hundred hooks, so kills land in recycled files.
    let dir = rounds(WalMode::Disk, 256 << 10).await;
    let reused = wal_files_reused(&dir.path().join("store"));
    println!("WAL files reused during the rounds: {reused}");
    assert!(reused > 0, "the rounds never wrote into a reused WAL file: the check proved nothing about recycling");
}
