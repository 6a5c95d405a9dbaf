//! `dlq` jobs: revive dead rows matching a filter, page by page.
//!
//! A job pins the DLQ's upper bound when it starts (rows that die during
//! the job, its own revived rows included, are not visited again) and
//! walks down with the DLQ's own authenticated cursor. Each page's rows
//! are revived in one synced batch together with the job record. A job
//! whose revived rows keep dying pauses itself.

use std::sync::Arc;

use tokio::sync::watch;

use super::drive::{Control, Walk, drive};
use super::{DlqFilter, Job, JobKind, JobState, ReplayConfig, ReplayError, job, room_for_one_more, until_now};
use crate::queue::{DeadQuery, Queue, now_ms};

/// A `dlq` job as first stored: its cursor pinned below every row dead by
/// now (or by the filter's `until`).
pub(super) fn new_job(queue: &Queue, id: &str, filter: DlqFilter, config: ReplayConfig) -> Result<Job, ReplayError> {
    let until = until_now(filter.until);
    Ok(Job {
        cursor: Some(queue.dead_letters().dead_cursor_before(until)?),
        ..Job::new(id, JobKind::Dlq, DlqFilter { until: Some(until), ..filter }, config)
    })
}

/// Create a `dlq` job (or find the one with this id) and run it to its
/// end, a pause, or a cancel. Running it again resumes it; a finished job
/// moves nothing more.
pub async fn run_dlq(queue: Arc<Queue>, id: &str, filter: DlqFilter, config: ReplayConfig) -> Result<Job, ReplayError> {
    let job = match job(&queue, id)? {
        Some(job) => job,
        None => {
            room_for_one_more(&queue)?;
            let job = new_job(&queue, id, filter, config)?;
            job.save(&queue)?;
            job
        }
    };
    drive_dlq(&queue, job, Control::never()).await
}

pub(super) async fn drive_dlq(
    queue: &Queue,
    job: Job,
    mut control: watch::Receiver<Control>,
) -> Result<Job, ReplayError> {
    drive(queue, job, &mut control, DeadRows).await
}

struct DeadRows;

impl Walk for DeadRows {
    /// Revive one page of dead rows, in one synced batch with the job
    /// record.
    async fn step(&mut self, queue: &Queue, job: &mut Job) -> Result<u64, ReplayError> {
        let rows = match &job.filter.rows {
            // A selection is one page: those of its rows still dead.
            Some(selected) => {
                job.cursor = None;
                selected.clone()
            }
            None => {
                let page = queue.dead_letters().dead(&DeadQuery {
                    limit: job.config.page.max(1),
                    cursor: job.cursor.clone(),
                    source_id: job.filter.source_id.clone(),
                    since: job.filter.since,
                    sink: job.filter.sink.clone(),
                    error_class: job.filter.error_class,
                    tenants: job.filter.tenants.clone(),
                })?;
                job.cursor = page.next_cursor.clone();
                page.entries.iter().map(|e| (e.envelope.seq, e.sink)).collect::<Vec<_>>()
            }
        };
        if job.cursor.is_none() {
            job.state = JobState::Done;
        }
        // The record is written with the rows; its count is fixed after.
        let planned = Job { moved: job.moved + rows.len() as u64, ..job.clone() };
        let revived = queue.dead_letters().revive(&rows, &job.id, now_ms(), planned.record()?)?;
        job.moved += revived as u64;
        if revived != rows.len() {
            job.save(queue)?;
        }
        pause_if_dying(queue, job)?;
        Ok(revived as u64)
    }
}

/// Pause a job whose revived rows keep dying.
fn pause_if_dying(queue: &Queue, job: &mut Job) -> Result<(), ReplayError> {
    let died = queue.dead_letters().replay_died(&job.id)?.max(0) as u64;
    if job.state == JobState::Running && died >= job.config.pause_after_died && died * 2 > job.moved {
        job.state = JobState::Paused;
        job.reason = Some(format!("{died} of {} revived rows died again", job.moved));
        tracing::warn!(job = %job.id, died, moved = job.moved, "replay paused: its rows keep dying");
        job.save(queue)?;
    }
    Ok(())
}
