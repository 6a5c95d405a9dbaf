//! `wal.mode: fleet`'s commit path against a scripted replicated log shared
//! by two nodes: a round that fails after the log took some of its hooks
//! leaves no hook acked (accepted or duplicate) that no store holds. The
//! log's answers are scripted per hook: acked, taken with the ack lost, or
//! lost on the way.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ankusa::intake::{Appended, Framing, HookRecord, IntakeError, IntakeLog, LoggedHook, Record, Replay};
use ankusa::queue::{Engines, Entry, EntryOutcome, Envelope, Queue, QueueConfig, Refusal, WalMode};
use ankusa::store::Faults;

/// What becomes of one published hook.
#[derive(Clone, Copy, Debug)]
enum Fate {
    /// Taken and acked.
    Ack,
    /// Taken; the ack never comes back (a connection cut after the send).
    Landed,
    /// Lost on the way: not taken, no answer.
    Lost,
}

struct Message {
    node: String,
    store: u64,
    seq: u64,
    msg_id: Option<String>,
    payload: Vec<u8>,
}

/// The stream: one message per hook, a duplicate window by message id
/// (the whole test long).
#[derive(Default)]
struct Stream {
    messages: Vec<Message>,
}

/// One node's handle on the stream, with the fates of its next hooks.
struct Log {
    stream: Arc<Mutex<Stream>>,
    node: String,
    store: u64,
    script: Arc<Mutex<VecDeque<Fate>>>,
}

impl IntakeLog for Log {
    fn framing(&self) -> Framing {
        Framing::Hooks
    }

    fn append(&mut self, _: u64, _: u64, _: &[u8]) -> Result<(), IntakeError> {
        Err(IntakeError::Framing { log: "scripted", keeps: "hooks", given: "a group" })
    }

    fn append_hooks(&mut self, hooks: &[HookRecord]) -> Result<Vec<Appended>, IntakeError> {
        let mut stream = self.stream.lock().expect("stream");
        let mut script = self.script.lock().expect("script");
        let mut answers = Vec::new();
        for hook in hooks {
            let fate = script.pop_front().unwrap_or(Fate::Ack);
            let lost = || Appended::Failed { reason: "connection lost".into(), sent: true };
            if matches!(fate, Fate::Lost) {
                answers.push(lost());
                continue;
            }
            let known = hook.msg_id.as_ref().and_then(|id| {
                stream.messages.iter().position(|m| m.msg_id.as_ref() == Some(id)).map(|i| (i, &stream.messages[i]))
            });
            let answer = match known {
                Some((i, original)) => Appended::Duplicate {
                    original: original.payload.clone(),
                    position: i as u64 + 1,
                    logged_seq: (original.store == self.store).then_some(original.seq),
                },
                None => {
                    stream.messages.push(Message {
                        node: self.node.clone(),
                        store: self.store,
                        seq: hook.seq,
                        msg_id: hook.msg_id.clone(),
                        payload: hook.payload.clone(),
                    });
                    Appended::Stored { position: stream.messages.len() as u64 }
                }
            };
            answers.push(if matches!(fate, Fate::Landed) { lost() } else { answer });
        }
        Ok(answers)
    }

    fn bytes(&self) -> u64 {
        0
    }

    fn wants_checkpoint(&self) -> bool {
        false
    }

    fn truncate_below(&mut self, _: u64) -> Result<(), IntakeError> {
        Ok(())
    }

    fn replay(&self) -> Result<Vec<Record>, IntakeError> {
        Ok(Vec::new())
    }

    fn identity(&self) -> String {
        "scripted".into()
    }

    fn logged_since(&self, position: u64) -> Result<(Vec<LoggedHook>, u64), IntakeError> {
        let stream = self.stream.lock().expect("stream");
        let mut last = position;
        let mut hooks = Vec::new();
        for (i, m) in stream.messages.iter().enumerate().skip(position as usize) {
            if m.node != self.node {
                continue;
            }
            last = i as u64 + 1;
            if m.store == self.store {
                hooks.push(LoggedHook { position: last, seq: m.seq, payload: m.payload.clone() });
            }
        }
        Ok((hooks, last))
    }
}

/// A node of the test: its store on disk, its handle on the shared stream.
struct Node {
    name: &'static str,
    store_id: u64,
    script: Arc<Mutex<VecDeque<Fate>>>,
    faults: Arc<Faults>,
}

impl Node {
    fn new(name: &'static str, store_id: u64) -> Node {
        Node { name, store_id, script: Arc::default(), faults: Arc::default() }
    }

    fn open(&self, dir: &Path, stream: &Arc<Mutex<Stream>>) -> Queue {
        let config =
            QueueConfig { wal: WalMode::Fleet, store_faults: Some(self.faults.clone()), ..QueueConfig::default() };
        let path = dir.join(self.name);
        let embedded = Engines::embedded(&path, &config).expect("the store opens");
        let log =
            Log { stream: stream.clone(), node: self.name.into(), store: self.store_id, script: self.script.clone() };
        let engines = Engines { store: embedded.store, intake: Some((Box::new(log), Replay::default())) };
        Queue::start(engines, config).expect("the queue starts")
    }

    fn script(&self, fates: &[Fate]) {
        self.script.lock().expect("script").extend(fates.iter().copied());
    }
}

fn entry(key: &str) -> Entry {
    let mut envelope = Envelope::new(
        format!("id-{key}"),
        "github".into(),
        "acme".into(),
        1_700_000_000_000,
        format!("{{\"key\":\"{key}\"}}").into_bytes(),
    );
    envelope.dedupe_key = Some(key.to_string());
    Entry { envelope, sinks: vec![(0, "sha-http".into())] }
}

/// A retry: the same dedupe key and body under a new hook id.
fn retry(key: &str, attempt: u32) -> Entry {
    let mut entry = entry(key);
    entry.envelope.id = format!("id-{key}-retry-{attempt}");
    entry
}

/// The hooks a store holds: dedupe key and body.
fn stored(queue: &Queue) -> Vec<(String, String)> {
    let mut hooks: Vec<_> = queue
        .hooks(0, 1000)
        .expect("hooks")
        .into_iter()
        .map(|e| (e.dedupe_key.clone().expect("every test hook has a key"), String::from_utf8_lossy(&e.body).into()))
        .collect();
    hooks.sort();
    hooks
}

fn keys(keys: &[&str]) -> Vec<(String, String)> {
    keys.iter().map(|k| (k.to_string(), format!("{{\"key\":\"{k}\"}}"))).collect()
}

async fn eventually_stored(queue: &Queue, want: &[(String, String)]) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while stored(queue) != want {
        assert!(tokio::time::Instant::now() < deadline, "the store holds {:?}, not {want:?}", stored(queue));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn is_ack(outcome: &EntryOutcome) -> bool {
    matches!(outcome, EntryOutcome::Committed(_) | EntryOutcome::Duplicate(_))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_that_fails_midway_leaves_no_ack_without_a_stored_hook() {
    let dir = tempfile::tempdir().expect("dir");
    let stream = Arc::new(Mutex::new(Stream::default()));
    let (a, b) = (Node::new("a", 1), Node::new("b", 2));
    let (queue_a, queue_b) = (a.open(dir.path(), &stream), b.open(dir.path(), &stream));

    // One group of five: the log takes the first, takes the next two with
    // their acks lost, loses the fourth, and takes the fifth.
    a.script(&[Fate::Ack, Fate::Landed, Fate::Landed, Fate::Lost, Fate::Ack]);
    let entries = ["k0", "k1", "k2", "k3", "k4"].map(entry).to_vec();
    let outcomes = queue_a.enqueue(entries, None).await.expect("the call is answered");
    let refused: Vec<bool> =
        outcomes.iter().map(|o| matches!(o, EntryOutcome::Refused(Refusal::IntakeUnavailable))).collect();
    assert_eq!(
        refused,
        [false, true, true, true, false],
        "only the hooks the log did not ack are refused: {outcomes:?}"
    );
    assert!(is_ack(&outcomes[0]) && is_ack(&outcomes[4]));

    // The provider retries: k1 at the other node, k2 and k3 at this one.
    let at_b = queue_b.enqueue(vec![retry("k1", 1)], None).await.expect("b answers");
    let at_a = queue_a.enqueue(vec![retry("k2", 1), retry("k3", 1)], None).await.expect("a answers");
    for outcome in at_b.iter().chain(&at_a) {
        assert!(is_ack(outcome), "a retry of a hook the log holds is acked: {outcome:?}");
    }
    // Every acked hook is in a store, once: a's, which logged them all.
    eventually_stored(&queue_a, &keys(&["k0", "k1", "k2", "k3", "k4"])).await;
    assert_eq!(stored(&queue_b), [], "b acked k1 as a duplicate of a's hook and stores nothing");
    // A duplicate answer names the hook a holds.
    let held: Vec<String> = queue_a.hooks(0, 100).expect("hooks").into_iter().map(|e| e.id).collect();
    for outcome in at_b.iter().chain(&at_a) {
        if let EntryOutcome::Duplicate(original) = outcome {
            assert!(held.contains(&original.id), "the duplicate names {}, which a holds", original.id);
        }
    }
    assert_eq!(queue_a.counter(Some("acme"), "pending").expect("counter"), 5, "one row per stored hook");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_a_failed_round_left_in_the_log_are_committed_with_no_new_call() {
    let dir = tempfile::tempdir().expect("dir");
    let stream = Arc::new(Mutex::new(Stream::default()));
    let a = Node::new("a", 1);
    let queue = a.open(dir.path(), &stream);
    a.script(&[Fate::Landed, Fate::Lost]);
    let outcomes = queue.enqueue(vec![entry("k0"), entry("k1")], None).await.expect("answered");
    assert!(outcomes.iter().all(|o| !is_ack(o)), "{outcomes:?}");
    // No call comes; within a few seconds both are settled: the one the
    // log took, and the lost one, appended again (its retry would be a
    // duplicate of it).
    eventually_stored(&queue, &keys(&["k0", "k1"])).await;
    assert_eq!(stream.lock().expect("stream").messages.len(), 2, "each hook is in the log once");
    let again = queue.enqueue(vec![retry("k1", 1)], None).await.expect("answered");
    assert!(matches!(again[..], [EntryOutcome::Duplicate(_)]), "{again:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_commits_the_hooks_it_logged_and_lacks() {
    let dir = tempfile::tempdir().expect("dir");
    let stream = Arc::new(Mutex::new(Stream::default()));
    let a = Node::new("a", 1);
    let queue = a.open(dir.path(), &stream);
    queue.enqueue(vec![entry("k0")], None).await.expect("answered");
    a.script(&[Fate::Landed]);
    let outcomes = queue.enqueue(vec![entry("k1")], None).await.expect("answered");
    assert!(!is_ack(&outcomes[0]), "{outcomes:?}");
    // It stops before it settles (nothing unsettled survives in memory).
    queue.close().await;
    let queue = a.open(dir.path(), &stream);
    assert_eq!(stored(&queue), keys(&["k0"]));
    assert_eq!(queue.settle_from_log(0).await.expect("settles"), 1, "k1 is committed from the log");
    assert_eq!(stored(&queue), keys(&["k0", "k1"]));
    assert_eq!(queue.settle_from_log(0).await.expect("settles"), 0, "the mark moved past it");
    // Its seq is never handed out again.
    let logged_seq = stream.lock().expect("stream").messages[1].seq;
    let next = queue.enqueue(vec![entry("k2")], None).await.expect("answered");
    match &next[..] {
        [EntryOutcome::Committed(hook)] => assert!(hook.seq > logged_seq, "{} after {logged_seq}", hook.seq),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_write_refused_after_the_log_took_the_hooks_commits_them_once_it_recovers() {
    let dir = tempfile::tempdir().expect("dir");
    let stream = Arc::new(Mutex::new(Stream::default()));
    let (a, b) = (Node::new("a", 1), Node::new("b", 2));
    let (queue_a, queue_b) = (a.open(dir.path(), &stream), b.open(dir.path(), &stream));
    a.faults.fail_writes.store(true, Ordering::Relaxed);
    let outcomes = queue_a.enqueue(vec![entry("k0"), entry("k1")], None).await.expect("answered");
    assert!(outcomes.iter().all(|o| !is_ack(o)), "a refused store write acks nothing: {outcomes:?}");
    // The provider's retry at b meets the log's window: a duplicate, which
    // a must then hold.
    let at_b = queue_b.enqueue(vec![retry("k0", 1)], None).await.expect("answered");
    assert!(matches!(at_b[..], [EntryOutcome::Duplicate(_)]), "{at_b:?}");
    a.faults.fail_writes.store(false, Ordering::Relaxed);
    eventually_stored(&queue_a, &keys(&["k0", "k1"])).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_without_a_dedupe_key_is_not_settled_since_no_retry_can_meet_it() {
    let dir = tempfile::tempdir().expect("dir");
    let stream = Arc::new(Mutex::new(Stream::default()));
    let a = Node::new("a", 1);
    let queue = a.open(dir.path(), &stream);
    a.script(&[Fate::Landed]);
    let mut keyless = entry("k0");
    keyless.envelope.dedupe_key = None;
    let outcomes = queue.enqueue(vec![keyless], None).await.expect("answered");
    assert!(!is_ack(&outcomes[0]), "{outcomes:?}");
    // Its provider's retry is a hook of its own: nothing may be answered
    // as a duplicate of this one, so it stays as the log has it.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(queue.hooks(0, 10).expect("hooks").is_empty(), "the refused keyless hook is not committed");
    assert_eq!(stream.lock().expect("stream").messages.len(), 1, "and not appended again");
}
