//! `wal.mode: fleet`'s commit path against a scripted replicated log shared
//! by two nodes: a round that fails after the log took some of its hooks
//! leaves no hook acked (accepted or duplicate) that no store holds. The
//! log's answers are scripted per hook: acked, taken with the ack lost, or
//! lost on the way; and they can be held back, so rounds are in flight
//! together, as while a quorum is slow.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ankusa_queue::queue::{
    Engines, Entry, EntryOutcome, Envelope, Line, Queue, QueueConfig, Refusal, Settlement, WalMode,
};
use ankusa_store::intake::{Appended, HookLog, HookRecord, Intake, IntakeError, LoggedHook, Sent};
use ankusa_store::store::Faults;

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

/// Answers held back: the stream took (or not) each round when it was
/// sent, and its answers wait for `release`.
#[derive(Default)]
struct Held {
    holding: bool,
    rounds: Vec<(tokio::sync::oneshot::Sender<Vec<Appended>>, Vec<Appended>)>,
}

impl Held {
    fn release(&mut self) {
        self.holding = false;
        for (answer, answers) in self.rounds.drain(..) {
            let _ = answer.send(answers);
        }
    }
}

/// One node's handle on the stream, with the fates of its next hooks.
struct Log {
    stream: Arc<Mutex<Stream>>,
    node: String,
    store: u64,
    script: Arc<Mutex<VecDeque<Fate>>>,
    held: Arc<Mutex<Held>>,
}

impl HookLog for Log {
    fn send(&mut self, hooks: &[HookRecord]) -> Sent {
        let answers = self.take(hooks);
        let mut held = self.held.lock().expect("held");
        if !held.holding {
            return Sent::answered(answers);
        }
        let (answer, sent) = Sent::channel(answers.len());
        held.rounds.push((answer, answers));
        sent
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

impl Log {
    /// What the stream does with each hook, by its fate.
    fn take(&mut self, hooks: &[HookRecord]) -> Vec<Appended> {
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
        answers
    }
}

/// A node of the test: its store on disk, its handle on the shared stream.
struct Node {
    name: &'static str,
    store_id: u64,
    script: Arc<Mutex<VecDeque<Fate>>>,
    held: Arc<Mutex<Held>>,
    faults: Arc<Faults>,
}

impl Node {
    fn new(name: &'static str, store_id: u64) -> Node {
        Node { name, store_id, script: Arc::default(), held: Arc::default(), faults: Arc::default() }
    }

    fn open(&self, dir: &Path, stream: &Arc<Mutex<Stream>>) -> Queue {
        let config =
            QueueConfig { wal: WalMode::Fleet, store_faults: Some(self.faults.clone()), ..QueueConfig::default() };
        let path = dir.join(self.name);
        let embedded = Engines::embedded(&path, &config).expect("the store opens");
        let log = Log {
            stream: stream.clone(),
            node: self.name.into(),
            store: self.store_id,
            script: self.script.clone(),
            held: self.held.clone(),
        };
        let engines = Engines { store: embedded.store, intake: Some(Intake::Hooks(Box::new(log))) };
        Queue::start(engines, config).expect("the queue starts")
    }

    fn script(&self, fates: &[Fate]) {
        self.script.lock().expect("script").extend(fates.iter().copied());
    }

    /// Hold the log's answers back until `release`.
    fn hold(&self) {
        self.held.lock().expect("held").holding = true;
    }

    fn release(&self) {
        self.held.lock().expect("held").release();
    }

    fn rounds_held(&self) -> usize {
        self.held.lock().expect("held").rounds.len()
    }
}

/// Wait until `node` has `rounds` rounds sent and unanswered.
async fn rounds_in_flight(node: &Node, rounds: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while node.rounds_held() < rounds {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} rounds in flight, not {rounds}: a round waits for the one before it",
            node.rounds_held()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

type Answered = tokio::task::JoinHandle<Result<Vec<EntryOutcome>, ankusa_queue::queue::QueueError>>;

/// Two calls to `node`'s held queue, each its own round: the second is
/// sent once the first is in the log and unanswered.
async fn two_rounds(node: &Node, queue: &Arc<Queue>, first: Vec<Entry>, second: Vec<Entry>) -> (Answered, Answered) {
    let call = |entries: Vec<Entry>| {
        let queue = queue.clone();
        tokio::spawn(async move { queue.intake().enqueue(entries, None).await })
    };
    let first = call(first);
    rounds_in_flight(node, 1).await;
    let second = call(second);
    rounds_in_flight(node, 2).await;
    (first, second)
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
    Entry::new(envelope, vec![(0, "sha-http".into())])
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
    let outcomes = queue_a.intake().enqueue(entries, None).await.expect("the call is answered");
    let refused: Vec<bool> =
        outcomes.iter().map(|o| matches!(o, EntryOutcome::Refused(Refusal::IntakeUnavailable))).collect();
    assert_eq!(
        refused,
        [false, true, true, true, false],
        "only the hooks the log did not ack are refused: {outcomes:?}"
    );
    assert!(is_ack(&outcomes[0]) && is_ack(&outcomes[4]));

    // The provider retries: k1 at the other node, k2 and k3 at this one.
    let at_b = queue_b.intake().enqueue(vec![retry("k1", 1)], None).await.expect("b answers");
    let at_a = queue_a.intake().enqueue(vec![retry("k2", 1), retry("k3", 1)], None).await.expect("a answers");
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
    let outcomes = queue.intake().enqueue(vec![entry("k0"), entry("k1")], None).await.expect("answered");
    assert!(outcomes.iter().all(|o| !is_ack(o)), "{outcomes:?}");
    // No call comes; within a few seconds both are settled: the one the
    // log took, and the lost one, appended again (its retry would be a
    // duplicate of it).
    eventually_stored(&queue, &keys(&["k0", "k1"])).await;
    assert_eq!(stream.lock().expect("stream").messages.len(), 2, "each hook is in the log once");
    let again = queue.intake().enqueue(vec![retry("k1", 1)], None).await.expect("answered");
    assert!(matches!(again[..], [EntryOutcome::Duplicate(_)]), "{again:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_commits_the_hooks_it_logged_and_lacks() {
    let dir = tempfile::tempdir().expect("dir");
    let stream = Arc::new(Mutex::new(Stream::default()));
    let a = Node::new("a", 1);
    let queue = a.open(dir.path(), &stream);
    queue.intake().enqueue(vec![entry("k0")], None).await.expect("answered");
    a.script(&[Fate::Landed]);
    let outcomes = queue.intake().enqueue(vec![entry("k1")], None).await.expect("answered");
    assert!(!is_ack(&outcomes[0]), "{outcomes:?}");
    // It stops before it settles (nothing unsettled survives in memory).
    queue.close().await;
    let queue = a.open(dir.path(), &stream);
    assert_eq!(stored(&queue), keys(&["k0"]));
    assert_eq!(queue.handover().settle_from_log(0).await.expect("settles"), 1, "k1 is committed from the log");
    assert_eq!(stored(&queue), keys(&["k0", "k1"]));
    assert_eq!(queue.handover().settle_from_log(0).await.expect("settles"), 0, "the mark moved past it");
    // Its seq is never handed out again.
    let logged_seq = stream.lock().expect("stream").messages[1].seq;
    let next = queue.intake().enqueue(vec![entry("k2")], None).await.expect("answered");
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
    let outcomes = queue_a.intake().enqueue(vec![entry("k0"), entry("k1")], None).await.expect("answered");
    assert!(outcomes.iter().all(|o| !is_ack(o)), "a refused store write acks nothing: {outcomes:?}");
    // The provider's retry at b meets the log's window: a duplicate, which
    // a must then hold.
    let at_b = queue_b.intake().enqueue(vec![retry("k0", 1)], None).await.expect("answered");
    assert!(matches!(at_b[..], [EntryOutcome::Duplicate(_)]), "{at_b:?}");
    a.faults.fail_writes.store(false, Ordering::Relaxed);
    eventually_stored(&queue_a, &keys(&["k0", "k1"])).await;
}

/// A retry whose original's copy in the log cannot be read back: it is
/// taken as a new hook rather than answered as a duplicate naming an id no
/// node holds (before, b answered `Duplicate` with the retry's own
/// envelope and stored nothing), and the retries after it, on any node,
/// are duplicates of that new hook.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_whose_original_cannot_be_read_back_is_held_as_a_new_hook() {
    let dir = tempfile::tempdir().expect("dir");
    let stream = Arc::new(Mutex::new(Stream::default()));
    let (a, b, c) = (Node::new("a", 1), Node::new("b", 2), Node::new("c", 3));
    let (queue_a, queue_b, queue_c) =
        (a.open(dir.path(), &stream), b.open(dir.path(), &stream), c.open(dir.path(), &stream));
    let first = queue_a.intake().enqueue(vec![entry("k0")], None).await.expect("a answers");
    assert!(matches!(first[..], [EntryOutcome::Committed(_)]), "{first:?}");
    stream.lock().expect("stream").messages[0].payload = b"damaged".to_vec();

    let at_b = queue_b.intake().enqueue(vec![retry("k0", 1)], None).await.expect("b answers");
    let held_by_b = match &at_b[..] {
        [EntryOutcome::Committed(hook)] => hook.id.clone(),
        other => panic!("the retry is held as a new hook, not answered {other:?}"),
    };
    assert_eq!(held_by_b, "id-k0-retry-1");
    assert_eq!(stored(&queue_b), keys(&["k0"]), "b holds the retry's bytes");
    assert_eq!(stream.lock().expect("stream").messages.len(), 2, "logged once more, under its own message id");

    let at_c = queue_c.intake().enqueue(vec![retry("k0", 2)], None).await.expect("c answers");
    match &at_c[..] {
        [EntryOutcome::Duplicate(original)] => assert_eq!(original.id, held_by_b, "named after the hook b holds"),
        other => panic!("a later retry is a duplicate of b's hook: {other:?}"),
    }
    assert!(stored(&queue_c).is_empty(), "c holds nothing");
    assert_eq!(stream.lock().expect("stream").messages.len(), 2);
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
    let outcomes = queue.intake().enqueue(vec![keyless], None).await.expect("answered");
    assert!(!is_ack(&outcomes[0]), "{outcomes:?}");
    // Its provider's retry is a hook of its own: nothing may be answered
    // as a duplicate of this one, so it stays as the log has it.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(queue.hooks(0, 10).expect("hooks").is_empty(), "the refused keyless hook is not committed");
    assert_eq!(stream.lock().expect("stream").messages.len(), 1, "and not appended again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rounds_go_out_while_earlier_ones_await_their_quorum_and_are_answered_in_order() {
    let dir = tempfile::tempdir().expect("dir");
    let stream = Arc::new(Mutex::new(Stream::default()));
    let a = Node::new("a", 1);
    let queue = Arc::new(a.open(dir.path(), &stream));
    a.hold();
    let (first, second) = two_rounds(&a, &queue, vec![entry("k0"), entry("k1")], vec![entry("k2")]).await;
    assert_eq!(stream.lock().expect("stream").messages.len(), 3, "both rounds are in the log");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!first.is_finished() && !second.is_finished(), "nothing is acked before its quorum");
    assert!(stored(&queue).is_empty(), "nothing is written before its round is answered");
    a.release();
    let first = first.await.expect("task").expect("answered");
    let second = second.await.expect("task").expect("answered");
    let seqs: Vec<u64> = first
        .iter()
        .chain(&second)
        .map(|outcome| match outcome {
            EntryOutcome::Committed(hook) => hook.seq,
            other => panic!("every hook commits: {other:?}"),
        })
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "seqs follow the order rounds were sent: {seqs:?}");
    assert_eq!(stored(&queue), keys(&["k0", "k1", "k2"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_that_fails_takes_back_the_rounds_sent_after_it() {
    let dir = tempfile::tempdir().expect("dir");
    let stream = Arc::new(Mutex::new(Stream::default()));
    let (a, b) = (Node::new("a", 1), Node::new("b", 2));
    let (queue, queue_b) = (Arc::new(a.open(dir.path(), &stream)), b.open(dir.path(), &stream));
    a.hold();
    // The first round's k0 is lost on the way, k1 is taken with its ack
    // lost; the second round, sent before the first is answered, carries
    // k0's retry (planned as a duplicate of the k0 in flight) and k2.
    a.script(&[Fate::Lost, Fate::Landed, Fate::Ack]);
    let (first, second) =
        two_rounds(&a, &queue, vec![entry("k0"), entry("k1")], vec![retry("k0", 1), entry("k2")]).await;
    a.release();
    let first = first.await.expect("task").expect("answered");
    let second = second.await.expect("task").expect("answered");
    assert!(
        first.iter().all(|o| matches!(o, EntryOutcome::Refused(Refusal::IntakeUnavailable))),
        "the failed round acks nothing: {first:?}"
    );
    assert!(second.iter().all(is_ack), "the later round is planned again, k0's retry as a hook of its own: {second:?}");
    // k1's retry at the other node meets the log's window: a duplicate,
    // which this node must then hold.
    let at_b = queue_b.intake().enqueue(vec![retry("k1", 1)], None).await.expect("b answers");
    assert!(matches!(at_b[..], [EntryOutcome::Duplicate(_)]), "{at_b:?}");
    eventually_stored(&queue, &keys(&["k0", "k1", "k2"])).await;
    assert_eq!(stored(&queue_b), [], "b stores nothing it answered as a duplicate");
    assert_eq!(queue.counter(Some("acme"), "pending").expect("counter"), 3, "one row per stored hook");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_write_refused_refuses_the_rounds_sent_after_it_and_loses_none_of_them() {
    let dir = tempfile::tempdir().expect("dir");
    let stream = Arc::new(Mutex::new(Stream::default()));
    let a = Node::new("a", 1);
    let queue = Arc::new(a.open(dir.path(), &stream));
    a.hold();
    let (first, second) = two_rounds(&a, &queue, vec![entry("k0")], vec![retry("k0", 1), entry("k1")]).await;
    a.faults.fail_writes.store(true, Ordering::Relaxed);
    a.release();
    let first = first.await.expect("task").expect("answered");
    let second = second.await.expect("task").expect("answered");
    assert!(!is_ack(&first[0]), "a refused write acks nothing: {first:?}");
    assert!(!is_ack(&second[1]), "nor a round planned on top of it: {second:?}");
    a.faults.fail_writes.store(false, Ordering::Relaxed);
    // Every hook the log holds is committed once the store takes writes:
    // the duplicate answered for k0's retry, if it was, names one of them.
    eventually_stored(&queue, &keys(&["k0", "k1"])).await;
    assert_eq!(stream.lock().expect("stream").messages.len(), 2, "each hook is in the log once");
}

/// A hook of an ordered key whose round failed, prepared waiting behind
/// its key's head, and committed by the settle after that head was
/// delivered: it is claimed, and its key goes on. (The settle made its
/// rows due anew but kept its place in the line waiting: the row said due,
/// no due entry was written, and the key stopped for good.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settled_hook_of_an_ordered_key_is_claimed_and_its_key_goes_on() {
    let dir = tempfile::tempdir().expect("dir");
    let stream = Arc::new(Mutex::new(Stream::default()));
    let a = Node::new("a", 1);
    let queue = a.open(dir.path(), &stream);
    let ordered = |key: &str| {
        let mut entry = entry(key);
        entry.lines.push((0, Line { key: "order-1".into(), hold: false }));
        entry
    };
    let head = queue.intake().enqueue(vec![ordered("k0")], None).await.expect("answered");
    assert!(matches!(head[..], [EntryOutcome::Committed(_)]), "{head:?}");
    // k1 is prepared behind k0; the log loses it: refused, left unsettled.
    a.script(&[Fate::Lost]);
    let behind = queue.intake().enqueue(vec![ordered("k1")], None).await.expect("answered");
    assert!(!is_ack(&behind[0]), "{behind:?}");
    // k0 is delivered before the settle commits k1.
    let deliveries = queue.deliveries();
    let claimed = deliveries.claim_due(ankusa_queue::queue::now_ms(), 10).expect("claim");
    assert_eq!(claimed.len(), 1, "only the head is claimed: {claimed:?}");
    deliveries.settle(&[(claimed[0].seq, 0, Settlement::Complete)]).expect("settled");
    eventually_stored(&queue, &keys(&["k1"])).await;

    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let claimed = deliveries.claim_due(ankusa_queue::queue::now_ms(), 10).expect("claim");
        if claimed.len() == 1 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the settled hook of the key is never claimed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
