//! Acks once the WAL is on disk, off the writer's thread (`disk` mode).
//!
//! The writer writes each group to the store unsynced: it is visible at
//! once, and the writer plans the next group on top of it. The group's
//! answers come here. This thread fsyncs the WAL once for every group
//! written meanwhile and only then answers their callers. So the fsync of
//! one group overlaps the planning and writing of the next, and an ack
//! still never leaves before its bytes are on disk.
//!
//! The WAL is one sequential file: a sync covers every write before it.
//! Every answer of a group comes through here in order, even one that wrote
//! nothing, since a duplicate may name a hook of a group not yet synced.
//!
//! A failed sync refuses every group it was to cover, duplicates included,
//! and every group after it: after a failed fsync the kernel may have
//! dropped the unsynced pages, so a later successful one proves nothing.
//! The store is unavailable until the writer recovers it (it reopens the
//! store from its files once the disk takes writes again; see `recovery`).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::Instant;

use super::call::{Kind, refuse as refused};
use super::stats::WriterStats;
use crate::queue::reply::Reply;
use crate::queue::{EntryOutcome, QueueError, Refusal};
use crate::store::Store;

/// What the sync thread is handed: a written group, or a barrier answered
/// once every group handed over before it has been answered.
enum Item {
    Group(Unsynced),
    Barrier(Sender<()>),
}

/// One group's answers, held until a sync covers them.
pub struct Unsynced {
    pub answers: Vec<(Reply, Kind, Result<Vec<EntryOutcome>, QueueError>)>,
    /// Whether the group wrote to the store.
    pub wrote: bool,
    /// Hooks it committed.
    pub hooks: u64,
}

pub struct Syncer {
    groups: Option<Sender<Item>>,
    stats: Arc<WriterStats>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Syncer {
    pub fn spawn(store: Arc<dyn Store>, stats: Arc<WriterStats>) -> std::io::Result<Syncer> {
        let (groups, rx) = channel();
        let worker = Worker { store, stats: stats.clone() };
        let thread = std::thread::Builder::new().name("ankusa-wal-sync".into()).spawn(move || worker.run(rx))?;
        Ok(Syncer { groups: Some(groups), stats, thread: Some(thread) })
    }

    /// A sync failed: nothing more may be written.
    pub fn failed(&self) -> bool {
        self.stats.sync_failed.load(Ordering::Acquire)
    }

    /// Hand over a written group. Answered here if the thread is gone.
    pub fn hand_over(&self, group: Unsynced) {
        let Some(groups) = &self.groups else { return refuse(group, "the WAL sync thread is gone") };
        if let Err(std::sync::mpsc::SendError(Item::Group(group))) = groups.send(Item::Group(group)) {
            refuse(group, "the WAL sync thread is gone");
        }
    }

    /// Wait until every group handed over so far has been answered.
    pub fn drain(&self) {
        let Some(groups) = &self.groups else { return };
        let (done, answered) = channel();
        if groups.send(Item::Barrier(done)).is_ok() {
            let _ = answered.recv();
        }
    }
}

impl Drop for Syncer {
    /// Every handed-over group is answered before the store can close.
    fn drop(&mut self) {
        drop(self.groups.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

struct Worker {
    store: Arc<dyn Store>,
    stats: Arc<WriterStats>,
}

impl Worker {
    fn run(self, rx: Receiver<Item>) {
        while let Ok(first) = rx.recv() {
            // Groups up to the first barrier share one sync; the barrier is
            // answered after them.
            let mut groups = Vec::new();
            let mut barrier = None;
            for item in std::iter::once(first).chain(rx.try_iter()) {
                match item {
                    Item::Group(group) => groups.push(group),
                    Item::Barrier(done) => {
                        barrier = Some(done);
                        break;
                    }
                }
            }
            self.settle(groups);
            if let Some(done) = barrier {
                let _ = done.send(());
            }
        }
    }

    /// Sync once for `groups` and answer them all.
    fn settle(&self, groups: Vec<Unsynced>) {
        if groups.is_empty() {
            return;
        }
        let hooks: u64 = groups.iter().map(|g| g.hooks).sum();
        let synced = if self.stats.sync_failed.load(Ordering::Acquire) {
            Err("an earlier WAL sync failed".to_string())
        } else if groups.iter().any(|g| g.wrote) {
            self.sync(hooks)
        } else {
            // Everything handed over before these is synced already.
            Ok(())
        };
        match synced {
            Ok(()) => {
                // Counted before anyone hears of them.
                self.stats.count_durable(hooks);
                for group in groups {
                    answer(group);
                }
            }
            Err(reason) => {
                self.stats.last_failure_ms.store(crate::queue::now_ms(), Ordering::Relaxed);
                for group in groups {
                    refuse(group, &reason);
                }
            }
        }
    }

    fn sync(&self, hooks: u64) -> Result<(), String> {
        let started = Instant::now();
        let synced = self.store.sync_wal();
        self.stats.count_commit(started.elapsed(), hooks);
        synced.map_err(|e| {
            tracing::error!("{e}; the store refuses commits until it recovers");
            self.stats.sync_failed.store(true, Ordering::Release);
            e.to_string()
        })
    }
}

fn answer(group: Unsynced) {
    for (reply, _, outcome) in group.answers {
        reply.send(outcome);
    }
}

/// Refuse what a group was to ack, duplicates included.
fn refuse(group: Unsynced, reason: &str) {
    tracing::debug!("refusing a group that no sync covers: {reason}");
    for (reply, kind, outcome) in group.answers {
        reply.send(refused(outcome, kind, &Refusal::StoreUnavailable, true));
    }
}
