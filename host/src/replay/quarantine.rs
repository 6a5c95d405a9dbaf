//! `quarantine` jobs: re-verify the hooks one source of one tenant holds
//! in the pen, with the source's secrets as they are now and each hook's
//! own receive time, and release those that pass: committed like new
//! hooks (dedupe included) with `replay_id`, their pen entries deleted and
//! the job's cursor moved in the same synced batch. Hooks that still fail
//! stay held.

use std::sync::Arc;

use tokio::sync::watch;

use super::archive::key_cursor;
use super::drive::{Control, Walk, drive};
use super::{DlqFilter, Job, JobKind, JobState, ReplayConfig, ReplayError, job};
use crate::queue::{Queue, QueueError};
use crate::source::{Admission, Directory, OnVerifyFailure};
use crate::store::Batch;

/// A `quarantine` job as first stored (not yet written).
pub(super) fn new_job(id: &str, tenant: &str, source_name: &str, config: ReplayConfig) -> Job {
    Job {
        pen: Some((tenant.to_string(), source_name.to_string())),
        ..Job::new(id, JobKind::Quarantine, DlqFilter::default(), config)
    }
}

/// Create a `quarantine` job (or find the one with this id) and run it to
/// its end.
pub async fn run_quarantine(
    queue: Arc<Queue>,
    directory: Arc<dyn Directory>,
    id: &str,
    tenant: &str,
    source_name: &str,
    config: ReplayConfig,
) -> Result<Job, ReplayError> {
    let job = match job(&queue, id)? {
        Some(job) => job,
        None => new_job(id, tenant, source_name, config),
    };
    drive_quarantine(&queue, directory.as_ref(), job, Control::never()).await
}

pub(super) async fn drive_quarantine(
    queue: &Queue,
    directory: &dyn Directory,
    job: Job,
    mut control: watch::Receiver<Control>,
) -> Result<Job, ReplayError> {
    let Some((tenant, source)) = job.pen.clone() else {
        return Err(ReplayError::Corrupt(job.id.clone(), "a quarantine job without its tenant and source".into()));
    };
    drive(queue, job, &mut control, Pen { directory, tenant, source }).await
}

struct Pen<'a> {
    directory: &'a dyn Directory,
    tenant: String,
    source: String,
}

impl Walk for Pen<'_> {
    /// Re-verify one page of held hooks and release those that pass, with
    /// their pen deletes and the job record in the same synced batch.
    async fn step(&mut self, queue: &Queue, job: &mut Job) -> Result<u64, ReplayError> {
        let after = key_cursor(job)?;
        let held = queue.pen().quarantined(&self.tenant, &self.source, after.as_deref(), job.config.page.max(1))?;
        let Some(last) = held.last() else {
            job.state = JobState::Done;
            job.save(queue)?;
            return Ok(0);
        };
        let Some(source) = self.directory.resolve(Some(&self.tenant), &self.source) else {
            job.state = JobState::Failed;
            job.reason = Some(format!("source `{}` of tenant `{}` no longer exists", self.source, self.tenant));
            job.save(queue)?;
            return Ok(0);
        };
        job.cursor = Some(hex::encode(&last.key));
        let mut entries = Vec::new();
        let mut extra = Batch::new();
        for held in &held {
            let mut envelope = held.envelope.clone();
            // Judged as at its receipt; a hook that fails again stays held,
            // whatever the source now does with failures at the edge.
            let now_s = envelope.received_at / 1000;
            if source.admit(&mut envelope, now_s, OnVerifyFailure::Quarantine) != Admission::Verified {
                continue;
            }
            for op in crate::queue::Pen::pen_delete(held) {
                extra.push(op);
            }
            entries.push(source.entry(envelope));
        }
        let released = entries.len() as u64;
        let next = Job { moved: job.moved + released, ..job.clone() };
        extra.extend(next.record()?);
        match queue.pen().release(entries, &job.id, extra).await {
            Ok(_) => {
                *job = next;
                Ok(released)
            }
            Err(QueueError::Refused(refusal)) => {
                job.state = JobState::Paused;
                job.reason = Some(format!("release refused: {refusal}"));
                job.save(queue)?;
                Ok(0)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Released hooks are new commits: the writer's own bounds pace them.
    fn feeds_dispatch(&self) -> bool {
        false
    }
}
