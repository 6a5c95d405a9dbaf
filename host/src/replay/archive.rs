//! `archive` jobs: redrive the archived hooks received in a window. Each
//! page is committed again (fresh seqs, rows to the source's sinks as they
//! are now, `replay_id`) in one synced batch with the job's cursor. Hooks
//! of sources that no longer exist are passed over.

use tokio::sync::watch;

use super::drive::{Control, Walk, drive};
use super::{DlqFilter, Job, JobKind, JobState, ReplayConfig, ReplayError, until_now};
use crate::queue::{Archived, Entry, Queue, archive_key_tenant};
use crate::source::Directory;

/// An `archive` job as first stored: the window closed at now unless given.
pub(super) fn new_job(id: &str, filter: DlqFilter, config: ReplayConfig) -> Job {
    let until = until_now(filter.until);
    let window = DlqFilter { until: Some(until), since: Some(filter.since.unwrap_or(0)), ..filter };
    Job::new(id, JobKind::Archive, window, config)
}

pub(super) async fn drive_archive(
    queue: &Queue,
    directory: &dyn Directory,
    job: Job,
    mut control: watch::Receiver<Control>,
) -> Result<Job, ReplayError> {
    drive(queue, job, &mut control, Window { directory }).await
}

struct Window<'a> {
    directory: &'a dyn Directory,
}

impl Walk for Window<'_> {
    /// Redrive one page of the window, in one synced batch with the job
    /// record.
    async fn step(&mut self, queue: &Queue, job: &mut Job) -> Result<u64, ReplayError> {
        let (page, last) = page(queue, job)?;
        let Some(last) = last else {
            job.state = JobState::Done;
            job.save(queue)?;
            return Ok(0);
        };
        job.cursor = Some(hex::encode(&last));
        let entries: Vec<Entry> = page
            .into_iter()
            .filter_map(|archived| {
                let envelope = archived.envelope;
                let source = self.directory.resolve(Some(&envelope.tenant_id), &envelope.source_id)?;
                Some(source.entry(envelope))
            })
            .collect();
        let wanted = entries.len() as u64;
        let before = job.moved;
        let next = Job { moved: before + wanted, ..job.clone() };
        let moved = if entries.is_empty() {
            next.save(queue)?;
            0
        } else {
            queue.archive().redrive(entries, &job.id, next.record()?).await? as u64
        };
        *job = Job { moved: before + moved, ..next };
        if moved != wanted {
            // A tenant being erased takes none of its hooks back.
            job.save(queue)?;
        }
        Ok(moved)
    }
}

/// A job's cursor, when it is a store key (hex).
pub(super) fn key_cursor(job: &Job) -> Result<Option<Vec<u8>>, ReplayError> {
    job.cursor.as_deref().map(hex::decode).transpose().map_err(|e| ReplayError::Corrupt(job.id.clone(), e.to_string()))
}

/// The next page of an archive job: the hooks after its cursor that match
/// its filter, and the last archive key examined (`None`: nothing left).
fn page(queue: &Queue, job: &Job) -> Result<(Vec<Archived>, Option<Vec<u8>>), ReplayError> {
    let after = key_cursor(job)?;
    let from_tenant = after.as_deref().and_then(archive_key_tenant);
    let mut tenants = match &job.filter.tenants {
        Some(list) => list.clone(),
        None => queue.archive().archive_tenants()?,
    };
    tenants.sort();
    let (since, until) = (job.filter.since.unwrap_or(0), job.filter.until.unwrap_or(u64::MAX));
    for tenant in tenants.into_iter().filter(|t| from_tenant.as_ref().is_none_or(|from| t >= from)) {
        let resume = after.as_deref().filter(|_| from_tenant.as_deref() == Some(tenant.as_str()));
        let page = queue.archive().archived(&tenant, since, until, resume, job.config.page.max(1))?;
        let Some(last) = page.last().map(|a| a.key.clone()) else { continue };
        let matching = page
            .into_iter()
            .filter(|a| job.filter.source_id.as_ref().is_none_or(|s| *s == a.envelope.source_id))
            .collect();
        return Ok((matching, Some(last)));
    }
    Ok((Vec::new(), None))
}
