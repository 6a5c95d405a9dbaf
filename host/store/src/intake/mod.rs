//! The intake log: a second, independent durable copy of every committed
//! batch (`wal.mode: dual`), behind the [`IntakeLog`] trait so the queue
//! depends on what a log does, not on how. The embedded log is a segment
//! log of CRC-framed files on its own path ([`SegmentLog`], ideally on
//! another volume); a replicated log can take its place behind the same
//! trait.
//!
//! Invariants every log keeps: an append is durable when it returns `Ok`;
//! replay returns every appended record in order, tells a torn tail (never
//! acked: dropped) from damage before it (an error naming where), and
//! never drops an acked record.
//!
//! Callers: the queue's writer (appends, checkpoints), the queue's open
//! (replay of half commits) and `ankusa store rebuild` ([`read_all`]).
//!
//! A log takes what the writer commits in one of two framings ([`Intake`]):
//! the segment log ([`IntakeLog`]) keeps each group's store batch as one
//! record; the JetStream log (`wal.mode: fleet`, a [`HookLog`],
//! [`JetStreamLog`]) keeps each hook as its own replicated message, so that
//! a peer can take hooks over one by one and the stream's message-id window
//! absorbs a retry that reaches another node.

mod bodies;
mod jetstream;
mod reader;
mod segment;

use std::io;

use thiserror::Error;

pub use bodies::{Bodies, BodyError};
pub use jetstream::{
    JetStreamLog, PublishStats, SEQ_HEADER, STORE_HEADER, Streams, last_position, logged_by, stream_identity,
};
pub use reader::{Read, StoredMessage, SubjectReader};
use segment::MAX_RECORD;
pub use segment::{IntakeOptions, MAGIC, MAGIC_V1, MAGIC_V2, SEAL_LEN, SegmentLog, read_all};

/// One hook as a hook-framed log keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookRecord {
    /// Identity for the log's duplicate window (a provider's dedupe key,
    /// hashed, or the origin of an imported hook); `None`: never a duplicate.
    pub msg_id: Option<String>,
    /// The hook's seq in this node's store.
    pub seq: u64,
    pub payload: Vec<u8>,
}

/// What a hook-framed log did with one hook. Each hook of a round gets
/// its own answer: one that failed does not hide what the log did with
/// the others.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Appended {
    /// Durable, under this position in the log.
    Stored { position: u64 },
    /// The log already had a hook with the same `msg_id`, at `position`:
    /// this is the original's payload, and nothing was added.
    /// `logged_seq` is the original's seq when this store logged it.
    Duplicate { original: Vec<u8>, position: u64, logged_seq: Option<u64> },
    /// The log already had a hook with the same `msg_id`, at `position`,
    /// but its copy can never be read back (its body is gone from the
    /// bucket): no answer can name the original. `logged_seq` as above.
    Unreadable { position: u64, logged_seq: Option<u64>, reason: String },
    /// Not taken. `sent`: it may still be in the log (it left, and no
    /// answer came back), so only a second append under the same
    /// `msg_id` can tell.
    Failed { reason: String, sent: bool },
}

/// A round of hooks handed to a [`HookLog`], its answers still to come.
/// The log sends a round at once and answers it later, so the writer can
/// send the next round while this one awaits its quorum.
pub struct Sent {
    answers: tokio::sync::oneshot::Receiver<Vec<Appended>>,
    hooks: usize,
}

impl Sent {
    /// A round whose answers come through the returned sender, one per hook.
    pub fn channel(hooks: usize) -> (tokio::sync::oneshot::Sender<Vec<Appended>>, Sent) {
        let (tx, answers) = tokio::sync::oneshot::channel();
        (tx, Sent { answers, hooks })
    }

    /// A round answered already.
    pub fn answered(answers: Vec<Appended>) -> Sent {
        let (tx, sent) = Sent::channel(answers.len());
        let _ = tx.send(answers);
        sent
    }

    /// One answer per hook. A log that went away without answering, or
    /// answered the wrong number of hooks, failed every hook, and each may
    /// have left.
    pub async fn answers(&mut self) -> Vec<Appended> {
        let hooks = self.hooks;
        let failed = |reason: String| vec![Appended::Failed { reason, sent: true }; hooks];
        match (&mut self.answers).await {
            Ok(answers) if answers.len() == hooks => answers,
            Ok(answers) => failed(format!("{} answers to {hooks} hooks", answers.len())),
            Err(_) => failed("the intake log stopped before answering".into()),
        }
    }
}

/// A hook this store logged, read back from the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoggedHook {
    pub position: u64,
    pub seq: u64,
    pub payload: Vec<u8>,
}

/// A log of whole groups (`wal.mode: dual`): what the writer appends
/// beside each synced store write, and what completes a store that lost
/// one.
pub trait IntakeLog: Send + 'static {
    /// Append one group's batch, covering seqs `first_seq..=last_seq`;
    /// durable once this returns `Ok`, absent if it returns an error.
    fn append(&mut self, first_seq: u64, last_seq: u64, payload: &[u8]) -> Result<(), IntakeError>;
    /// Bytes the log holds (the queue refuses hooks past its bound).
    fn bytes(&self) -> u64;
    /// Whether a checkpoint now would let the log drop something.
    fn wants_checkpoint(&self) -> bool;
    /// Drop what holds only seqs below `seq`: the store has flushed them.
    fn truncate_below(&mut self, seq: u64) -> Result<(), IntakeError>;
    /// Every record the log holds now, in order (to complete a store that
    /// recovered from a failed write).
    fn replay(&self) -> Result<Vec<LoggedGroup>, IntakeError>;
}

/// A replicated log of hooks one by one (`wal.mode: fleet`), taken before
/// the store write, with a duplicate window by message id that every node
/// shares.
pub trait HookLog: Send + 'static {
    /// Send a round of hooks: they go out in order, before any round sent
    /// later, and each gets its answer through the returned [`Sent`].
    fn send(&mut self, hooks: &[HookRecord]) -> Sent;
    /// What names the log itself, so a position kept from it is never read
    /// against another log (a stream recreated).
    fn identity(&self) -> String;
    /// The hooks this store logged past `position`, in order, and the
    /// log's last position (to settle a store that lost some of them).
    fn logged_since(&self, position: u64) -> Result<(Vec<LoggedHook>, u64), IntakeError>;
}

/// The intake log a queue opens with, by how it takes a commit.
pub enum Intake {
    /// `dual`: one record per group, and what the log replayed at open.
    Groups(Box<dyn IntakeLog>, Replay),
    /// `fleet`: one message per hook, before the store write.
    Hooks(Box<dyn HookLog>),
}

/// Open the embedded log at `options.dir`, replaying what it holds.
pub fn open(options: IntakeOptions) -> Result<(Box<dyn IntakeLog>, Replay), IntakeError> {
    let (log, replay) = SegmentLog::open(options)?;
    Ok((Box::new(log), replay))
}

#[derive(Debug, Error)]
pub enum IntakeError {
    #[error("intake log {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error(
        "intake log {path} is damaged at offset {offset}: {reason}; acked hooks may be there, so it is not truncated"
    )]
    Damaged { path: String, offset: u64, reason: String },
    #[error("an intake record of {bytes} bytes is over the {MAX_RECORD}-byte frame limit")]
    TooLarge { bytes: usize },
    #[error("an intake record must cover first_seq ..= last_seq, got {first_seq} ..= {last_seq}")]
    Seqs { first_seq: u64, last_seq: u64 },
    #[error("JetStream did not take the hooks: {0}")]
    Unavailable(String),
    #[error(
        "intake log {path} stopped taking appends: a failed append could not be cut off ({reason}); a restart replays it"
    )]
    Stopped { path: String, reason: String },
}

/// One group as the intake log holds it: the seqs it spans and its
/// encoded store batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoggedGroup {
    pub first_seq: u64,
    pub last_seq: u64,
    pub payload: Vec<u8>,
}

/// What replay found.
#[derive(Debug, Default)]
pub struct Replay {
    pub records: Vec<LoggedGroup>,
    /// Bytes cut from the end of the last segment (a torn, unacked tail).
    pub torn_bytes: u64,
}
