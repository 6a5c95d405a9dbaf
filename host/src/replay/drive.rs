//! The loop every job kind runs: step by step until the job is no longer
//! running. Before each step the job obeys its operator and, when its
//! rows go straight into the due index, waits while dispatch is behind;
//! after a step that moved rows it sleeps to keep to its rate.

use std::time::Duration;

use tokio::sync::watch;

use super::{Job, JobState, ReplayError};
use crate::queue::{Queue, now_ms};

/// What an operator asked of a running job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    Run,
    Pause,
    Cancel,
}

impl Control {
    /// A control no one will change (jobs run from code, not the API).
    pub(super) fn never() -> watch::Receiver<Control> {
        watch::channel(Control::Run).1
    }
}

/// One kind of walk: a page at a time.
pub(super) trait Walk {
    /// Move one page, recording the job with it; how many rows moved. A
    /// walk at its end sets the job's state to done.
    async fn step(&mut self, queue: &Queue, job: &mut Job) -> Result<u64, ReplayError>;

    /// Whether moved rows go straight into the due index, so the walk waits
    /// while dispatch is behind.
    fn feeds_dispatch(&self) -> bool {
        true
    }
}

pub(super) async fn drive(
    queue: &Queue,
    mut job: Job,
    control: &mut watch::Receiver<Control>,
    mut walk: impl Walk,
) -> Result<Job, ReplayError> {
    if job.state == JobState::Paused {
        job.state = JobState::Running;
    }
    while job.state == JobState::Running {
        if obey(queue, &mut job, control)? {
            break;
        }
        if walk.feeds_dispatch() && behind(queue, &mut job).await? {
            continue;
        }
        let moved = walk.step(queue, &mut job).await?;
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
    let Some(due) = queue.deliveries().next_due_at()? else { return Ok(false) };
    if now_ms().saturating_sub(due) <= job.config.max_lag_ms || job.moved == 0 {
        return Ok(false);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    job.throttled_ms += 100;
    Ok(true)
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
    job.save(queue)?;
    Ok(true)
}
