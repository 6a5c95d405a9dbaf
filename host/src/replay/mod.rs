//! Replay jobs: durable, resumable walks that move rows back into
//! delivery. Kind `dlq` revives dead rows matching a filter; kind
//! `archive` redrives archived hooks received in a window; kind
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

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;
use tokio::sync::watch;

use crate::error_class::ErrorClass;
use crate::queue::{DeadQuery, Entry, Queue, QueueError, RedriveEntry, now_ms};
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

impl Job {
    /// A job as first stored: running, nothing moved.
    fn new(id: &str, kind: &str, filter: DlqFilter, config: ReplayConfig) -> Job {
        Job {
            id: id.to_string(),
            kind: kind.into(),
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

/// `TooMany` when [`MAX_ACTIVE`] jobs are running already.
fn room_for_one_more(queue: &Queue) -> Result<(), ReplayError> {
    let running = jobs(queue)?.iter().filter(|j| j.state == JobState::Running).count();
    if running >= MAX_ACTIVE { Err(ReplayError::TooMany) } else { Ok(()) }
}

/// Find the job with this id, or create it as a `dlq` job (stored, state
/// running) unless [`MAX_ACTIVE`] are running.
pub fn create_dlq(queue: &Queue, id: &str, filter: DlqFilter, config: ReplayConfig) -> Result<Job, ReplayError> {
    if let Some(job) = job(queue, id)? {
        return Ok(job);
    }
    room_for_one_more(queue)?;
    // Every row dead by now (the bound is exclusive).
    let until = filter.until.unwrap_or_else(|| now_ms() + 1);
    let job = Job {
        cursor: Some(queue.dead_cursor_before(until)?),
        ..Job::new(id, "dlq", DlqFilter { until: Some(until), ..filter }, config)
    };
    queue.job_put(record(&job))?;
    Ok(job)
}

/// Create a `dlq` job (or find the one with this id) and run it to its
/// end, a pause, or a cancel. Running it again resumes it; a finished job
/// moves nothing more.
pub async fn run_dlq(queue: Arc<Queue>, id: &str, filter: DlqFilter, config: ReplayConfig) -> Result<Job, ReplayError> {
    run_dlq_controlled(queue, id, filter, config, Control::never()).await
}

async fn run_dlq_controlled(
    queue: Arc<Queue>,
    id: &str,
    filter: DlqFilter,
    config: ReplayConfig,
    mut control: watch::Receiver<Control>,
) -> Result<Job, ReplayError> {
    let job = create_dlq(&queue, id, filter, config)?;
    drive(&queue, job, &mut control, Walk::Dlq).await
}

/// Revive one page of dead rows, in one synced batch with the job record.
/// A job whose revived rows keep dying pauses itself.
fn dlq_step(queue: &Queue, job: &mut Job) -> Result<u64, ReplayError> {
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
        queue.job_put(record(job))?;
    }
    let died = queue.replay_died(&job.id)?.max(0) as u64;
    if job.state == JobState::Running && died >= job.config.pause_after_died && died * 2 > job.moved {
        job.state = JobState::Paused;
        job.reason = Some(format!("{died} of {} revived rows died again", job.moved));
        tracing::warn!(job = %job.id, died, moved = job.moved, "replay paused: its rows keep dying");
        queue.job_put(record(job))?;
    }
    Ok(revived as u64)
}

/// What a job walks, page by page.
enum Walk<'a> {
    Dlq,
    Archive(&'a dyn Directory),
    /// The pen of (tenant, source).
    Quarantine(&'a dyn Directory, (&'a str, &'a str)),
}

/// Run a job step by step until it is no longer running. Before each step
/// the job obeys its operator and, when it moves rows straight into the
/// due index, waits while dispatch is behind; after a step that moved rows
/// it sleeps to keep to its rate.
async fn drive(
    queue: &Queue,
    mut job: Job,
    control: &mut watch::Receiver<Control>,
    walk: Walk<'_>,
) -> Result<Job, ReplayError> {
    if job.state == JobState::Paused {
        job.state = JobState::Running;
    }
    let wait_for_dispatch = !matches!(walk, Walk::Quarantine(..));
    while job.state == JobState::Running {
        if obey(queue, &mut job, control)? {
            break;
        }
        if wait_for_dispatch && behind(queue, &mut job).await? {
            continue;
        }
        let moved = match &walk {
            Walk::Dlq => dlq_step(queue, &mut job)?,
            Walk::Archive(directory) => archive_step(queue, *directory, &mut job).await?,
            Walk::Quarantine(directory, pen) => quarantine_step(queue, *directory, *pen, &mut job).await?,
        };
        if moved > 0 && job.config.rate > 0.0 {
            tokio::time::sleep(Duration::from_secs_f64(moved as f64 / job.config.rate)).await;
        }
    }
    Ok(job)
}

/// Wait a moment if dispatch is behind (its oldest due row later than the
/// job allows): moved rows join the due index, so a job only moves rows
/// while dispatch keeps up. `true` when it waited.
async fn behind(queue: &Queue, job: &mut Job) -> Result<bool, ReplayError> {
    let Some(due) = queue.next_due_at()? else { return Ok(false) };
    if now_ms().saturating_sub(due) <= job.config.max_lag_ms || job.moved == 0 {
        return Ok(false);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    job.throttled_ms += 100;
    Ok(true)
}

/// Redrive an `archive` job's window: each page of archived hooks is
/// committed again (fresh seqs, rows to the source's sinks as they are
/// now, `replay_id`) in one synced batch with the job's cursor. Hooks of
/// sources that no longer exist are passed over.
async fn run_archive(
    queue: Arc<Queue>,
    directory: Arc<dyn Directory>,
    id: &str,
    mut control: watch::Receiver<Control>,
) -> Result<Job, ReplayError> {
    let Some(job) = job(&queue, id)? else {
        return Err(ReplayError::Corrupt(id.into(), "no such archive job".into()));
    };
    drive(&queue, job, &mut control, Walk::Archive(directory.as_ref())).await
}

/// Redrive one page of the window, in one synced batch with the job record.
async fn archive_step(queue: &Queue, directory: &dyn Directory, job: &mut Job) -> Result<u64, ReplayError> {
    let (page, last) = archive_page(queue, job)?;
    let Some(last) = last else {
        job.state = JobState::Done;
        queue.job_put(record(job))?;
        return Ok(0);
    };
    job.cursor = Some(hex::encode(&last));
    let entries: Vec<RedriveEntry> = page
        .into_iter()
        .filter_map(|archived| {
            let envelope = archived.envelope;
            let source = directory.resolve(Some(&envelope.tenant_id), &envelope.source_id)?;
            Some(RedriveEntry { sinks: source.bound_sinks(), envelope })
        })
        .collect();
    let wanted = entries.len() as u64;
    let before = job.moved;
    let next = Job { moved: before + wanted, ..job.clone() };
    let moved = if entries.is_empty() {
        queue.job_put(record(&next))?;
        0
    } else {
        queue.redrive(entries, &job.id, record(&next)).await? as u64
    };
    *job = Job { moved: before + moved, ..next };
    if moved != wanted {
        // A tenant being erased takes none of its hooks back.
        queue.job_put(record(job))?;
    }
    Ok(moved)
}

/// A job's cursor, when it is a store key (hex).
fn key_cursor(job: &Job) -> Result<Option<Vec<u8>>, ReplayError> {
    job.cursor.as_deref().map(hex::decode).transpose().map_err(|e| ReplayError::Corrupt(job.id.clone(), e.to_string()))
}

/// The next page of an archive job: the hooks after its cursor that match
/// its filter, and the last archive key examined (`None`: nothing left).
fn archive_page(queue: &Queue, job: &Job) -> Result<(Vec<crate::queue::Archived>, Option<Vec<u8>>), ReplayError> {
    let after = key_cursor(job)?;
    let from_tenant = after.as_deref().and_then(crate::queue::archive_key_tenant);
    let mut tenants = match &job.filter.tenants {
        Some(list) => list.clone(),
        None => queue.archive_tenants()?,
    };
    tenants.sort();
    let (since, until) = (job.filter.since.unwrap_or(0), job.filter.until.unwrap_or(u64::MAX));
    for tenant in tenants.into_iter().filter(|t| from_tenant.as_ref().is_none_or(|from| t >= from)) {
        let resume = after.as_deref().filter(|_| from_tenant.as_deref() == Some(tenant.as_str()));
        let page = queue.archived(&tenant, since, until, resume, job.config.page.max(1))?;
        let Some(last) = page.last().map(|a| a.key.clone()) else { continue };
        let matching = page
            .into_iter()
            .filter(|a| job.filter.source_id.as_ref().is_none_or(|s| *s == a.envelope.source_id))
            .collect();
        return Ok((matching, Some(last)));
    }
    Ok((Vec::new(), None))
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
            tracing::info!(job = %job.id, kind = %job.kind, moved = job.moved, "resuming replay job");
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
        let result = match (&job.pen, job.kind.as_str()) {
            (Some((tenant, source)), _) => {
                run_quarantine_controlled(queue, directory, &job.id, tenant, source, job.config.clone(), control).await
            }
            (None, "archive") => run_archive(queue, directory, &job.id, control).await,
            (None, _) => run_dlq_controlled(queue, &job.id, job.filter.clone(), job.config.clone(), control).await,
        };
        if let Err(e) = result {
            tracing::error!(job = %job.id, "replay job failed: {e}");
        }
    })
}

/// What an operator asked of a running job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    Run,
    Pause,
    Cancel,
}

impl Control {
    /// A control no one will change (jobs run from code, not the API).
    fn never() -> watch::Receiver<Control> {
        watch::channel(Control::Run).1
    }
}

/// Stop `job` here if its control says so (recording why); `true` if it
/// stopped. A running job is the only writer of its record, so the
/// state written here is never overwritten by a page in flight.
fn obey(queue: &Queue, job: &mut Job, control: &mut watch::Receiver<Control>) -> Result<bool, ReplayError> {
    let (state, reason) = match *control.borrow_and_update() {
        Control::Run => return Ok(false),
        Control::Pause => (JobState::Paused, "paused by an operator"),
        Control::Cancel => (JobState::Cancelled, "cancelled by an operator"),
    };
    job.state = state;
    job.reason = Some(reason.into());
    queue.job_put(record(job))?;
    Ok(true)
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
        let running: Vec<Job> = jobs(&self.queue)?.into_iter().filter(|j| j.state == JobState::Running).collect();
        let n = running.len();
        for job in running {
            tracing::info!(job = %job.id, kind = %job.kind, moved = job.moved, "resuming replay job");
            self.launch(job);
        }
        Ok(n)
    }

    /// Store a new job and start it. `Ok(None)` if the id is taken.
    pub fn start(&self, id: &str, spec: JobSpec, config: ReplayConfig) -> Result<Option<Job>, ReplayError> {
        if job(&self.queue, id)?.is_some() {
            return Ok(None);
        }
        let job = match spec {
            JobSpec::Dlq(filter) => create_dlq(&self.queue, id, filter, config)?,
            JobSpec::Archive(filter) => {
                room_for_one_more(&self.queue)?;
                let until = filter.until.unwrap_or_else(|| now_ms() + 1);
                let window = DlqFilter { until: Some(until), since: Some(filter.since.unwrap_or(0)), ..filter };
                let job = Job::new(id, "archive", window, config);
                self.queue.job_put(record(&job))?;
                job
            }
            JobSpec::Quarantine { tenant, source } => {
                room_for_one_more(&self.queue)?;
                let job = new_quarantine_job(id, &tenant, &source, config);
                self.queue.job_put(record(&job))?;
                job
            }
        };
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
                self.queue.job_put(record(&paused))?;
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
    run_quarantine_controlled(queue, directory, id, tenant, source_name, config, Control::never()).await
}

/// A `quarantine` job as first stored (not yet written).
fn new_quarantine_job(id: &str, tenant: &str, source_name: &str, config: ReplayConfig) -> Job {
    Job {
        pen: Some((tenant.to_string(), source_name.to_string())),
        ..Job::new(id, "quarantine", DlqFilter::default(), config)
    }
}

async fn run_quarantine_controlled(
    queue: Arc<Queue>,
    directory: Arc<dyn Directory>,
    id: &str,
    tenant: &str,
    source_name: &str,
    config: ReplayConfig,
    mut control: watch::Receiver<Control>,
) -> Result<Job, ReplayError> {
    let job = match job(&queue, id)? {
        Some(job) => job,
        None => new_quarantine_job(id, tenant, source_name, config),
    };
    drive(&queue, job, &mut control, Walk::Quarantine(directory.as_ref(), (tenant, source_name))).await
}

/// Re-verify one page of held hooks and release those that pass, with
/// their pen deletes and the job record in the same synced batch.
async fn quarantine_step(
    queue: &Queue,
    directory: &dyn Directory,
    (tenant, source_name): (&str, &str),
    job: &mut Job,
) -> Result<u64, ReplayError> {
    let after = key_cursor(job)?;
    let held = queue.quarantined(tenant, source_name, after.as_deref(), job.config.page.max(1))?;
    let Some(last) = held.last() else {
        job.state = JobState::Done;
        queue.job_put(record(job))?;
        return Ok(0);
    };
    let Some(source) = directory.resolve(Some(tenant), source_name) else {
        job.state = JobState::Failed;
        job.reason = Some(format!("source `{source_name}` of tenant `{tenant}` no longer exists"));
        queue.job_put(record(job))?;
        return Ok(0);
    };
    job.cursor = Some(hex::encode(&last.key));
    let mut entries = Vec::new();
    let mut extra = Batch::new();
    for held in &held {
        let mut envelope = held.envelope.clone();
        let verified = match &source.verifier {
            Some(verifier) => verifier.verify(&envelope.headers, &envelope.body, envelope.received_at / 1000).is_ok(),
            None => true,
        };
        if !verified {
            continue;
        }
        envelope.verification.status = "verified".into();
        envelope.verification.reason = None;
        envelope.dedupe_key = source.dedupe.as_ref().and_then(|rule| rule.extract(&envelope.headers, &envelope.body));
        for op in Queue::pen_delete(held) {
            extra.push(op);
        }
        entries.push(Entry { envelope, sinks: source.bound_sinks() });
    }
    let released = entries.len() as u64;
    let next = Job { moved: job.moved + released, ..job.clone() };
    extra.extend(record(&next));
    match queue.release(entries, &job.id, extra).await {
        Ok(_) => {
            *job = next;
            Ok(released)
        }
        Err(QueueError::Refused(refusal)) => {
            job.state = JobState::Paused;
            job.reason = Some(format!("release refused: {refusal}"));
            queue.job_put(record(job))?;
            Ok(0)
        }
        Err(e) => Err(e.into()),
    }
}
