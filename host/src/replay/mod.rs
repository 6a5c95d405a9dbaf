//! Replay jobs: durable, resumable walks that move rows back into
//! delivery, one module per kind:
//! - [`dlq`]: revive dead rows matching a filter;
//! - [`archive`]: redrive archived hooks received in a window;
//! - [`quarantine`]: re-verify a source's held hooks with its current
//!   secrets and release those that pass.
//!
//! A job's record (its cursor, counts and state) commits in the same
//! synced batch as the rows each page moves, so a crash resumes exactly
//! where the last page committed and nothing is moved twice. Every kind
//! runs through one loop ([`drive`]): it obeys the operator (pause,
//! cancel), keeps to the job's rate, and moves rows into the due index only
//! while dispatch keeps up.

mod archive;
mod dlq;
mod drive;
mod quarantine;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;
use tokio::sync::watch;

use crate::error_class::ErrorClass;
use crate::queue::{Queue, QueueError, SinkSelector, now_ms};
use crate::records::record_write;
use crate::source::Directory;
use crate::store::Batch;
use crate::store::keys::records::{RecordKey, RecordKind};

pub use dlq::run_dlq;
pub use drive::Control;
pub use quarantine::run_quarantine;

/// Jobs running at once, at most.
pub const MAX_ACTIVE: usize = 16;

/// What a job walks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum JobKind {
    /// Revive dead rows.
    Dlq,
    /// Redrive archived hooks.
    Archive,
    /// Re-verify and release quarantined hooks of one source.
    Quarantine,
}

impl JobKind {
    pub fn as_str(self) -> &'static str {
        match self {
            JobKind::Dlq => "dlq",
            JobKind::Archive => "archive",
            JobKind::Quarantine => "quarantine",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    Running,
    Paused,
    Done,
    Cancelled,
    Failed,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Running => "running",
            JobState::Paused => "paused",
            JobState::Done => "done",
            JobState::Cancelled => "cancelled",
            JobState::Failed => "failed",
        }
    }
}

/// Which dead rows a `dlq` job revives (an `archive` job uses the source,
/// tenants and window).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DlqFilter {
    pub source_id: Option<String>,
    pub tenants: Option<Vec<String>>,
    /// Dead at or after (unix ms).
    pub since: Option<u64>,
    /// Dead before (unix ms); the job's start time when absent.
    pub until: Option<u64>,
    pub sink: Option<SinkSelector>,
    pub error_class: Option<ErrorClass>,
    /// Exactly these dead rows (seq, sink index), instead of a walk: an
    /// operator's selection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<Vec<(u64, u16)>>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplayConfig {
    /// Rows revived per second, at most.
    pub rate: f64,
    /// Wait while dispatch's oldest due row is later than this.
    pub max_lag_ms: u64,
    /// Rows per page (and per synced batch).
    pub page: usize,
    /// Pause once this many revived rows died again and they are more
    /// than half of those revived.
    pub pause_after_died: u64,
}

impl Default for ReplayConfig {
    fn default() -> Self {
        ReplayConfig { rate: 1000.0, max_lag_ms: 2000, page: 100, pause_after_died: 20 }
    }
}

/// A job as stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub id: String,
    pub kind: JobKind,
    pub filter: DlqFilter,
    pub config: ReplayConfig,
    pub state: JobState,
    /// Where the walk resumes (a DLQ cursor, or a store key in hex).
    pub cursor: Option<String>,
    pub moved: u64,
    pub throttled_ms: u64,
    pub reason: Option<String>,
    /// `quarantine`: the tenant and source whose pen is walked.
    #[serde(default)]
    pub pen: Option<(String, String)>,
}

impl Job {
    /// A job as first stored: running, nothing moved.
    fn new(id: &str, kind: JobKind, filter: DlqFilter, config: ReplayConfig) -> Job {
        Job {
            id: id.to_string(),
            kind,
            filter,
            config,
            state: JobState::Running,
            cursor: None,
            moved: 0,
            throttled_ms: 0,
            reason: None,
            pen: None,
        }
    }

    fn key(&self) -> RecordKey {
        job_key(&self.id)
    }

    /// The job's record, to commit with the rows a page moves.
    fn record(&self) -> Result<Batch, ReplayError> {
        Ok(record_write(&self.key(), self)?)
    }

    /// Store the job's record on its own, synced.
    fn save(&self, queue: &Queue) -> Result<(), ReplayError> {
        Ok(queue.records().put(&self.key(), self)?)
    }
}

#[derive(Debug, Error)]
pub enum ReplayError {
    #[error(transparent)]
    Queue(#[from] QueueError),
    #[error("{MAX_ACTIVE} replay jobs are already running")]
    TooMany,
    #[error("job {0}: {1}")]
    Corrupt(String, String),
}

impl From<crate::records::RecordError> for ReplayError {
    fn from(error: crate::records::RecordError) -> ReplayError {
        ReplayError::Queue(error.into())
    }
}

fn job_key(id: &str) -> RecordKey {
    RecordKey::Replay { id: id.to_string() }
}

/// Every stored job.
pub fn jobs(queue: &Queue) -> Result<Vec<Job>, ReplayError> {
    queue.records().all::<Job>(RecordKind::Replay)?.into_iter().map(|(_, job)| Ok(job?)).collect()
}

pub fn job(queue: &Queue, id: &str) -> Result<Option<Job>, ReplayError> {
    Ok(queue.records().get(&job_key(id))?)
}

/// Jobs that were running when the node stopped.
fn running(queue: &Queue) -> Result<Vec<Job>, ReplayError> {
    Ok(jobs(queue)?.into_iter().filter(|j| j.state == JobState::Running).collect())
}

/// `TooMany` when [`MAX_ACTIVE`] jobs are running already.
fn room_for_one_more(queue: &Queue) -> Result<(), ReplayError> {
    if running(queue)?.len() >= MAX_ACTIVE { Err(ReplayError::TooMany) } else { Ok(()) }
}

/// Stop a job where it stands; running it again does nothing.
pub fn cancel(queue: &Queue, id: &str) -> Result<Option<Job>, ReplayError> {
    let Some(mut job) = job(queue, id)? else { return Ok(None) };
    if matches!(job.state, JobState::Running | JobState::Paused) {
        job.state = JobState::Cancelled;
        job.save(queue)?;
    }
    Ok(Some(job))
}

/// Resume every job that was running when the node stopped: each goes on
/// from its last committed cursor.
pub fn resume_all(
    queue: Arc<Queue>,
    directory: Arc<dyn Directory>,
) -> Result<Vec<tokio::task::JoinHandle<()>>, ReplayError> {
    Ok(running(&queue)?
        .into_iter()
        .map(|job| {
            tracing::info!(job = %job.id, kind = job.kind.as_str(), moved = job.moved, "resuming replay job");
            spawn_job(queue.clone(), directory.clone(), job, Control::never())
        })
        .collect())
}

/// Run a stored job in the background until it ends or `control` stops it.
fn spawn_job(
    queue: Arc<Queue>,
    directory: Arc<dyn Directory>,
    job: Job,
    control: watch::Receiver<Control>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let id = job.id.clone();
        let result = match job.kind {
            JobKind::Dlq => dlq::drive_dlq(&queue, job, control).await,
            JobKind::Archive => archive::drive_archive(&queue, directory.as_ref(), job, control).await,
            JobKind::Quarantine => quarantine::drive_quarantine(&queue, directory.as_ref(), job, control).await,
        };
        match result {
            Ok(job) => tell_stopped(&job),
            Err(e) => tracing::error!(job = %id, "replay job failed: {e}"),
        }
    })
}

/// One line when a job stops running, however it stopped.
fn tell_stopped(job: &Job) {
    let (id, kind, moved) = (job.id.as_str(), job.kind.as_str(), job.moved);
    let sink = job.filter.sink.as_ref().map(ToString::to_string);
    match job.state {
        JobState::Done => {
            tracing::info!(job = id, kind, sink, moved, throttled_ms = job.throttled_ms, "replay job finished")
        }
        JobState::Cancelled => tracing::info!(job = id, kind, moved, "replay job cancelled"),
        JobState::Paused => tracing::info!(job = id, kind, moved, reason = job.reason.as_deref(), "replay job paused"),
        JobState::Failed => tracing::warn!(job = id, kind, moved, reason = job.reason.as_deref(), "replay job failed"),
        JobState::Running => {}
    }
}

/// What a new job is to do.
#[derive(Clone, Debug, PartialEq)]
pub enum JobSpec {
    /// Revive dead rows matching the filter.
    Dlq(DlqFilter),
    /// Redrive archived hooks received in `[since, until)` (of the
    /// filter's source and tenants, when given).
    Archive(DlqFilter),
    /// Re-verify and release the pen entries of one source.
    Quarantine { tenant: String, source: String },
}

/// Running jobs: each one's control and task, by id.
type Running = HashMap<String, (watch::Sender<Control>, tokio::task::JoinHandle<()>)>;

/// The node's replay jobs: started, paused, resumed and cancelled by the
/// admin API, each running as a task of its own.
pub struct Replays {
    queue: Arc<Queue>,
    directory: Arc<dyn Directory>,
    running: std::sync::Mutex<Running>,
}

impl Replays {
    pub fn new(queue: Arc<Queue>, directory: Arc<dyn Directory>) -> Replays {
        Replays { queue, directory, running: Default::default() }
    }

    fn running(&self) -> std::sync::MutexGuard<'_, Running> {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        running.retain(|_, (_, task)| !task.is_finished());
        running
    }

    fn launch(&self, job: Job) {
        let (control, watch) = watch::channel(Control::Run);
        let id = job.id.clone();
        let task = spawn_job(self.queue.clone(), self.directory.clone(), job, watch);
        self.running().insert(id, (control, task));
    }

    /// Resume every job that was running when the node stopped.
    pub fn resume_all(&self) -> Result<usize, ReplayError> {
        let jobs = running(&self.queue)?;
        let n = jobs.len();
        for job in jobs {
            tracing::info!(job = %job.id, kind = job.kind.as_str(), moved = job.moved, "resuming replay job");
            self.launch(job);
        }
        Ok(n)
    }

    /// Store a new job and start it. `Ok(None)` if the id is taken.
    pub fn start(&self, id: &str, spec: JobSpec, config: ReplayConfig) -> Result<Option<Job>, ReplayError> {
        if job(&self.queue, id)?.is_some() {
            return Ok(None);
        }
        room_for_one_more(&self.queue)?;
        let job = match spec {
            JobSpec::Dlq(filter) => dlq::new_job(&self.queue, id, filter, config)?,
            JobSpec::Archive(filter) => archive::new_job(id, filter, config),
            JobSpec::Quarantine { tenant, source } => quarantine::new_job(id, &tenant, &source, config),
        };
        job.save(&self.queue)?;
        let f = &job.filter;
        tracing::info!(
            job = %job.id,
            kind = job.kind.as_str(),
            source = f.source_id.as_deref(),
            sink = f.sink.as_ref().map(ToString::to_string),
            error_class = f.error_class.map(ErrorClass::as_str),
            rows = f.rows.as_ref().map(Vec::len),
            "replay job started"
        );
        self.launch(job.clone());
        Ok(Some(job))
    }

    /// Ask a job to run, pause or stop; the job as it stands after.
    /// `Ok(None)`: no such job.
    pub async fn control(&self, id: &str, wanted: Control) -> Result<Option<Job>, ReplayError> {
        let Some(stored) = job(&self.queue, id)? else { return Ok(None) };
        let is_running = self.running().contains_key(id);
        if is_running {
            if wanted == Control::Run {
                return Ok(Some(stored));
            }
            // The task records the new state itself, at its next step.
            let task = self.running().remove(id).map(|(control, task)| {
                let _ = control.send(wanted);
                task
            });
            if let Some(task) = task {
                let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
            }
            return job(&self.queue, id);
        }
        match (wanted, stored.state) {
            (Control::Run, JobState::Paused) => {
                self.launch(stored);
            }
            (Control::Pause, JobState::Running) => {
                let paused = Job { state: JobState::Paused, reason: Some("paused by an operator".into()), ..stored };
                paused.save(&self.queue)?;
            }
            (Control::Cancel, JobState::Running | JobState::Paused) => {
                cancel(&self.queue, id)?;
            }
            _ => {}
        }
        job(&self.queue, id)
    }

    pub fn list(&self) -> Result<Vec<Job>, ReplayError> {
        jobs(&self.queue)
    }

    pub fn get(&self, id: &str) -> Result<Option<Job>, ReplayError> {
        job(&self.queue, id)
    }

    /// Stop every job's task (their records say where to resume).
    pub async fn stop(&self) {
        let tasks: Vec<_> = self.running().drain().map(|(_, (_, task))| task).collect();
        for task in tasks {
            task.abort();
            let _ = task.await;
        }
    }
}

/// The end of a window the caller left open: now (exclusive).
fn until_now(until: Option<u64>) -> u64 {
    until.unwrap_or_else(|| now_ms() + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: &str) -> String {
        format!(
            r#"{{"id":"r1","kind":"{kind}","filter":{{"source_id":null,"tenants":null,"since":null,"until":null,"sink":null,"error_class":null}},"config":{{"rate":1000.0,"max_lag_ms":2000,"page":100,"pause_after_died":20}},"state":"running","cursor":null,"moved":0,"throttled_ms":0,"reason":null}}"#
        )
    }

    #[test]
    fn stored_kinds_read_back_as_their_enum() {
        for (name, kind) in [("dlq", JobKind::Dlq), ("archive", JobKind::Archive), ("quarantine", JobKind::Quarantine)]
        {
            let job: Job = serde_json::from_str(&record(name)).expect("a stored job decodes");
            assert_eq!(job.kind, kind);
            assert_eq!(job.kind.as_str(), name);
        }
    }

    #[test]
    fn an_unknown_kind_is_refused_not_run_as_a_dlq_job() {
        let err = serde_json::from_str::<Job>(&record("everything")).expect_err("refused");
        assert!(err.to_string().contains("unknown variant"), "{err}");
    }
}
