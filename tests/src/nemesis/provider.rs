//! A provider posting hooks and retrying every refusal until it is acked,
//! as Stripe or GitHub would, at any node that is up. Some hooks carry an
//! ordering key (posted one after another per key, so their ack order is
//! known), some none; a few are doomed (the sink refuses them for good, so
//! they become dead letters).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ankusa_fuzz_targets::mutate::Rng;

use crate::fleet::try_post_with;

/// The header the fleet's binding orders by (see `run`).
pub const ORDER_HEADER: &str = "x-order-key";
/// Posting workers, each with keys of its own.
const WORKERS: usize = 8;
const KEYS_PER_WORKER: usize = 3;
/// A refused hook is retried this often, up to [`RETRIES`] times.
const RETRY_EVERY: Duration = Duration::from_millis(250);
const RETRIES: usize = 240;
const BIG_BYTES: usize = 2 << 20;

/// One acked hook, as the provider knows it.
#[derive(Clone, Debug)]
pub struct Sent {
    pub body: String,
    /// Its ordering key, if it had one, and its place in the key's order.
    pub key: Option<String>,
    pub n: usize,
    /// The node that acked it (index), and whether as a duplicate of an
    /// earlier post (then the node that logged it may be another).
    pub node: usize,
    pub duplicate: bool,
    /// The sink refuses it for good: it must end in a DLQ.
    pub doomed: bool,
    /// From its first post to its ack, and when it was acked (since the
    /// provider started).
    pub refused_for: Duration,
    pub acked_at: Duration,
}

/// What the provider ends with: acked hooks by id, and those given up.
pub struct Posted {
    pub acked: HashMap<String, Sent>,
    pub unacked: usize,
    /// Every answer, for the evidence of a failure.
    pub answers: Vec<String>,
}

pub struct Provider {
    shared: Arc<Shared>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    seed: u64,
}

struct Shared {
    acked: Mutex<HashMap<String, Sent>>,
    answers: Mutex<Vec<String>>,
    unacked: AtomicUsize,
    stop: AtomicBool,
    next: AtomicUsize,
    ingest: Arc<Mutex<Vec<Option<SocketAddr>>>>,
    started: Instant,
    seed: u64,
}

impl Provider {
    pub fn start(seed: u64, ingest: Arc<Mutex<Vec<Option<SocketAddr>>>>) -> Provider {
        let shared = Arc::new(Shared {
            acked: Mutex::default(),
            answers: Mutex::default(),
            unacked: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            next: AtomicUsize::new(0),
            ingest,
            started: Instant::now(),
            seed,
        });
        let mut tasks = Vec::new();
        for w in 0..WORKERS {
            let mut rng = Rng::new(seed ^ (w as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let shared = shared.clone();
            tasks.push(tokio::spawn(async move {
                while !shared.stop.load(Ordering::SeqCst) {
                    let n = shared.next.fetch_add(1, Ordering::SeqCst);
                    let key = rng.chance(0.5).then(|| format!("k{w}-{}", rng.below(KEYS_PER_WORKER)));
                    let doomed = rng.chance(0.01);
                    let pad = "x".repeat(rng.below(400));
                    let body = format!(
                        "{{\"seed\":{seed},\"n\":{n},\"key\":{},\"doomed\":{doomed},\"pad\":\"{pad}\"}}",
                        key.as_ref().map_or("null".to_string(), |k| format!("\"{k}\""))
                    );
                    shared.deliver(&mut rng, n, key, doomed, body).await;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }));
        }
        Provider { shared, tasks: Mutex::new(tasks), seed }
    }

    /// Post a hook over the servers' message limit, retried like any other.
    pub fn post_big(&self) {
        let n = self.shared.next.fetch_add(1, Ordering::SeqCst);
        let body = format!("{{\"seed\":{},\"n\":{n},\"big\":\"{}\"}}", self.seed, "b".repeat(BIG_BYTES));
        let shared = self.shared.clone();
        let mut rng = Rng::new(self.seed ^ n as u64);
        let task = tokio::spawn(async move { shared.deliver(&mut rng, n, None, false, body).await });
        self.tasks.lock().expect("tasks").push(task);
    }

    /// Stop posting new hooks, let every started one be acked or given up.
    pub async fn finish(self) -> Posted {
        self.shared.stop.store(true, Ordering::SeqCst);
        let tasks = std::mem::take(&mut *self.tasks.lock().expect("tasks"));
        for task in tasks {
            let _ = task.await;
        }
        Posted {
            acked: std::mem::take(&mut *self.shared.acked.lock().expect("acked")),
            unacked: self.shared.unacked.load(Ordering::SeqCst),
            answers: std::mem::take(&mut *self.shared.answers.lock().expect("answers")),
        }
    }
}

impl Shared {
    /// Post until acked, at a node picked at random each time.
    async fn deliver(&self, rng: &mut Rng, n: usize, key: Option<String>, doomed: bool, body: String) {
        let first = Instant::now();
        let idempotency = format!("{}-{n}", self.seed);
        for _ in 0..RETRIES {
            let up: Vec<(usize, SocketAddr)> = {
                let ingest = self.ingest.lock().expect("ingest");
                ingest.iter().enumerate().filter_map(|(i, a)| a.map(|a| (i, a))).collect()
            };
            let Some((node, addr)) = up.get(rng.below(up.len())).copied() else {
                tokio::time::sleep(RETRY_EVERY).await;
                continue;
            };
            let headers: Vec<(&str, &str)> = key.iter().map(|k| (ORDER_HEADER, k.as_str())).collect();
            let answer = try_post_with(addr, &idempotency, &body, &headers).await;
            let at = self.started.elapsed().as_secs_f64();
            let said = match &answer {
                Some((status, answer, _)) => format!("{status} {answer}"),
                None => "no answer".to_string(),
            };
            self.answers.lock().expect("answers").push(format!("{at:.3} {idempotency} via {addr}: {said}"));
            if let Some((201, answer, _)) = answer
                && let Some(id) = answer["id"].as_str()
            {
                let sent = Sent {
                    body,
                    key,
                    n,
                    node,
                    duplicate: answer["duplicate"] == true,
                    doomed,
                    refused_for: first.elapsed(),
                    acked_at: self.started.elapsed(),
                };
                self.acked.lock().expect("acked").insert(id.to_string(), sent);
                return;
            }
            tokio::time::sleep(RETRY_EVERY).await;
        }
        self.unacked.fetch_add(1, Ordering::SeqCst);
    }
}
