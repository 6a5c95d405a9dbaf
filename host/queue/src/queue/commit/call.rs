//! What the writer is asked to do: calls of hooks to commit (their kind,
//! each hook as its caller prepared it, what a hook log said of it so far)
//! and maintenance messages; and what a call's answer becomes when its
//! commit fails.

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::queue::dedupe::Original;
use crate::queue::envelope::Envelope;
use crate::queue::reply::Reply;
use crate::queue::{DeliveryRow, EntryOutcome, QueueError, Refusal, RowState};
use crate::store::Batch;
use crate::store::keys::index::LineId;

/// What a call commits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// New hooks from the edge: tenants, dedupe, quotas, per entry.
    Enqueue,
    /// Archived hooks again: fresh seqs, no dedupe, no quotas.
    Redrive,
    /// Hooks out of the quarantine pen: enqueue's checks, but a tenant or
    /// quota refusal refuses the whole call (the pen keeps its entries).
    Release,
    /// Hooks taken over from another node's replicated log: fresh seqs, no
    /// dedupe, no quotas (they were acked once already).
    Import,
    /// Hooks this store put in its hook-framed intake log (`fleet`) and
    /// has not committed: under the seqs they were logged with, no dedupe,
    /// no quotas (see `settle`).
    Settle,
}

impl Kind {
    /// Hooks that were checked when first taken: no tenant cap, no dedupe.
    pub(super) fn acked_before(self) -> bool {
        matches!(self, Kind::Redrive | Kind::Import | Kind::Settle)
    }

    /// Hooks seen for the first time on any node, which the archive keeps.
    pub(super) fn archived(self) -> bool {
        !matches!(self, Kind::Redrive | Kind::Import)
    }
}

/// One hook, prepared by its caller.
#[derive(Clone)]
pub struct Prepared {
    pub envelope: Envelope,
    pub encoded: Vec<u8>,
    /// (sink index, encoded delivery row) for every sink bound to its
    /// source: the row's value, which needs no seq.
    pub rows: Vec<(u16, Vec<u8>)>,
    /// The place of each of those rows whose binding delivers in order.
    pub lines: Vec<LinePlace>,
    /// The stored dedupe key, if the hook carries one.
    pub dedupe: Option<String>,
    /// What the caller's read found under that key.
    pub prefetched: Option<Original>,
    /// Its identity in a hook-framed intake log's duplicate window, when
    /// not derived from its dedupe key (an imported hook's origin).
    pub msg_id: Option<String>,
    /// What a hook-framed intake log said of it in an earlier pass.
    pub logged: Logged,
}

/// A row's place in its ordered line, as its caller found the line: a row
/// behind an earlier one of its line is written waiting (no due entry); if
/// the line emptied meanwhile, the claim after the commit moves it up (see
/// `lines`).
#[derive(Clone, Debug)]
pub struct LinePlace {
    pub sink: u16,
    pub line: LineId,
    pub waiting: bool,
}

impl LinePlace {
    /// The places of encoded rows whose bindings deliver in order: a hook
    /// committed again keeps its places in its lines.
    pub fn of_rows(rows: &[(u16, Vec<u8>)]) -> Vec<LinePlace> {
        rows.iter()
            .filter_map(|(sink, value)| {
                let row = DeliveryRow::decode(0, *sink, value).ok()?;
                let line = row.line_id().filter(|_| row.in_line())?;
                Some(LinePlace { sink: *sink, line, waiting: row.state == RowState::Waiting })
            })
            .collect()
    }
}

/// What a hook-framed intake log (`fleet`) said of an entry, kept across
/// the passes of one group: a duplicate is planned again without it, and
/// a hook the log took keeps the seq it was logged under.
#[derive(Clone, Debug, Default)]
pub enum Logged {
    #[default]
    Not,
    /// In the log under this seq.
    Under(u64),
    Duplicate(Box<Envelope>),
    /// Perhaps in the log under this seq: to be appended again under the
    /// same message id, which tells (an unsettled hook, see `settle`).
    Resend(u64),
    /// The log did not take it; `sent`: it may hold it all the same.
    Failed {
        seq: u64,
        sent: bool,
    },
}

pub struct Call {
    pub kind: Kind,
    pub entries: Vec<Prepared>,
    /// Store ops committed in the same batch (a job cursor, pen deletes).
    pub extra: Batch,
    pub deadline: Option<Instant>,
    pub now_ms: u64,
    /// The commit epoch the caller's prefetch read at.
    pub prefetch_epoch: u64,
    pub reply: Reply,
}

impl Call {
    /// A call the writer made itself (unsettled hooks): nobody waits on it.
    pub(super) fn is_internal(&self) -> bool {
        self.kind == Kind::Settle && matches!(&self.reply, Reply::Each(replies) if replies.is_empty())
    }
}

pub enum Message {
    Commit(Call),
    /// Delete up to `limit` dedupe keys expired by `now_ms`.
    Sweep {
        now_ms: u64,
        limit: usize,
        reply: oneshot::Sender<Result<usize, QueueError>>,
    },
    /// Mark or unmark a tenant as being erased.
    SetErasing {
        tenant: String,
        erasing: bool,
        reply: oneshot::Sender<Result<(), QueueError>>,
    },
    /// Drop a tenant that holds no rows: its dedupe keys, counters and
    /// place in the tenant book. Replies with the keys removed.
    Forget {
        tenant: String,
        reply: oneshot::Sender<Result<u64, QueueError>>,
    },
    /// After a failed write or sync: reopen the store if the disk takes
    /// writes again. Replies whether the store recovered.
    Recover {
        reply: oneshot::Sender<Result<bool, QueueError>>,
    },
    /// `fleet`: append unsettled hooks again and commit what the log has.
    Settle,
    /// `fleet`, at boot: commit the hooks this store logged past its
    /// settled mark (and past `floor`) that it lacks. Replies with the
    /// commit's outcomes.
    SettleFromLog {
        floor: u64,
        reply: oneshot::Sender<Result<Vec<EntryOutcome>, QueueError>>,
    },
}

/// Each call's answer, in call order.
pub(super) type Replies = Vec<Result<Vec<EntryOutcome>, QueueError>>;

/// A commit failed: what it was to commit is refused. A duplicate still
/// answers as one when its original is known durable; with `duplicates`
/// (a failed WAL sync, which may not have covered the original) it is
/// refused too.
pub(super) fn refuse(
    reply: Result<Vec<EntryOutcome>, QueueError>,
    kind: Kind,
    refusal: &Refusal,
    duplicates: bool,
) -> Result<Vec<EntryOutcome>, QueueError> {
    let outcomes = reply?;
    if kind != Kind::Enqueue {
        return Err(QueueError::Refused(refusal.clone()));
    }
    Ok(outcomes
        .into_iter()
        .map(|o| match o {
            EntryOutcome::Committed(_) => EntryOutcome::Refused(refusal.clone()),
            EntryOutcome::Duplicate(_) if duplicates => EntryOutcome::Refused(refusal.clone()),
            other => other,
        })
        .collect())
}
