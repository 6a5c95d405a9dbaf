//! Why an entry, a call or a read of the queue failed.

use thiserror::Error;

use crate::store::StoreError;

/// Which of the two durable copies (`dual` mode) a half result lacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Intake,
    Store,
}

/// Why an entry (or a whole release / redrive) was not acked.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum Refusal {
    /// Its tenant would be one past `tenants.max`.
    #[error("tenant_limit")]
    TenantLimit,
    /// An erase of its tenant is running.
    #[error("tenant_erasing")]
    TenantErasing,
    /// Its dedupe key would be a new live key past a quota.
    #[error("dedupe_quota")]
    DedupeQuota,
    /// `dual` or `fleet`: the intake log could not take the batch (in
    /// `fleet` it may hold hooks of it; nothing is acked or stored).
    #[error("intake_unavailable")]
    IntakeUnavailable,
    /// `dual`: the intake log is full until the store checkpoints.
    #[error("intake_pending")]
    IntakePending,
    /// The store could not commit the batch; nothing written.
    #[error("store_unavailable")]
    StoreUnavailable,
    /// `dual`: one copy has the batch, the other (`missing`) does not.
    /// Not acked; replay on the next boot completes it.
    #[error("half: {missing:?} unavailable: {reason}")]
    Half { missing: Side, reason: String },
}

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum QueueError {
    /// The writer could not start the batch before the caller's deadline;
    /// nothing was written and no seq was consumed.
    #[error("deadline_exceeded")]
    DeadlineExceeded,
    /// The caller went away while its batch waited for the writer; nothing
    /// was written and no seq was consumed. (It is the answer to a caller
    /// no longer there: what shows it is the batch's absence.)
    #[error("caller_gone")]
    CallerGone,
    /// A read or a job's write failed.
    #[error("store_unavailable: {0}")]
    Store(#[from] StoreError),
    /// The operating system refused what the queue needs to run (a
    /// thread, randomness).
    #[error("{0}")]
    Os(String),
    /// A whole call refused (a release or redrive, where one entry's
    /// refusal refuses all, or a commit that failed).
    #[error("{0}")]
    Refused(Refusal),
    /// A DLQ cursor this node did not issue.
    #[error("invalid_cursor")]
    InvalidCursor,
    /// A DLQ query naming more tenants than one call may examine keys.
    #[error("a DLQ query names at most {max} tenants")]
    TooManyTenants { max: usize },
    /// A stored row does not decode.
    #[error("corrupt store: {0}")]
    Corrupt(String),
    /// Only a tenant without rows can be forgotten.
    #[error("tenant {0} still holds delivery rows")]
    TenantHasRows(String),
    /// `dual` mode found the store and its intake log out of step.
    #[error("{0}")]
    Intake(String),
    /// The quarantine pen is at its byte cap; it never evicts.
    #[error("quarantine_full")]
    QuarantineFull,
    /// The writer has stopped (the node is shutting down).
    #[error("the queue is closed")]
    Closed,
    /// The pen's copy beyond this store (`fleet`) could not be made.
    #[error("the pen's copy: {0}")]
    PenCopy(String),
}

impl QueueError {
    /// The store holds damaged data here (a checksum mismatch, or a row
    /// that does not decode): reading it again will not help.
    pub fn is_damage(&self) -> bool {
        matches!(self, QueueError::Corrupt(_) | QueueError::Store(StoreError::Corruption { .. }))
    }
}

impl From<crate::records::RecordError> for QueueError {
    fn from(error: crate::records::RecordError) -> QueueError {
        match error {
            crate::records::RecordError::Store(e) => QueueError::Store(e),
            crate::records::RecordError::Corrupt(reason) => QueueError::Corrupt(reason),
        }
    }
}
