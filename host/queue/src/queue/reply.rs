//! Where the outcome of a commit call goes: back to the caller whole, or
//! entry by entry straight to each entry's own waiter.
//!
//! The batcher uses the second form: a partition hands a batch to the
//! writer and goes on gathering the next one, and whichever thread learns
//! the outcome (the writer, or the WAL syncer once the batch is durable)
//! answers every request itself, with no task in between to wake.

use tokio::sync::oneshot;

use super::{EntryOutcome, QueueError};

/// Called once with one entry's outcome. Dropping it unanswered tells the
/// waiter nothing more will come.
pub type EntryReply = Box<dyn FnOnce(Result<EntryOutcome, QueueError>) + Send>;

pub enum Reply {
    /// The caller awaits the outcomes of all its entries together.
    Call(oneshot::Sender<Result<Vec<EntryOutcome>, QueueError>>),
    /// One waiter per entry, in the call's order.
    Each(Vec<EntryReply>),
}

impl Reply {
    /// The caller of a whole call is gone, so the call may be withdrawn.
    /// Entries answered one by one are never withdrawn: a record whose
    /// request was abandoned may be the provider's only copy until it
    /// retries, and dedupe absorbs the retry.
    pub fn is_withdrawn(&self) -> bool {
        match self {
            Reply::Call(sender) => sender.is_closed(),
            Reply::Each(_) => false,
        }
    }

    pub fn send(self, outcome: Result<Vec<EntryOutcome>, QueueError>) {
        match self {
            Reply::Call(sender) => {
                let _ = sender.send(outcome);
            }
            Reply::Each(replies) => match outcome {
                // One outcome per entry, in order.
                Ok(outcomes) => replies.into_iter().zip(outcomes).for_each(|(reply, outcome)| reply(Ok(outcome))),
                Err(e) => replies.into_iter().for_each(|reply| reply(Err(e.clone()))),
            },
        }
    }
}
