//! The `dual` commit path: each group's batch appended to the group log
//! (synced), then written to the store (synced); and the checkpoint that
//! drops the log's segments once a store flush covers them.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::plan::Group;
use super::{CommitPath, Writer};
use crate::intake::IntakeLog;
use crate::queue::Refusal;
use crate::store::Durability;

/// `dual`'s group log, and the checkpoint that truncates it.
pub(super) struct Dual {
    pub(super) log: Arc<std::sync::Mutex<Box<dyn IntakeLog>>>,
    /// A checkpoint (store flush, then log truncation) is running on its
    /// own thread, off the commit path.
    checkpointing: Arc<std::sync::atomic::AtomicBool>,
    pub(super) checkpoint_thread: Option<std::thread::JoinHandle<()>>,
}

impl Dual {
    pub(super) fn new(log: Box<dyn IntakeLog>) -> Dual {
        Dual {
            log: Arc::new(std::sync::Mutex::new(log)),
            checkpointing: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            checkpoint_thread: None,
        }
    }
}

pub(super) fn lock(log: &std::sync::Mutex<Box<dyn IntakeLog>>) -> std::sync::MutexGuard<'_, Box<dyn IntakeLog>> {
    log.lock().unwrap_or_else(|e| e.into_inner())
}

impl Writer {
    pub(super) fn write_copies(&mut self, group: &Group) -> Result<(), Refusal> {
        let log = match &self.path {
            CommitPath::Dual(dual) => Some(&dual.log),
            _ => None,
        };
        // Only batches with hooks go to the intake log: it is a copy of what
        // was acked. (A batch of extra ops alone — a cursor, pen deletes —
        // would be replayed again on every boot, with no seq to tell.)
        if let Some(log) = log.filter(|_| group.hooks > 0) {
            let mut log = lock(log);
            if log.bytes() > self.limits.intake_max_bytes {
                tracing::warn!(bytes = log.bytes(), "intake log is over its bound, waiting for a checkpoint");
                return Err(Refusal::IntakePending);
            }
            let last_seq = group.next_seq.saturating_sub(1).max(group.first_seq);
            if let Err(e) = log.append(group.first_seq, last_seq, &group.batch.encode()) {
                tracing::error!("intake log append failed: {e}");
                return Err(Refusal::IntakeUnavailable);
            }
        }
        if let Err(e) = self.store.write(&group.batch, Durability::Synced) {
            tracing::error!("store commit failed: {e}");
            self.stats.write_failed.store(true, Ordering::Release);
            return Err(match log {
                Some(_) => Refusal::Half { missing: crate::queue::Side::Store, reason: e.to_string() },
                None => Refusal::StoreUnavailable,
            });
        }
        Ok(())
    }

    /// Once the intake log has closed a segment, flush the store's
    /// memtables and drop the segments the flush covers — on a thread of
    /// its own, so commits do not wait for the flush.
    pub(super) fn checkpoint(&mut self) {
        let CommitPath::Dual(dual) = &mut self.path else { return };
        if dual.checkpointing.load(Ordering::Acquire) || !lock(&dual.log).wants_checkpoint() {
            return;
        }
        if let Some(done) = dual.checkpoint_thread.take() {
            let _ = done.join();
        }
        dual.checkpointing.store(true, Ordering::Release);
        // Every seq below this is in a write the flush will cover.
        let through = self.next_seq;
        let (store, log, running, stats) =
            (self.store.clone(), dual.log.clone(), dual.checkpointing.clone(), self.stats.clone());
        let spawned = std::thread::Builder::new().name("ankusa-checkpoint".into()).spawn(move || {
            let result = store
                .flush()
                .map_err(|e| e.to_string())
                .and_then(|()| lock(&log).truncate_below(through).map_err(|e| e.to_string()));
            match result {
                Ok(_) => {
                    stats.checkpoints.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => tracing::warn!("intake log checkpoint failed (it will be tried again): {e}"),
            }
            running.store(false, Ordering::Release);
        });
        match spawned {
            Ok(thread) => dual.checkpoint_thread = Some(thread),
            Err(e) => {
                tracing::warn!("cannot start a checkpoint: {e}");
                dual.checkpointing.store(false, Ordering::Release);
            }
        }
    }
}
