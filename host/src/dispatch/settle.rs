//! The settler: one thread that records attempts' outcomes in batches.
//!
//! A finished delivery hands its row's [`Settlement`] over and is done. The
//! settler takes every settlement waiting and records them with one store
//! write. Under ingest every store write queues behind the writer's synced
//! commits, so a write per delivery would hold a drain to the disk's fsync
//! rate; a write per batch does not. The batch grows by itself while a
//! write waits, so nothing is held back to fill it.
//!
//! A write that fails (a full disk, a store recovering) loses nothing:
//! its outcomes are held in memory and written, before any later ones,
//! once the store takes writes again, so no row is left inflight with no
//! attempt running. Said once at ERROR when writes start failing and once
//! when they are written. Only outcomes still held when the node stops
//! leave their rows inflight, and the next start makes them due again:
//! at-least-once, as before.

use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, TryRecvError, channel};
use std::time::{Duration, Instant};

use crate::queue::{Deliveries, Settlement};

/// Outcomes written in one batch at most.
const MAX_BATCH: usize = 1024;
/// After a failed write, the wait before the next try doubles from this...
const RETRY_FIRST: Duration = Duration::from_millis(50);
/// ... up to this: outcomes are written within it of the store's recovery.
const RETRY_MAX: Duration = Duration::from_millis(500);

/// One row's outcome: (seq, sink index, what became of it).
pub(super) type Settling = (u64, u16, Settlement);

/// Start the settler thread; it ends once every sender is dropped and
/// what they sent is written (or, with the store failing, given up).
pub(super) fn start(deliveries: Deliveries) -> std::io::Result<(Sender<Settling>, std::thread::JoinHandle<()>)> {
    let (tx, rx) = channel();
    let thread = std::thread::Builder::new().name("ankusa-settle".into()).spawn(move || run(&deliveries, &rx))?;
    Ok((tx, thread))
}

fn run(deliveries: &Deliveries, rx: &Receiver<Settling>) {
    // Outcomes not yet written, oldest first.
    let mut held: Vec<Settling> = Vec::new();
    let mut failing: Option<Instant> = None;
    let mut wait = RETRY_FIRST;
    let mut senders_gone = false;
    loop {
        if held.is_empty() {
            match rx.recv() {
                Ok(first) => held.push(first),
                Err(_) => return,
            }
        }
        loop {
            match rx.try_recv() {
                Ok(next) => held.push(next),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    senders_gone = true;
                    break;
                }
            }
        }
        let error = write_held(deliveries, &mut held);
        match (error, failing) {
            (None, None) => {}
            (None, Some(since)) => {
                tracing::warn!(after_ms = since.elapsed().as_millis() as u64, "delivery outcomes are written again");
                failing = None;
                wait = RETRY_FIRST;
            }
            (Some(e), _) if senders_gone => {
                tracing::error!(
                    rows = held.len(),
                    "delivery outcomes not written before the stop ({e}); their rows are due again at the next start"
                );
                return;
            }
            (Some(e), None) => {
                tracing::error!(rows = held.len(), "cannot record delivery outcomes ({e}); held in memory and retried");
                failing = Some(Instant::now());
            }
            (Some(_), Some(_)) => {}
        }
        if failing.is_some() {
            // New outcomes join the held ones while the store recovers.
            match rx.recv_timeout(wait) {
                Ok(next) => held.push(next),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => senders_gone = true,
            }
            wait = (wait * 2).min(RETRY_MAX);
        }
    }
}

/// Write `held` in batches, oldest first, removing what was written; the
/// error that stopped it, if one did.
fn write_held(deliveries: &Deliveries, held: &mut Vec<Settling>) -> Option<crate::queue::QueueError> {
    let mut written = 0;
    let mut error = None;
    for batch in held.chunks(MAX_BATCH) {
        if let Err(e) = deliveries.settle(batch) {
            error = Some(e);
            break;
        }
        written += batch.len();
        crate::metrics::metrics().settle_batch.observe(batch.len() as f64);
    }
    held.drain(..written);
    error
}
