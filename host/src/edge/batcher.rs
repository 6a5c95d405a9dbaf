//! The batcher: bounded queues between request handlers and the queue's
//! writer. A handler submits one record and waits for its commit; each
//! partition task takes whatever records are waiting (up to `max_batch`),
//! encodes them and hands them to the writer as one call, so the writer
//! sees few, large calls.
//!
//! A partition does not wait for its call to commit before gathering the
//! next: batches pipeline into the writer's group commits, and each record
//! is answered straight from the thread that learns its outcome (the WAL
//! syncer, once the group is on disk). Waiting would leave every record a
//! whole commit behind the one in flight, and cost a task wake-up per call.
//!
//! Admission is bounded by records and bytes, counting buffered *and*
//! in-flight records: past either bound a request is shed at once with
//! `overload` (nothing of it is stored). A record's share is released when
//! it is answered. Each record carries a deadline to get into a commit;
//! the writer refuses a call it cannot start by the earliest deadline in
//! it, and nothing of that call is written.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::problem::Checker;
use crate::queue::{Entry, EntryOutcome, EntryReply, Intake, QueueError};

/// `batcher`: the bounded queues between request handlers and the writer.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct BatcherConfig {
    /// Partitions, each gathering records into calls to the writer.
    pub partitions: usize,
    /// Records per call to the writer at most.
    pub max_batch: usize,
    /// Records buffered or in flight, at most.
    pub max_queue: usize,
    /// Bytes of bodies buffered or in flight, at most.
    pub max_queue_bytes: u64,
    /// How long a record may wait to get into a commit.
    #[serde(rename = "deadline_ms", with = "crate::settings::millis")]
    #[schema(value_type = u64)]
    pub deadline: Duration,
}

impl Default for BatcherConfig {
    fn default() -> Self {
        BatcherConfig {
            partitions: 2,
            max_batch: 256,
            max_queue: 10_000,
            max_queue_bytes: 256 << 20,
            deadline: Duration::from_secs(15),
        }
    }
}

impl BatcherConfig {
    pub fn check(&self, c: &mut Checker) {
        c.within("partitions", self.partitions as u64, 1, 64);
        c.within("max_batch", self.max_batch as u64, 1, 65_536);
        c.at_least("max_queue", self.max_queue as u64, self.max_batch as u64);
        c.at_least_ms("deadline_ms", self.deadline, 1);
    }
}

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum SubmitError {
    /// Over the batcher's bounds, or not committed by the deadline:
    /// nothing was stored.
    #[error("overload")]
    Overload,
    #[error(transparent)]
    Queue(#[from] QueueError),
}

impl SubmitError {
    /// A record the writer could not start by its deadline was shed like
    /// one over the bounds: nothing of it was stored.
    fn from_queue(e: QueueError) -> SubmitError {
        match e {
            QueueError::DeadlineExceeded => SubmitError::Overload,
            other => SubmitError::Queue(other),
        }
    }
}

/// One entry a handler submitted, waiting to get into a call.
struct Submitted {
    entry: Entry,
    deadline: Instant,
    reply: EntryReply,
}

/// Counts of admitted records, released once their commit answered.
#[derive(Debug, Default)]
struct Load {
    records: AtomicUsize,
    bytes: AtomicU64,
    shed: AtomicU64,
}

/// One admitted record's share of the load, given back when dropped: when
/// the record is answered, or when its answer can no longer come.
struct Admission {
    load: Arc<Load>,
    bytes: u64,
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.load.records.fetch_sub(1, Ordering::AcqRel);
        self.load.bytes.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

pub struct Batcher {
    partitions: Vec<mpsc::UnboundedSender<Submitted>>,
    next: AtomicUsize,
    load: Arc<Load>,
    config: BatcherConfig,
}

impl Batcher {
    /// Start one task per partition. Must run inside a tokio runtime.
    pub fn start(intake: Intake, config: BatcherConfig) -> Batcher {
        let load = Arc::new(Load::default());
        let partitions = (0..config.partitions.max(1))
            .map(|_| {
                let (tx, rx) = mpsc::unbounded_channel();
                tokio::spawn(partition(intake.clone(), rx, config.max_batch.max(1)));
                tx
            })
            .collect();
        Batcher { partitions, next: AtomicUsize::new(0), load, config }
    }

    /// Submit one hook and wait for its commit.
    pub async fn submit(&self, entry: Entry) -> Result<EntryOutcome, SubmitError> {
        let Some(admission) = self.admit(entry.envelope.size()) else {
            self.load.shed.fetch_add(1, Ordering::Relaxed);
            return Err(SubmitError::Overload);
        };
        let (reply, answer) = oneshot::channel();
        let reply: EntryReply = Box::new(move |outcome| {
            // Released before the caller hears, so an answered caller's
            // next request finds room.
            drop(admission);
            let _ = reply.send(outcome.map_err(SubmitError::from_queue));
        });
        let record = Submitted { entry, deadline: Instant::now() + self.config.deadline, reply };
        let index = self.next.fetch_add(1, Ordering::Relaxed) % self.partitions.len();
        if let Err(mpsc::error::SendError(record)) = self.partitions[index].send(record) {
            (record.reply)(Err(QueueError::Closed));
        }
        answer.await.map_err(|_| SubmitError::Queue(QueueError::Closed))?
    }

    fn admit(&self, bytes: u64) -> Option<Admission> {
        let records = self.load.records.fetch_add(1, Ordering::AcqRel) + 1;
        let total = self.load.bytes.fetch_add(bytes, Ordering::AcqRel) + bytes;
        let admission = Admission { load: self.load.clone(), bytes };
        (records <= self.config.max_queue && total <= self.config.max_queue_bytes).then_some(admission)
    }

    /// Records buffered or in flight now.
    pub fn queued(&self) -> usize {
        self.load.records.load(Ordering::Relaxed)
    }

    /// Requests shed since start.
    pub fn shed(&self) -> u64 {
        self.load.shed.load(Ordering::Relaxed)
    }
}

async fn partition(intake: Intake, mut rx: mpsc::UnboundedReceiver<Submitted>, max_batch: usize) {
    while let Some(first) = rx.recv().await {
        let mut records = vec![first];
        while records.len() < max_batch {
            match rx.try_recv() {
                Ok(record) => records.push(record),
                Err(_) => break,
            }
        }
        // A record whose caller left is still committed: it may be the
        // provider's only copy until it retries, and dedupe absorbs that.
        let now = Instant::now();
        let (late, records): (Vec<Submitted>, Vec<Submitted>) = records.into_iter().partition(|r| r.deadline <= now);
        for record in late {
            (record.reply)(Err(QueueError::DeadlineExceeded));
        }
        let Some(deadline) = records.iter().map(|r| r.deadline).min() else { continue };
        let entries = records.into_iter().map(|r| (r.entry, r.reply)).collect();
        intake.enqueue_each(entries, Some(deadline)).await;
    }
}
