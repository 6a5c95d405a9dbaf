//! Replay jobs: durable, resumable walks that move rows back into
//! delivery. Kind `dlq` revives dead rows matching a filter; kind
//! `quarantine` re-verifies a source's held hooks with its current
//! secrets and releases those that pass.
//!
//! A job pins the DLQ's upper bound when it starts (rows that die during
//! the job, its own revived rows included, are not visited again) and
//! walks down with the DLQ's own authenticated cursor. Each page's rows are
//! revived in one synced batch together with the job record and its new
//! cursor, so a crash resumes exactly where the last page committed and
//! nothing is revived twice. Pacing: at most `rate` rows a second, and
//! only while dispatch keeps up (its oldest due row at most `max_lag_ms`
//! late). A job whose revived rows keep dying pauses itself.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::error_class::ErrorClass;
use crate::queue::{DeadQuery, Entry, Queue, QueueError, now_ms};
use crate::source::Directory;
use crate::store::Batch;
use crate::store::keys::KeyBuf;

/// Jobs running at once, at most.
pub const MAX_ACTIVE: usize = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    Running,
    Paused,
    Done,
    Cancelled,
    Failed,
}

/// Which dead rows a `dlq` job revives.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DlqFilter {
    pub source_id: Option<String>,
    pub tenants: Option<Vec<String>>,
    /// Dead at or after (unix ms).
    pub since: Option<u64>,
    /// Dead before (unix ms); the job's start time when absent.
    pub until: Option<u64>,
    pub sink: Option<u16>,
    pub error_class: Option<ErrorClass>,
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
    pub kind: String,
    pub filter: DlqFilter,
    pub config: ReplayConfig,
    pub state: JobState,
    /// Where the walk resumes (a DLQ cursor).
    pub cursor: Option<String>,
    pub moved: u64,
    pub throttled_ms: u64,
    pub reason: Option<String>,
    /// `quarantine`: the tenant and source whose pen is walked.
    #[serde(default)]
    pub pen: Option<(String, String)>,
}

#[derive(Debug, Error)]
pub enum ReplayError {
    #[error(transparent)]
    Queue(#[from] QueueError),
    #[error("{MAX_ACTIVE} replay jobs are already running")]
    TooMany,
    #[error("job record {0} does not decode: {1}")]
    Corrupt(String, String),
}

fn job_key(id: &str) -> Vec<u8> {
    KeyBuf::new().tag(b'j').tail(id.as_bytes()).build()
}

fn record(job: &Job) -> Batch {
    let mut batch = Batch::new();
    let bytes = serde_json::to_vec(job).unwrap_or_default();
    batch.put(crate::store::Cf::Jobs, job_key(&job.id), bytes);
    batch
}

/// Every stored job.
pub fn jobs(queue: &Queue) -> Result<Vec<Job>, ReplayError> {
    queue
        .jobs_scan(b"j")?
        .into_iter()
        .map(|(key, value)| {
            serde_json::from_slice(&value)
                .map_err(|e| ReplayError::Corrupt(String::from_utf8_lossy(&key).into(), e.to_string()))
        })
        .collect()
}

pub fn job(queue: &Queue, id: &str) -> Result<Option<Job>, ReplayError> {
    match queue.job_get(&job_key(id))? {
        None => Ok(None),
        Some(bytes) => {
            serde_json::from_slice(&bytes).map(Some).map_err(|e| ReplayError::Corrupt(id.into(), e.to_string()))
        }
    }
}

/// Create a `dlq` job (or find the one with this id) and run it to its
/// end, a pause, or a cancel. Running it again resumes it; a finished job
/// moves nothing more.
pub async fn run_dlq(queue: Arc<Queue>, id: &str, filter: DlqFilter, config: ReplayConfig) -> Result<Job, ReplayError> {
    let mut job = match job(&queue, id)? {
        Some(job) => job,
        None => {
            let running = jobs(&queue)?.iter().filter(|j| j.state == JobState::Running).count();
            if running >= MAX_ACTIVE {
                return Err(ReplayError::TooMany);
            }
            // Every row dead by now (the bound is exclusive).
            let until = filter.until.unwrap_or_else(|| now_ms() + 1);
            let job = Job {
                id: id.to_string(),
                kind: "dlq".into(),
                cursor: Some(queue.dead_cursor_before(until)?),
                filter: DlqFilter { until: Some(until), ..filter },
                config,
                state: JobState::Running,
                moved: 0,
                throttled_ms: 0,
                reason: None,
                pen: None,
            };
            queue.job_put(record(&job))?;
            job
        }
    };
    if job.state == JobState::Paused {
        job.state = JobState::Running;
    }
    while job.state == JobState::Running {
        // Only while dispatch keeps up: revived rows join the due index.
        if let Some(due) = queue.next_due_at()? {
            let lag = now_ms().saturating_sub(due);
            if lag > job.config.max_lag_ms && job.moved > 0 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                job.throttled_ms += 100;
                continue;
            }
        }
        let page = queue.dead(&DeadQuery {
            limit: job.config.page.max(1),
            cursor: job.cursor.clone(),
            source_id: job.filter.source_id.clone(),
            since: job.filter.since,
            sink: job.filter.sink,
            error_class: job.filter.error_class,
            tenants: job.filter.tenants.clone(),
        })?;
        let rows: Vec<(u64, u16)> = page.entries.iter().map(|e| (e.envelope.seq, e.sink)).collect();
        job.cursor = page.next_cursor.clone();
        if job.cursor.is_none() {
            job.state = JobState::Done;
        }
        let before = job.clone();
        // The record is written with the rows; its count is fixed after.
        let revived =
            queue.revive(&rows, &job.id, now_ms(), record(&Job { moved: job.moved + rows.len() as u64, ..before }))?;
        job.moved += revived as u64;
        if revived != rows.len() {
            queue.job_put(record(&job))?;
        }
        let died = queue.replay_died(&job.id)?.max(0) as u64;
        if job.state == JobState::Running && died >= job.config.pause_after_died && died * 2 > job.moved {
            job.state = JobState::Paused;
            job.reason = Some(format!("{died} of {} revived rows died again", job.moved));
            tracing::warn!(job = %job.id, died, moved = job.moved, "replay paused: its rows keep dying");
            queue.job_put(record(&job))?;
        }
        if revived > 0 && job.config.rate > 0.0 {
            tokio::time::sleep(Duration::from_secs_f64(revived as f64 / job.config.rate)).await;
        }
    }
    Ok(job)
}

/// Stop a job where it stands; running it again does nothing.
pub fn cancel(queue: &Queue, id: &str) -> Result<Option<Job>, ReplayError> {
    let Some(mut job) = job(queue, id)? else { return Ok(None) };
    if matches!(job.state, JobState::Running | JobState::Paused) {
        job.state = JobState::Cancelled;
        queue.job_put(record(&job))?;
    }
    Ok(Some(job))
}

/// Resume every job that was running when the node stopped: each goes on
/// from its last committed cursor.
pub fn resume_all(
    queue: Arc<Queue>,
    directory: Arc<dyn Directory>,
) -> Result<Vec<tokio::task::JoinHandle<()>>, ReplayError> {
    let running: Vec<Job> = jobs(&queue)?.into_iter().filter(|j| j.state == JobState::Running).collect();
    Ok(running
        .into_iter()
        .map(|job| {
            let queue = queue.clone();
            let directory = directory.clone();
            tokio::spawn(async move {
                tracing::info!(job = %job.id, kind = %job.kind, moved = job.moved, "resuming replay job");
                let result = match &job.pen {
                    Some((tenant, source)) => {
                        run_quarantine(queue, directory, &job.id, tenant, source, job.config.clone()).await
                    }
                    None => run_dlq(queue, &job.id, job.filter.clone(), job.config.clone()).await,
                };
                if let Err(e) = result {
                    tracing::error!(job = %job.id, "replay job failed: {e}");
                }
            })
        })
        .collect())
}

/// Re-verify the hooks `source` of `tenant` holds in the quarantine pen,
/// with the source's secrets as they are now and each hook's own receive
/// time, and release those that pass: committed like new hooks (dedupe
/// included) with `replay_id`, their pen entries deleted and the job's
/// cursor moved in the same synced batch. Hooks that still fail stay held.
pub async fn run_quarantine(
    queue: Arc<Queue>,
    directory: Arc<dyn Directory>,
    id: &str,
    tenant: &str,
    source_name: &str,
    config: ReplayConfig,
) -> Result<Job, ReplayError> {
    let mut job = match job(&queue, id)? {
        Some(job) => job,
        None => Job {
            id: id.to_string(),
            kind: "quarantine".into(),
            filter: DlqFilter::default(),
            config,
            state: JobState::Running,
            cursor: None,
            moved: 0,
            throttled_ms: 0,
            reason: None,
            pen: Some((tenant.to_string(), source_name.to_string())),
        },
    };
    while job.state == JobState::Running {
        let after = job
            .cursor
            .as_deref()
            .map(hex::decode)
            .transpose()
            .map_err(|e| ReplayError::Corrupt(job.id.clone(), e.to_string()))?;
        let held = queue.quarantined(tenant, source_name, after.as_deref(), job.config.page.max(1))?;
        let Some(last) = held.last() else {
            job.state = JobState::Done;
            queue.job_put(record(&job))?;
            break;
        };
        let Some(source) = directory.resolve(Some(tenant), source_name) else {
            job.state = JobState::Failed;
            job.reason = Some(format!("source `{source_name}` of tenant `{tenant}` no longer exists"));
            queue.job_put(record(&job))?;
            break;
        };
        job.cursor = Some(hex::encode(&last.key));
        let mut entries = Vec::new();
        let mut extra = Batch::new();
        for held in &held {
            let mut envelope = held.envelope.clone();
            let verified = match &source.verifier {
                Some(verifier) => {
                    verifier.verify(&envelope.headers, &envelope.body, envelope.received_at / 1000).is_ok()
                }
                None => true,
            };
            if !verified {
                continue;
            }
            envelope.verification.status = "verified".into();
            envelope.verification.reason = None;
            envelope.dedupe_key =
                source.dedupe.as_ref().and_then(|rule| rule.extract(&envelope.headers, &envelope.body));
            for op in Queue::pen_delete(held) {
                extra.push(op);
            }
            entries.push(Entry { envelope, sinks: source.bound_sinks() });
        }
        let released = entries.len() as u64;
        let next = Job { moved: job.moved + released, ..job.clone() };
        extra.extend(record(&next));
        match queue.release(entries, &job.id, extra).await {
            Ok(_) => job = next,
            Err(QueueError::Refused(refusal)) => {
                job.state = JobState::Paused;
                job.reason = Some(format!("release refused: {refusal}"));
                queue.job_put(record(&job))?;
            }
            Err(e) => return Err(e.into()),
        }
        if released > 0 && job.config.rate > 0.0 {
            tokio::time::sleep(Duration::from_secs_f64(released as f64 / job.config.rate)).await;
        }
    }
    Ok(job)
}
