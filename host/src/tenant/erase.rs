//! Tenant erase: a durable job that removes everything a tenant has on the
//! node, in resumable steps.
//!
//! 1. the tenant is marked erasing (synced): from then on the writer
//!    refuses its hooks (`tenant_erasing`) and dispatch claims none of its
//!    rows;
//! 2. its due and dead rows are purged in synced chunks, with the hooks
//!    they leave unreferenced;
//! 3. once its running deliveries have finished (or their deadline has
//!    passed), its inflight rows are purged too;
//! 4. its quarantined and archived hooks, then its runtime sources;
//! 5. its dedupe keys and counters (`forget_tenant`), and the mark is
//!    lifted.
//!
//! The job's record (an erase record of the tenant) is rewritten after every
//! step, so progress is visible and a crash resumes the job at boot: every
//! step is idempotent, so repeating the one that was cut short is safe.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::queue::{PurgeKinds, Queue, QueueError, now_ms};
use crate::source::{LiveDirectory, Origin};
use crate::store::keys::records::{RecordKey, RecordKind};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErasePhase {
    Rows,
    Inflight,
    Quarantine,
    Sources,
    Forget,
    Done,
    Failed,
}

/// What an erase has removed so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EraseCounts {
    pub pending: u64,
    pub inflight: u64,
    pub dead: u64,
    pub quarantined: u64,
    #[serde(default)]
    pub archived: u64,
    pub sources: u64,
    pub dedupe_keys: u64,
}

/// An erase job as stored and reported.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Erase {
    pub tenant: String,
    pub phase: ErasePhase,
    pub removed: EraseCounts,
    pub started_at: u64,
    pub finished_at: Option<u64>,
    pub error: Option<String>,
}

fn erase_key(tenant: &str) -> RecordKey {
    RecordKey::Erase { tenant: tenant.to_string() }
}

fn save(queue: &Queue, erase: &Erase) -> Result<(), QueueError> {
    Ok(queue.records().put(&erase_key(&erase.tenant), erase)?)
}

/// The tenant's erase job, if one was ever started.
pub fn load(queue: &Queue, tenant: &str) -> Result<Option<Erase>, QueueError> {
    Ok(queue.records().get(&erase_key(tenant))?)
}

/// The node's erase jobs.
pub struct Erasures {
    queue: Arc<Queue>,
    sources: Arc<LiveDirectory>,
    /// How long to let running deliveries finish before their rows go.
    grace: Duration,
    running: Mutex<HashMap<String, tokio::task::JoinHandle<()>>>,
}

impl Erasures {
    pub fn new(queue: Arc<Queue>, sources: Arc<LiveDirectory>, grace: Duration) -> Erasures {
        Erasures { queue, sources, grace, running: Mutex::new(HashMap::new()) }
    }

    /// Start erasing `tenant` (or report the erase already under way).
    /// The tenant is marked erasing before this returns.
    pub async fn start(&self, tenant: &str) -> Result<Erase, QueueError> {
        if let Some(existing) = load(&self.queue, tenant)?
            && !matches!(existing.phase, ErasePhase::Done | ErasePhase::Failed)
        {
            self.launch(existing.clone());
            return Ok(existing);
        }
        self.queue.tenants().set_erasing(tenant, true).await?;
        let erase = Erase {
            tenant: tenant.to_string(),
            phase: ErasePhase::Rows,
            removed: EraseCounts::default(),
            started_at: now_ms(),
            finished_at: None,
            error: None,
        };
        save(&self.queue, &erase)?;
        tracing::info!(%tenant, "tenant erase started: its new hooks are refused");
        self.launch(erase.clone());
        Ok(erase)
    }

    pub fn status(&self, tenant: &str) -> Result<Option<Erase>, QueueError> {
        load(&self.queue, tenant)
    }

    /// Resume every erase a stop cut short.
    pub fn resume_all(&self) -> Result<usize, QueueError> {
        let mut resumed = 0;
        for (key, erase) in self.queue.records().all::<Erase>(RecordKind::Erase)? {
            let erase = match erase {
                Ok(erase) => erase,
                Err(e) => {
                    tracing::error!("{key} not resumed: {e}");
                    continue;
                }
            };
            if !matches!(erase.phase, ErasePhase::Done | ErasePhase::Failed) {
                tracing::info!(tenant = %erase.tenant, phase = ?erase.phase, "resuming tenant erase");
                self.launch(erase);
                resumed += 1;
            }
        }
        Ok(resumed)
    }

    fn launch(&self, erase: Erase) {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        running.retain(|_, task| !task.is_finished());
        if running.contains_key(&erase.tenant) {
            return;
        }
        let (queue, sources, grace) = (self.queue.clone(), self.sources.clone(), self.grace);
        let tenant = erase.tenant.clone();
        running.insert(
            tenant.clone(),
            tokio::spawn(async move {
                if let Err(e) = run(&queue, &sources, grace, erase).await {
                    tracing::error!(%tenant, "tenant erase stopped: {e}");
                    if let Ok(Some(mut failed)) = load(&queue, &tenant) {
                        failed.phase = ErasePhase::Failed;
                        failed.error = Some(e.to_string());
                        let _ = save(&queue, &failed);
                    }
                }
            }),
        );
    }

    /// Stop every erase's task; their records say where to resume.
    pub async fn stop(&self) {
        let tasks: Vec<_> = self.running.lock().unwrap_or_else(|e| e.into_inner()).drain().collect();
        for (_, task) in tasks {
            task.abort();
            let _ = task.await;
        }
    }
}

async fn run(queue: &Queue, sources: &LiveDirectory, grace: Duration, mut erase: Erase) -> Result<(), QueueError> {
    let tenant = erase.tenant.clone();
    // A resumed erase marks again: the mark may be all a crash left.
    queue.tenants().set_erasing(&tenant, true).await?;
    if erase.phase == ErasePhase::Rows {
        let kinds = PurgeKinds { pending: true, inflight: false, dead: true };
        let mut after = None;
        loop {
            let step = queue.tenants().purge_tenant_chunk(&tenant, kinds, after)?;
            erase.removed.pending += step.removed.pending;
            erase.removed.dead += step.removed.dead;
            save(queue, &erase)?;
            match step.next {
                Some(next) => after = Some(next),
                None => break,
            }
            tokio::task::yield_now().await;
        }
        erase.phase = ErasePhase::Inflight;
        save(queue, &erase)?;
    }
    if erase.phase == ErasePhase::Inflight {
        // Deliveries already running finish (their outcome writes find
        // their rows) unless they outlive the attempt deadline.
        let waited = tokio::time::Instant::now();
        while queue.counter(Some(&tenant), "inflight")? > 0 && waited.elapsed() < grace {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let kinds = PurgeKinds { pending: true, inflight: true, dead: true };
        let removed = queue.tenants().purge_tenant(&tenant, kinds)?;
        erase.removed.inflight += removed.inflight.unwrap_or(0);
        erase.removed.pending += removed.pending;
        erase.removed.dead += removed.dead;
        erase.phase = ErasePhase::Quarantine;
        save(queue, &erase)?;
    }
    if erase.phase == ErasePhase::Quarantine {
        erase.removed.quarantined += queue.pen().purge_pen(Some(&tenant), None)?;
        erase.removed.archived += queue.archive().purge_archive(&tenant)?;
        erase.phase = ErasePhase::Sources;
        save(queue, &erase)?;
    }
    if erase.phase == ErasePhase::Sources {
        for (name, section) in super::stored_sources(&queue.records())? {
            if section.tenant == tenant {
                if let Some((_, Origin::Runtime)) = sources.get(&name) {
                    sources.remove(&name);
                }
                super::delete_source(&queue.records(), &tenant, &name)?;
                erase.removed.sources += 1;
            }
        }
        erase.phase = ErasePhase::Forget;
        save(queue, &erase)?;
    }
    if erase.phase == ErasePhase::Forget {
        erase.removed.dedupe_keys += queue.tenants().forget_tenant(&tenant).await?;
        queue.tenants().set_erasing(&tenant, false).await?;
        erase.phase = ErasePhase::Done;
        erase.finished_at = Some(now_ms());
        save(queue, &erase)?;
        tracing::info!(%tenant, removed = ?erase.removed, "tenant erase finished");
    }
    Ok(())
}
