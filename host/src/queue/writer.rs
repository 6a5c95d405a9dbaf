//! The writer: the one task that assigns seqs and commits.
//!
//! Callers prepare everything that needs no seq (encoded hooks, the rows
//! per sink) and queue a call. The writer takes every call waiting, across
//! partitions, refuses those whose deadline passed or whose caller left
//! (before anything is written: no seq is consumed), re-reads the dedupe
//! keys of the whole group at once, assigns seqs, and commits the group in
//! one synced batch. A call it has started is never abandoned: its caller
//! gets the outcome of that commit, whatever it is.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::dedupe::{self, Original};
use super::envelope::Envelope;
use super::rows::{DeliveryRow, RowState};
use super::{EntryOutcome, QueueError};
use crate::store::keys::KeyBuf;
use crate::store::{Batch, Cf, Durability, RocksStore, Store};

/// How long a dedupe key stays live.
pub const DEFAULT_DEDUPE_TTL_MS: u64 = 72 * 3600 * 1000;
/// Calls merged into one commit at most.
const MAX_GROUP_CALLS: usize = 1024;

/// One hook, prepared by its caller.
pub struct Prepared {
    pub envelope: Envelope,
    pub encoded: Vec<u8>,
    /// (sink index, component sha256) for every sink of the source.
    pub sinks: Vec<(u16, String)>,
    /// The stored dedupe key, if the hook carries one.
    pub dedupe: Option<String>,
}

pub struct Call {
    pub entries: Vec<Prepared>,
    pub deadline: Option<Instant>,
    pub now_ms: u64,
    pub reply: oneshot::Sender<Result<Vec<EntryOutcome>, QueueError>>,
}

/// Counters of the writer, for metrics and tests.
#[derive(Debug, Default)]
pub struct WriterStats {
    /// Synced writes issued.
    pub commits: AtomicU64,
    /// Calls committed.
    pub calls: AtomicU64,
    /// The seq the next committed hook gets.
    pub next_seq: AtomicU64,
}

pub struct Spawned {
    pub calls: mpsc::Sender<Call>,
    pub stats: Arc<WriterStats>,
    /// Ends once every sender is dropped and the last group committed.
    pub task: tokio::task::JoinHandle<()>,
}

pub fn spawn(store: Arc<RocksStore>, next_seq: u64, ttl_ms: u64) -> Spawned {
    let (calls, rx) = mpsc::channel(4096);
    let stats = Arc::new(WriterStats::default());
    stats.next_seq.store(next_seq, Ordering::Relaxed);
    let task = tokio::spawn(run(store, rx, next_seq, ttl_ms, stats.clone()));
    Spawned { calls, stats, task }
}

async fn run(
    store: Arc<RocksStore>,
    mut rx: mpsc::Receiver<Call>,
    mut next_seq: u64,
    ttl_ms: u64,
    stats: Arc<WriterStats>,
) {
    while let Some(first) = rx.recv().await {
        let mut group = vec![first];
        while group.len() < MAX_GROUP_CALLS {
            match rx.try_recv() {
                Ok(call) => group.push(call),
                Err(_) => break,
            }
        }
        // Refuse what cannot start; nothing of it is written.
        let now = Instant::now();
        let mut started = Vec::with_capacity(group.len());
        for call in group {
            if call.reply.is_closed() {
                continue;
            }
            if call.deadline.is_some_and(|d| d <= now) {
                let _ = call.reply.send(Err(QueueError::DeadlineExceeded));
                continue;
            }
            started.push(call);
        }
        if started.is_empty() {
            continue;
        }
        let store_for_commit = store.clone();
        let committed = tokio::task::spawn_blocking(move || {
            let result = commit(&store_for_commit, &started, next_seq, ttl_ms);
            (started, result)
        })
        .await;
        let Ok((started, result)) = committed else {
            // The commit thread panicked: nobody can be told it is durable.
            continue;
        };
        stats.commits.fetch_add(1, Ordering::Relaxed);
        stats.calls.fetch_add(started.len() as u64, Ordering::Relaxed);
        match result {
            Ok((outcomes, new_next)) => {
                next_seq = new_next;
                stats.next_seq.store(next_seq, Ordering::Relaxed);
                for (call, outcome) in started.into_iter().zip(outcomes) {
                    let _ = call.reply.send(Ok(outcome));
                }
            }
            Err(e) => {
                for call in started {
                    let _ = call.reply.send(Err(QueueError::Store(e.to_string())));
                }
            }
        }
    }
}

type Commit = (Vec<Vec<EntryOutcome>>, u64);

/// Build and write the group's batch; returns each call's outcomes and the
/// next seq after it.
fn commit(
    store: &RocksStore,
    calls: &[Call],
    mut next_seq: u64,
    ttl_ms: u64,
) -> Result<Commit, crate::store::StoreError> {
    // Re-read every dedupe key of the group in one go: a caller's view may
    // be stale, and two calls in this group may carry the same key.
    let mut keys = Vec::new();
    for call in calls {
        for entry in &call.entries {
            if let Some(stored) = &entry.dedupe {
                keys.push(dedupe::key(&entry.envelope.tenant_id, &entry.envelope.source_id, stored));
            }
        }
    }
    let mut live: HashMap<Vec<u8>, Original> = HashMap::new();
    for (key, value) in keys.iter().zip(store.multi_get(Cf::Dedupe, &keys)?) {
        if let Some(original) = value.and_then(|v| Original::decode(&v).ok()) {
            live.insert(key.clone(), original);
        }
    }

    let mut batch = Batch::new();
    let mut outcomes = Vec::with_capacity(calls.len());
    for call in calls {
        let mut call_outcomes = Vec::with_capacity(call.entries.len());
        for entry in &call.entries {
            let env = &entry.envelope;
            let dedupe_key = entry.dedupe.as_ref().map(|stored| dedupe::key(&env.tenant_id, &env.source_id, stored));
            if let Some(original) = dedupe_key.as_ref().and_then(|k| live.get(k)).filter(|o| o.expires_at > call.now_ms)
            {
                call_outcomes.push(EntryOutcome::Duplicate(original_envelope(store, original, env)?));
                continue;
            }
            let seq = next_seq;
            next_seq += 1;
            batch.put(Cf::Hooks, KeyBuf::new().u64(seq).build(), entry.encoded.clone());
            for (index, component) in &entry.sinks {
                let row = DeliveryRow {
                    seq,
                    sink: *index,
                    tenant: env.tenant_id.clone(),
                    source: env.source_id.clone(),
                    component: component.clone(),
                    bytes: env.size(),
                    attempts: 0,
                    replay_id: None,
                    state: RowState::Due { due_at: call.now_ms },
                };
                batch.put(Cf::Deliveries, row.key(), row.encode());
                for index_key in row.index_keys() {
                    batch.put(Cf::Index, index_key, Vec::new());
                }
            }
            let rows = entry.sinks.len() as i64;
            batch.add_counter(super::counter_key(None, "pending"), rows);
            batch.add_counter(super::counter_key(Some(&env.tenant_id), "pending"), rows);
            batch.add_counter(super::counter_key(None, "bytes"), rows * env.size() as i64);
            batch.add_counter(super::counter_key(Some(&env.tenant_id), "bytes"), rows * env.size() as i64);
            if let (Some(key), Some(stored)) = (dedupe_key, &entry.dedupe) {
                let expires_at = call.now_ms + ttl_ms;
                let original = Original { seq, expires_at, id: env.id.clone() };
                batch.put(Cf::Dedupe, key.clone(), original.encode());
                batch.put(
                    Cf::Dedupe,
                    dedupe::expiry_key(expires_at, &env.tenant_id, &env.source_id, stored),
                    Vec::new(),
                );
                batch.add_counter(super::counter_key(Some(&env.tenant_id), "dedupe_keys"), 1);
                batch.add_counter(super::counter_key(None, "dedupe_keys"), 1);
                live.insert(key, original);
            }
            call_outcomes.push(EntryOutcome::Committed(Envelope { seq, ..env.clone() }));
        }
        outcomes.push(call_outcomes);
    }
    batch.put(Cf::Meta, RocksStore::seq_marker_key().to_vec(), next_seq.to_be_bytes().to_vec());
    store.write(&batch, Durability::Synced)?;
    Ok((outcomes, next_seq))
}

/// The envelope a duplicate answers with: the original hook if it is still
/// stored, else what the dedupe entry remembers of it (id and seq).
fn original_envelope(
    store: &RocksStore,
    original: &Original,
    incoming: &Envelope,
) -> Result<Envelope, crate::store::StoreError> {
    if let Some(bytes) = store.get(Cf::Hooks, &KeyBuf::new().u64(original.seq).build())? {
        if let Ok(envelope) = Envelope::decode(original.seq, &bytes) {
            return Ok(envelope);
        }
        tracing::warn!(
            seq = original.seq,
            "stored hook does not decode; answering the duplicate from its dedupe entry"
        );
    }
    let remembered =
        Envelope::new(original.id.clone(), incoming.source_id.clone(), incoming.tenant_id.clone(), 0, Vec::new());
    Ok(Envelope { seq: original.seq, ..remembered })
}
