//! The JetStream intake log (`wal.mode: fleet`): each committed hook is
//! one message on this node's subject of a stream replicated to a quorum,
//! published before the store write. JetStream answers a publish only once
//! a quorum of its servers holds the message, so an ack survives the loss
//! of this host.
//!
//! A message carries the hook's message id (`Nats-Msg-Id`): within the
//! stream's duplicate window, a second publish with the same id adds
//! nothing and is answered as a duplicate, whichever node sends it. That
//! is the fleet-wide dedupe; the original is read back from the stream.
//!
//! The writer calls this from its own thread; the publishes of a group go
//! out together on the node's client and their acks are awaited together.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::{self, stream::Stream};
use tokio::runtime::Handle;

use super::{Appended, Framing, HookRecord, IntakeError, IntakeLog, Record};

/// Header naming the store a hook was committed to (its incarnation).
pub const STORE_HEADER: &str = "Ankusa-Store";
/// Header carrying the hook's seq in that store.
pub const SEQ_HEADER: &str = "Ankusa-Seq";

/// Publish figures, shared with the operator surface.
#[derive(Debug, Default)]
pub struct PublishStats {
    /// Publish rounds (one per group with hooks).
    pub rounds: AtomicU64,
    pub hooks: AtomicU64,
    pub duplicates: AtomicU64,
    pub failures: AtomicU64,
    /// Sum of round latencies, microseconds.
    pub micros: AtomicU64,
    /// The last round's latency, microseconds.
    pub last_micros: AtomicU64,
}

pub struct JetStreamLog {
    context: jetstream::Context,
    stream: Stream,
    runtime: Handle,
    /// This node's hook subject.
    subject: String,
    /// The local store's incarnation, as a header value.
    store: String,
    timeout: Duration,
    stats: Arc<PublishStats>,
}

impl JetStreamLog {
    pub fn new(
        context: jetstream::Context,
        stream: Stream,
        runtime: Handle,
        subject: String,
        store: u64,
        timeout: Duration,
        stats: Arc<PublishStats>,
    ) -> JetStreamLog {
        JetStreamLog { context, stream, runtime, subject, store: format!("{store:016x}"), timeout, stats }
    }

    async fn publish_all(&self, hooks: &[HookRecord]) -> Result<Vec<Appended>, IntakeError> {
        let mut acks = Vec::with_capacity(hooks.len());
        for hook in hooks {
            let mut headers = HeaderMap::new();
            headers.insert(STORE_HEADER, self.store.as_str());
            headers.insert(SEQ_HEADER, hook.seq.to_string().as_str());
            let mut publish = PublishMessage::build().payload(hook.payload.clone().into()).headers(headers);
            if let Some(id) = &hook.msg_id {
                publish = publish.message_id(id.as_str());
            }
            let ack = self
                .context
                .send_publish(self.subject.clone(), publish)
                .await
                .map_err(|e| IntakeError::Unavailable(e.to_string()))?;
            acks.push(ack);
        }
        let mut appended = Vec::with_capacity(acks.len());
        for ack in acks {
            let ack = tokio::time::timeout(self.timeout, ack)
                .await
                .map_err(|_| IntakeError::Unavailable(format!("no publish ack within {:?}", self.timeout)))?
                .map_err(|e| IntakeError::Unavailable(e.to_string()))?;
            appended.push(if ack.duplicate {
                let original = self
                    .stream
                    .get_raw_message(ack.sequence)
                    .await
                    .map_err(|e| IntakeError::Unavailable(format!("reading duplicate {}: {e}", ack.sequence)))?;
                Appended::Duplicate { original: original.payload.to_vec() }
            } else {
                Appended::Stored { position: ack.sequence }
            });
        }
        Ok(appended)
    }
}

impl IntakeLog for JetStreamLog {
    fn framing(&self) -> Framing {
        Framing::Hooks
    }

    fn append(&mut self, _first_seq: u64, _last_seq: u64, _payload: &[u8]) -> Result<(), IntakeError> {
        Err(IntakeError::Framing { log: "JetStream", keeps: "hooks", given: "a group" })
    }

    fn append_hooks(&mut self, hooks: &[HookRecord]) -> Result<Vec<Appended>, IntakeError> {
        if hooks.is_empty() {
            return Ok(Vec::new());
        }
        let started = Instant::now();
        let appended = self.runtime.block_on(self.publish_all(hooks));
        let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        let stats = &self.stats;
        stats.rounds.fetch_add(1, Ordering::Relaxed);
        stats.micros.fetch_add(micros, Ordering::Relaxed);
        stats.last_micros.store(micros, Ordering::Relaxed);
        let metrics = crate::metrics::metrics();
        metrics.fleet_publish_seconds.observe(started.elapsed().as_secs_f64());
        metrics.fleet_publish_hooks.observe(hooks.len() as f64);
        match &appended {
            Ok(answers) => {
                stats.hooks.fetch_add(answers.len() as u64, Ordering::Relaxed);
                let duplicates = answers.iter().filter(|a| matches!(a, Appended::Duplicate { .. })).count();
                stats.duplicates.fetch_add(duplicates as u64, Ordering::Relaxed);
            }
            Err(e) => {
                stats.failures.fetch_add(1, Ordering::Relaxed);
                metrics.fleet_publish_failures.inc();
                tracing::warn!("JetStream publish failed: {e}");
            }
        }
        appended
    }

    /// The stream's limits bound it, not the node.
    fn bytes(&self) -> u64 {
        0
    }

    fn wants_checkpoint(&self) -> bool {
        false
    }

    fn truncate_below(&mut self, _seq: u64) -> Result<(), IntakeError> {
        Ok(())
    }

    /// Hooks are taken back from the stream by a takeover, not replayed
    /// into the store as batches.
    fn replay(&self) -> Result<Vec<Record>, IntakeError> {
        Ok(Vec::new())
    }
}
