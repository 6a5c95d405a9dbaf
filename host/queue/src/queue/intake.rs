//! The intake's commit calls: each call's work that needs no seq is done
//! here, in the caller (encoding, rows, the dedupe prefetch), and the
//! call is handed to the writer, which assigns seqs and commits.

use std::sync::atomic::Ordering;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use std::collections::HashSet;

use super::commit::{Call, Kind, LinePlace, Logged, Message, Prepared};
use super::reply::Reply;
use super::{
    Core, DeliveryRow, Entry, EntryOutcome, EntryReply, Intake, Planned, QueueError, RowState, damage, dedupe,
};
use crate::store::keys;
use crate::store::keys::index::LineId;
use crate::store::{Batch, Cf};

impl Core {
    /// Prepare a call's entries: every piece of work that needs no seq,
    /// done here in the caller so the writer only assigns seqs and keys.
    /// Each hook is encoded, with one encoded delivery row per sink (due
    /// now, carrying `replay_id`), and its dedupe key is prefetched, noting
    /// the commit epoch the read saw.
    pub(super) fn prepare(
        &self,
        entries: Vec<Entry>,
        dedupe: bool,
        replay_id: Option<&str>,
    ) -> Result<Planned, QueueError> {
        let prefetch_epoch = self.stats.epoch.load(Ordering::Acquire);
        let now_ms = self.config.clock.now_ms();
        let stored: Vec<Option<String>> = entries
            .iter()
            .map(|e| e.envelope.dedupe_key.as_deref().filter(|_| dedupe).map(dedupe::stored_key))
            .collect();
        let keys: Vec<Vec<u8>> = entries
            .iter()
            .zip(&stored)
            .filter_map(|(e, s)| {
                s.as_ref().map(|s| keys::dedupe::entry(&e.envelope.tenant_id, &e.envelope.source_id, s))
            })
            .collect();
        let mut found = if keys.is_empty() {
            Vec::new()
        } else {
            damage::absent_if_damaged(self.store.multi_get_each(Cf::Dedupe, &keys)?)?
        }
        .into_iter();
        // Lines this call already puts a row in: its later rows wait.
        let mut joined: HashSet<LineId> = HashSet::new();
        let entries = entries
            .into_iter()
            .zip(stored)
            .map(|(Entry { envelope, sinks, lines }, dedupe)| {
                let prefetched = match dedupe {
                    Some(_) => found.next().flatten().and_then(|v| dedupe::Original::decode(&v).ok()),
                    None => None,
                };
                let rows_of_hook = u16::try_from(sinks.len()).unwrap_or(0);
                let places: Vec<LinePlace> = lines
                    .iter()
                    .map(|(sink, line)| {
                        let line = LineId {
                            tenant: envelope.tenant_id.clone(),
                            source: envelope.source_id.clone(),
                            sink: *sink,
                            key: line.key.clone(),
                        };
                        let waiting = !joined.insert(line.clone()) || self.line_occupied(&line)?;
                        Ok(LinePlace { sink: *sink, line, waiting })
                    })
                    .collect::<Result<_, QueueError>>()?;
                let rows = sinks
                    .into_iter()
                    .map(|(sink, sink_name)| {
                        let line = lines.iter().find(|(s, _)| *s == sink).map(|(_, line)| line.clone());
                        let waiting = places.iter().any(|place| place.sink == sink && place.waiting);
                        let row = DeliveryRow {
                            seq: 0,
                            sink,
                            tenant: envelope.tenant_id.clone(),
                            source: envelope.source_id.clone(),
                            sink_name,
                            bytes: envelope.size(),
                            attempts: 0,
                            replay_id: replay_id.map(str::to_string),
                            state: if waiting { RowState::Waiting } else { RowState::Due { due_at: now_ms } },
                            rows_of_hook,
                            last_failure: None,
                            line,
                            previous_dead: None,
                        };
                        // The row's value holds neither its seq nor its sink:
                        // they are its key, which the writer makes.
                        (sink, row.encode())
                    })
                    .collect();
                Ok(Prepared {
                    encoded: envelope.encode(),
                    envelope,
                    rows,
                    lines: places,
                    dedupe,
                    prefetched,
                    msg_id: None,
                    logged: Logged::Not,
                })
            })
            .collect::<Result<_, QueueError>>()?;
        Ok(Planned { entries, prefetch_epoch, now_ms })
    }

    pub(super) async fn call(
        &self,
        kind: Kind,
        planned: Planned,
        extra: Batch,
        deadline: Option<Instant>,
    ) -> Result<Vec<EntryOutcome>, QueueError> {
        let (reply, outcome) = oneshot::channel();
        let Planned { entries, prefetch_epoch, now_ms } = planned;
        let reply = Reply::Call(reply);
        self.hand_over(Call { kind, entries, extra, deadline, now_ms, prefetch_epoch, reply }).await;
        outcome.await.map_err(|_| QueueError::Closed)?
    }

    /// Queue `call` for the writer; its reply hears the outcome, or that
    /// the queue is closed.
    pub(super) async fn hand_over(&self, call: Call) {
        let sent = match self.writer() {
            Ok(writer) => writer.send(Message::Commit(call)).await,
            Err(e) => return call.reply.send(Err(e)),
        };
        if let Err(mpsc::error::SendError(Message::Commit(call))) = sent {
            call.reply.send(Err(QueueError::Closed));
        }
    }
}

impl Intake {
    /// Commit `entries` durably in one synced batch (with whatever other
    /// calls the writer merges them with). `deadline` bounds only the wait
    /// for the writer to start: once started, the call waits for the
    /// commit's outcome. Dropping the future before the writer starts the
    /// batch withdraws the call (`caller_gone`); nothing of it is written.
    pub async fn enqueue(
        &self,
        entries: Vec<Entry>,
        deadline: Option<Instant>,
    ) -> Result<Vec<EntryOutcome>, QueueError> {
        let planned = self.prepare(entries, true, None)?;
        self.call(Kind::Enqueue, planned, Batch::new(), deadline).await
    }

    /// `enqueue` for callers that each wait for their own entry. The call
    /// is queued for the writer and this returns at once; each entry's
    /// reply is answered with its outcome by whichever thread learns it
    /// (once durable, refused or found a duplicate). Every reply is called
    /// once, or dropped unanswered if the queue closes first. Unlike a
    /// dropped `enqueue`, an entry whose waiter left is still committed.
    pub async fn enqueue_each(&self, entries: Vec<(Entry, EntryReply)>, deadline: Option<Instant>) {
        let (entries, replies): (Vec<_>, Vec<_>) = entries.into_iter().unzip();
        let reply = Reply::Each(replies);
        let Planned { entries, prefetch_epoch, now_ms } = match self.prepare(entries, true, None) {
            Ok(planned) => planned,
            Err(e) => return reply.send(Err(e)),
        };
        let call = Call { kind: Kind::Enqueue, entries, extra: Batch::new(), deadline, now_ms, prefetch_epoch, reply };
        self.hand_over(call).await;
    }
}
