//! Hooks taken over from another node (`fleet`): committed again under
//! this node's seqs, through the writer, so they are logged to this node's
//! own replicated subject like any hook it acked.

use super::commit::{Call, Kind, LinePlace, Logged, Message, Prepared};
use super::handoff::Handoff;
use super::rows::rows_anew;
use super::{EntryOutcome, Handover, QueueError, counter_key};
use crate::store::Batch;

/// One hook to take over.
pub struct Imported {
    pub handoff: Handoff,
    /// Its identity where it came from (`import.<node>.<position>`): a
    /// takeover run again (after its taker died) commits it once.
    pub origin: String,
}

impl Handover {
    /// Commit hooks taken over from another node: fresh seqs, no dedupe and
    /// no quotas (they were acked once already), each row as it was handed
    /// over. A hook whose origin the intake log has seen is answered as a
    /// duplicate and not stored again.
    pub async fn import(&self, hooks: Vec<Imported>) -> Result<Vec<EntryOutcome>, QueueError> {
        let now_ms = self.config.clock.now_ms();
        let mut entries = Vec::with_capacity(hooks.len());
        for Imported { handoff, origin } in hooks {
            let rows = rows_anew(&handoff.rows, now_ms)?;
            entries.push(Prepared {
                envelope: handoff.envelope,
                encoded: handoff.encoded,
                lines: LinePlace::of_rows(&rows),
                rows,
                dedupe: None,
                prefetched: None,
                msg_id: Some(origin),
                logged: Logged::Not,
            });
        }
        let (reply, outcome) = tokio::sync::oneshot::channel();
        let call = Call {
            kind: Kind::Import,
            entries,
            extra: Batch::new(),
            deadline: None,
            now_ms,
            prefetch_epoch: self.stats.epoch.load(std::sync::atomic::Ordering::Acquire),
            reply: super::reply::Reply::Call(reply),
        };
        self.hand_over(call).await;
        outcome.await.map_err(|_| QueueError::Closed)?
    }

    /// `fleet`, before dispatch starts: commit the hooks this store put in
    /// the replicated log and lacks (a crash before its write was synced,
    /// or a round that failed after the log took them), reading the log
    /// past its settled mark and past `floor` (what a peer's takeover took).
    /// Returns how many were committed.
    pub async fn settle_from_log(&self, floor: u64) -> Result<usize, QueueError> {
        let (reply, outcome) = tokio::sync::oneshot::channel();
        self.writer()?.send(Message::SettleFromLog { floor, reply }).await.map_err(|_| QueueError::Closed)?;
        let outcomes = outcome.await.map_err(|_| QueueError::Closed)??;
        Ok(outcomes.iter().filter(|o| matches!(o, EntryOutcome::Committed(_))).count())
    }

    /// Hand final outcomes to `log` from now on (once per queue).
    pub fn set_outcome_log(&self, log: std::sync::Arc<dyn super::OutcomeLog>) {
        let _ = self.outcome_log.set(log);
    }

    /// The node's undelivered rows (due, scheduled or inflight) and dead
    /// rows, from its counters.
    pub fn node_levels(&self) -> Result<(i64, i64), QueueError> {
        let count = |kind| self.store.counter(&counter_key(None, kind));
        Ok((count("pending")? + count("scheduled")? + count("inflight")?, count("dead")?))
    }
}
