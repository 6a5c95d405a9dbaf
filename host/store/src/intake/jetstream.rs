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
//! The writer calls this from its own thread: the publishes of a round go
//! out together on the node's client, in order, and their acks are awaited
//! together on the runtime while the writer goes on to the next round.
//! A hook over the servers' message limit goes through the bodies bucket
//! first (`bodies`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use async_nats::jetstream::context::{PublishAckFuture, PublishErrorKind};
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::stream::LastRawMessageErrorKind;
use async_nats::jetstream::{self, stream::Stream};
use tokio::runtime::Handle;

use super::bodies::{BODY_HEADER, Bodies, BodyError, object_name};
use super::reader::{Read, SubjectReader};
use super::{Appended, HookLog, HookRecord, IntakeError, LoggedHook, Sent};

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
    bodies: Bodies,
}

/// The JetStream a log writes to: the client, the stream, and the bucket
/// of hooks too large for one message.
#[derive(Clone)]
pub struct Streams {
    pub context: jetstream::Context,
    pub stream: Stream,
    pub bodies: Bodies,
}

impl JetStreamLog {
    /// A log of `store`'s hooks on `subject`, publishing from `runtime`.
    pub fn new(
        streams: Streams,
        runtime: Handle,
        subject: String,
        store: u64,
        timeout: Duration,
        stats: Arc<PublishStats>,
    ) -> JetStreamLog {
        let Streams { context, stream, bodies } = streams;
        JetStreamLog { context, stream, runtime, subject, store: format!("{store:016x}"), timeout, stats, bodies }
    }

    /// Publish every hook, in order, without awaiting an ack: one pending
    /// answer per hook. A hook refused before it left (a body that did not
    /// go, a connection that refused it) has its answer already.
    async fn publish_all(&self, hooks: &[HookRecord]) -> Vec<Pending> {
        // Hooks too large for one message: their bodies first, all of the
        // round's at once, then messages naming them, in order with the
        // rest (a taker reads a subject in order). A body that did not go
        // is its hook's answer; nothing of it is in the stream.
        let puts = hooks.iter().filter(|hook| self.bodies.too_large(hook.payload.len())).map(|hook| async move {
            let name = object_name(&self.store, hook.seq);
            let put = self.bodies.put(&name, &hook.payload).await;
            (hook.seq, put.map(|()| name))
        });
        let mut put: std::collections::HashMap<u64, Result<String, String>> =
            futures_util::future::join_all(puts).await.into_iter().collect();
        let mut pending = Vec::with_capacity(hooks.len());
        for hook in hooks {
            let mut headers = HeaderMap::new();
            headers.insert(STORE_HEADER, self.store.as_str());
            headers.insert(SEQ_HEADER, hook.seq.to_string().as_str());
            let mut payload = hook.payload.clone();
            match put.remove(&hook.seq) {
                None => {}
                Some(Ok(name)) => {
                    headers.insert(BODY_HEADER, name.as_str());
                    payload = Vec::new();
                }
                Some(Err(reason)) => {
                    pending.push(Pending::Answered(Appended::Failed { reason, sent: false }));
                    continue;
                }
            }
            let mut publish = PublishMessage::build().payload(payload.into()).headers(headers);
            if let Some(id) = &hook.msg_id {
                publish = publish.message_id(id.as_str());
            }
            pending.push(match self.context.send_publish(self.subject.clone(), publish).await {
                Ok(ack) => Pending::Ack(ack),
                Err(e) => {
                    // Refused before it left, but for a timeout handing it
                    // to the connection (it may still go out).
                    let sent = e.kind() == PublishErrorKind::TimedOut;
                    Pending::Answered(Appended::Failed { reason: e.to_string(), sent })
                }
            });
        }
        pending
    }

    /// This store's hooks on this node's subject past `position`, and the
    /// last position read.
    async fn read_own(&self, position: u64) -> Result<(Vec<LoggedHook>, u64), IntakeError> {
        let unavailable = IntakeError::Unavailable;
        let through = last_position(&self.stream, &self.subject).await.map_err(unavailable)?;
        let mut reader =
            SubjectReader::open(Read::Exact, &self.stream, &self.subject, position + 1, through, self.timeout)
                .await
                .map_err(unavailable)?;
        let mut hooks = Vec::new();
        let mut last = position;
        while let Some(message) = reader.next().await.map_err(unavailable)? {
            last = message.position;
            match logged_by(&message.headers) {
                (store, _) if store != self.store => {}
                (_, Some(seq)) => {
                    let payload = self
                        .bodies
                        .payload(&message.headers, &message.payload)
                        .await
                        .map_err(|e| unavailable(e.to_string()))?;
                    hooks.push(LoggedHook { position: message.position, seq, payload })
                }
                (_, None) => tracing::error!(
                    subject = self.subject,
                    position = message.position,
                    "a logged hook has no seq; skipped"
                ),
            }
        }
        Ok((hooks, last.max(through)))
    }
}

/// A published hook awaiting its ack, or its answer already.
enum Pending {
    Ack(PublishAckFuture),
    Answered(Appended),
}

/// What turns a round's acks into answers, off the writer's thread.
struct Acks {
    stream: Stream,
    bodies: Bodies,
    store: String,
    timeout: Duration,
    stats: Arc<PublishStats>,
}

impl Acks {
    /// Every ack of the round by one deadline (after a lost connection
    /// every ack fails by it, not one timeout after another); a failure of
    /// one is that hook's answer, the others keep theirs, so a hook the
    /// stream took is never reported as refused.
    async fn collect(&self, pending: Vec<Pending>) -> Vec<Appended> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let mut appended = Vec::with_capacity(pending.len());
        for hook in pending {
            let ack = match hook {
                Pending::Answered(answer) => {
                    appended.push(answer);
                    continue;
                }
                Pending::Ack(ack) => ack,
            };
            appended.push(match tokio::time::timeout_at(deadline, ack).await {
                Ok(Ok(ack)) if ack.duplicate => self.original(ack.sequence).await,
                Ok(Ok(ack)) => Appended::Stored { position: ack.sequence },
                Ok(Err(e)) => Appended::Failed { reason: e.to_string(), sent: true },
                Err(_) => Appended::Failed { reason: format!("no publish ack within {:?}", self.timeout), sent: true },
            });
        }
        appended
    }

    /// The original a duplicate ack names. Not read this time, the hook's
    /// answer is a failure that may have left something (`sent`): only a
    /// second append can tell what the log holds. A body the bucket no
    /// longer holds never will be read: `Unreadable`.
    async fn original(&self, position: u64) -> Appended {
        let original = match self.stream.get_raw_message(position).await {
            Ok(original) => original,
            Err(e) => return Appended::Failed { reason: format!("reading duplicate {position}: {e}"), sent: true },
        };
        let (store, seq) = logged_by(&original.headers);
        let logged_seq = seq.filter(|_| store == self.store);
        match self.bodies.payload(&original.headers, &original.payload).await {
            Ok(payload) => Appended::Duplicate { original: payload, position, logged_seq },
            Err(BodyError::Missing(reason)) => Appended::Unreadable { position, logged_seq, reason },
            Err(e) => Appended::Failed { reason: format!("reading duplicate {position}: {e}"), sent: true },
        }
    }

    /// Count a round answered `started` ago.
    fn count(&self, answers: &[Appended], started: Instant) {
        let took = started.elapsed();
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let stats = &self.stats;
        stats.rounds.fetch_add(1, Ordering::Relaxed);
        stats.micros.fetch_add(micros, Ordering::Relaxed);
        stats.last_micros.store(micros, Ordering::Relaxed);
        let metrics = crate::metrics::metrics();
        metrics.fleet_publish_seconds.observe(took.as_secs_f64());
        metrics.fleet_publish_hooks.observe(answers.len() as f64);
        let count = |f: fn(&Appended) -> bool| answers.iter().filter(|a| f(a)).count() as u64;
        stats.hooks.fetch_add(count(|a| !matches!(a, Appended::Failed { .. })), Ordering::Relaxed);
        stats.duplicates.fetch_add(
            count(|a| matches!(a, Appended::Duplicate { .. } | Appended::Unreadable { .. })),
            Ordering::Relaxed,
        );
        let failed = count(|a| matches!(a, Appended::Failed { .. }));
        if let Some(Appended::Failed { reason, .. }) = answers.iter().find(|a| matches!(a, Appended::Failed { .. })) {
            stats.failures.fetch_add(1, Ordering::Relaxed);
            metrics.fleet_publish_failures.inc();
            tracing::warn!(failed, of = answers.len(), "JetStream publish failed: {reason}");
        }
    }
}

impl HookLog for JetStreamLog {
    /// The round's publishes leave from the writer's thread, in order; its
    /// acks are awaited on the runtime, so the next round can leave first.
    fn send(&mut self, hooks: &[HookRecord]) -> Sent {
        if hooks.is_empty() {
            return Sent::answered(Vec::new());
        }
        let started = Instant::now();
        let pending = self.runtime.block_on(self.publish_all(hooks));
        let (answer, sent) = Sent::channel(hooks.len());
        let acks = Acks {
            stream: self.stream.clone(),
            bodies: self.bodies.clone(),
            store: self.store.clone(),
            timeout: self.timeout,
            stats: self.stats.clone(),
        };
        self.runtime.spawn(async move {
            let answers = acks.collect(pending).await;
            acks.count(&answers, started);
            let _ = answer.send(answers);
        });
        sent
    }

    /// The stream's creation time: a stream deleted and made again starts
    /// its positions over.
    fn identity(&self) -> String {
        stream_identity(self.stream.cached_info())
    }

    fn logged_since(&self, position: u64) -> Result<(Vec<LoggedHook>, u64), IntakeError> {
        self.runtime.block_on(self.read_own(position))
    }
}

/// The store and seq a logged hook's headers name (empty and `None` when
/// absent: not a hook a store of ours logged).
pub fn logged_by(headers: &HeaderMap) -> (String, Option<u64>) {
    let header = |name: &str| headers.get(name).map(|v| v.as_str().to_string());
    (header(STORE_HEADER).unwrap_or_default(), header(SEQ_HEADER).and_then(|seq| seq.parse().ok()))
}

/// The last position of `subject` in `stream` (0: none).
pub async fn last_position(stream: &Stream, subject: &str) -> Result<u64, String> {
    match stream.get_last_raw_message_by_subject(subject).await {
        Ok(message) => Ok(message.sequence),
        Err(e) if matches!(e.kind(), LastRawMessageErrorKind::NoMessageFound) => Ok(0),
        Err(e) => Err(format!("last message of {subject}: {e}")),
    }
}

/// What names a stream itself: its name and creation time, since a stream
/// deleted and made again starts its positions over. A position kept from
/// a stream is read only against the same identity.
pub fn stream_identity(info: &async_nats::jetstream::stream::Info) -> String {
    format!("{}:{}", info.config.name, info.created.unix_timestamp_nanos())
}
