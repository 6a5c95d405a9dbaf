//! The settler: one thread that records attempts' outcomes in batches.
//!
//! A finished delivery hands its row's [`Settlement`] over and is done. The
//! settler takes every settlement waiting and records them with one store
//! write. Under ingest every store write queues behind the writer's synced
//! commits, so a write per delivery would hold a drain to the disk's fsync
//! rate; a write per batch does not. The batch grows by itself while a
//! write waits, so nothing is held back to fill it.
//!
//! An outcome not yet written when the node stops leaves its row inflight,
//! and the next start makes it due again: at-least-once, as before.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};

use crate::queue::{Queue, Settlement};

/// Outcomes written in one batch at most.
const MAX_BATCH: usize = 1024;

/// One row's outcome: (seq, sink index, what became of it).
pub(super) type Settling = (u64, u16, Settlement);

/// Start the settler thread; it ends once every sender is dropped and
/// what they sent is written.
pub(super) fn start(queue: Arc<Queue>) -> std::io::Result<Sender<Settling>> {
    let (tx, rx) = channel();
    std::thread::Builder::new().name("ankusa-settle".into()).spawn(move || run(&queue, &rx))?;
    Ok(tx)
}

fn run(queue: &Queue, rx: &Receiver<Settling>) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        if let Err(e) = queue.settle(&batch) {
            // The rows stay inflight; the next start makes them due again.
            tracing::error!(rows = batch.len(), "cannot record delivery outcomes: {e}");
        }
        crate::metrics::metrics().settle_batch.observe(batch.len() as f64);
    }
}
