//! Opening a queue on its engines: the intake log's replay completed into
//! the store, counters checked, the next seq recovered, the writer and its
//! recovery started; closing it; and a store rebuilt from an intake log.

use std::path::Path;
use std::sync::Arc;

use super::{Core, Queue, QueueConfig, QueueError, WalMode, commit, due_floor, gaps, recount, recovery, tenants};
use crate::intake::{Intake, IntakeLog, IntakeOptions, Replay};
use crate::store::{Batch, Cf, Durability, Scan, Store, StoreOptions};

/// The storage a queue runs on: a store, and in `dual` mode an intake log
/// with what it replayed when it opened (in `fleet` mode the hook log).
pub struct Engines {
    pub store: Arc<dyn Store>,
    pub intake: Option<Intake>,
}

impl Engines {
    /// The embedded engines: RocksDB at `path`, and in `dual` mode the
    /// segment log in `config.intake_dir`.
    pub fn embedded(path: &Path, config: &QueueConfig) -> Result<Engines, QueueError> {
        let options = StoreOptions {
            faults: config.store_faults.clone(),
            wal_max_bytes: config.store_wal_max_bytes,
            ..StoreOptions::new(path)
        };
        let store = crate::store::open_embedded(&options)?;
        let intake = match config.wal {
            WalMode::Dual => {
                let dir = config
                    .intake_dir
                    .clone()
                    .ok_or_else(|| QueueError::Intake("wal.mode dual needs an intake log directory".into()))?;
                let options = IntakeOptions { dir, segment_bytes: config.intake_segment_bytes };
                let (log, replay) = crate::intake::open(options).map_err(|e| QueueError::Intake(e.to_string()))?;
                Some(Intake::Groups(log, replay))
            }
            // `fleet`'s log is JetStream, plugged in by the node.
            WalMode::Disk | WalMode::None | WalMode::Fleet => None,
        };
        Ok(Engines { store, intake })
    }
}

/// Whether `store` holds any delivery row (a check before a mode change).
pub fn has_rows(store: &dyn Store) -> Result<bool, QueueError> {
    Ok(!store.scan(&Scan::prefix(Cf::Deliveries, &[], 1))?.is_empty())
}

impl Queue {
    /// Open (or create) the queue on the embedded engines at `path` and
    /// start its writer (see [`Queue::start`]).
    pub fn open(path: &Path, config: QueueConfig) -> Result<Queue, QueueError> {
        Queue::start(Engines::embedded(path, &config)?, config)
    }

    /// Start the queue on `engines`. In `dual` mode the intake log's replay
    /// comes first: batches it has that the store lacks (a half commit
    /// before a crash) are written to the store.
    pub fn start(engines: Engines, config: QueueConfig) -> Result<Queue, QueueError> {
        let Engines { store, intake } = engines;
        let intake = match intake {
            Some(Intake::Groups(log, replay)) => {
                Some(Intake::Groups(complete_from_intake(store.as_ref(), log, &replay)?, Replay::default()))
            }
            other => other,
        };
        recount::repair_counters_if_damaged(store.as_ref())?;
        let next_seq = commit::recover_next_seq(store.as_ref())?;
        let tenants = Arc::new(tenants::TenantBook::load(store.as_ref())?);
        let limits = commit::Limits {
            dedupe_ttl_ms: config.dedupe_ttl_ms,
            dedupe_max_entries: config.dedupe_max_entries,
            dedupe_max_entries_per_tenant: config.dedupe_max_entries_per_tenant,
            tenants_max: config.tenants_max,
            intake_max_bytes: config.intake_max_bytes,
            archive: config.archive_retention_ms.is_some(),
        };
        let due_floor = Arc::new(due_floor::DueFloor::default());
        let gaps = gaps::Gaps::load(store.as_ref())?;
        let spawned = commit::spawn(commit::WriterParts {
            due_floor: due_floor.clone(),
            store: store.clone(),
            next_seq,
            limits,
            tenants: tenants.clone(),
            intake,
        })?;
        let recovery = recovery::Recovery::spawn(spawned.messages.downgrade(), spawned.stats.clone(), store.clone())
            .map_err(|e| QueueError::Os(format!("cannot start the recovery thread: {e}")))?;
        let core = Core {
            store,
            outcome_log: std::sync::OnceLock::new(),
            sink_names: std::sync::OnceLock::new(),
            claims_paused: std::sync::atomic::AtomicBool::new(false),
            lease_proof: std::sync::Mutex::new(None),
            writer: std::sync::RwLock::new(Some(spawned.messages)),
            stats: spawned.stats,
            tenants,
            config,
            transitions: std::sync::Mutex::new(()),
            pen: std::sync::Mutex::new(()),
            pen_changes: std::sync::atomic::AtomicU64::new(0),
            due_floor,
            gaps,
            ready: Default::default(),
        };
        Ok(Queue { core: Arc::new(core), recovery: Some(recovery), writer_thread: Some(spawned.thread) })
    }

    /// Stop the writer after the calls already queued, and release the
    /// store (so it can be opened again, by this process or another, once
    /// no handle holds it), without blocking the async runtime. A handle
    /// used after this is told `Closed`.
    pub async fn close(mut self) {
        let recovery = self.recovery.take();
        let _ = tokio::task::spawn_blocking(move || drop(recovery)).await;
        let thread = self.writer_thread.take();
        let store = self.store.clone();
        self.stop_taking_calls();
        let _ = tokio::task::spawn_blocking(move || {
            if let Some(thread) = thread {
                let _ = thread.join();
            }
            // A clean stop leaves nothing in the store's WAL to replay, so
            // the next start is quick.
            if let Err(e) = store.flush() {
                tracing::warn!("flushing the store on close failed: {e}");
            }
        })
        .await;
    }
}

impl Drop for Queue {
    /// A queue dropped without `close` still stops its writer before the
    /// store goes: the database is never closed under a running thread
    /// (nor left open while the process exits).
    fn drop(&mut self) {
        drop(self.recovery.take());
        self.stop_taking_calls();
        if let Some(thread) = self.writer_thread.take() {
            let _ = thread.join();
        }
    }
}

/// Write to the store every batch the intake log replayed that the store
/// lacks. A new store beside a non-empty intake log is refused: that is a
/// lost store, and `ankusa store rebuild` is how it comes back.
fn complete_from_intake(
    store: &dyn Store,
    log: Box<dyn IntakeLog>,
    replay: &Replay,
) -> Result<Box<dyn IntakeLog>, QueueError> {
    if store.created() && !replay.records.is_empty() {
        return Err(QueueError::Intake(format!(
            "the store at {} is new but the intake log holds {} batches: the store was lost; \
             rebuild it with `ankusa store rebuild` instead of starting empty",
            store.location(),
            replay.records.len()
        )));
    }
    let applied = apply_intake(store, &replay.records)?;
    if applied > 0 {
        tracing::warn!(batches = applied, "completed half-committed batches from the intake log");
    }
    Ok(log)
}

/// Write to the store the intake records it lacks (those at or past its seq
/// marker); how many.
pub(super) fn apply_intake(store: &dyn Store, records: &[crate::intake::LoggedGroup]) -> Result<usize, QueueError> {
    let marker = store.seq_marker()?.unwrap_or(1);
    let mut applied = 0;
    for record in records.iter().filter(|r| r.first_seq >= marker) {
        let batch = Batch::decode(&record.payload)
            .map_err(|e| QueueError::Intake(format!("intake batch at seq {}: {e}", record.first_seq)))?;
        store.write(&batch, Durability::Synced)?;
        applied += 1;
    }
    Ok(applied)
}

/// Build a new store at `store_dir` from the intake log at `intake_dir`:
/// every batch it holds, in order. Refuses a store directory that is not
/// empty. Returns (batches, hooks) restored.
pub fn rebuild(intake_dir: &Path, store_dir: &Path) -> Result<(usize, u64), QueueError> {
    let replay = crate::intake::read_all(intake_dir).map_err(|e| QueueError::Intake(e.to_string()))?;
    let store = crate::store::open_embedded(&StoreOptions::new(store_dir))?;
    if !store.created() {
        return Err(QueueError::Intake(format!(
            "{} already holds a store; rebuild into a new, empty directory",
            store_dir.display()
        )));
    }
    let mut hooks = 0;
    for record in &replay.records {
        let batch = Batch::decode(&record.payload)
            .map_err(|e| QueueError::Intake(format!("intake batch at seq {}: {e}", record.first_seq)))?;
        hooks += batch.ops().iter().filter(|op| matches!(op, crate::store::WriteOp::Put { cf: Cf::Hooks, .. })).count()
            as u64;
        store.write(&batch, Durability::Buffered)?;
    }
    store.flush()?;
    Ok((replay.records.len(), hooks))
}
