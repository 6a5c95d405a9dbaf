//! The store heals itself: after a failed write or WAL sync (a full disk,
//! a device that failed for a moment), by the writer's commits or anyone
//! else's writes (claims, outcomes), a thread asks the writer every
//! [`RECOVERY_EVERY`] to recover the store. The writer reopens it from its
//! files once a probe write shows the disk takes writes again, and commits
//! resume with no restart. Until then every commit is refused, never acked.
//! In `fleet` the same thread has the writer append unsettled hooks again
//! while no group comes (see `settle`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::commit::{Message, WriterStats};
use crate::store::Store;

/// How often a failed store is tried again.
pub const RECOVERY_EVERY: Duration = Duration::from_secs(1);

/// The thread that asks for recovery; stopped when dropped.
pub struct Recovery {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Recovery {
    pub fn spawn(
        writer: mpsc::WeakSender<Message>,
        stats: Arc<WriterStats>,
        store: Arc<dyn Store>,
    ) -> std::io::Result<Recovery> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::Builder::new().name("ankusa-recovery".into()).spawn(move || {
            // Slept in short steps, so a closing queue is not held up.
            let step = Duration::from_millis(50);
            let mut waited = Duration::ZERO;
            while !stopping.load(Ordering::Acquire) {
                std::thread::sleep(step);
                waited += step;
                if waited < RECOVERY_EVERY {
                    continue;
                }
                waited = Duration::ZERO;
                let failed = stats.failed() || store.health().failing();
                if failed && !ask(&writer) {
                    return;
                }
                // `fleet`: unsettled hooks are appended again even when no
                // group comes to carry them.
                if !failed && stats.unsettled.load(Ordering::Relaxed) > 0 && !nudge(&writer) {
                    return;
                }
            }
        })?;
        Ok(Recovery { stop, thread: Some(thread) })
    }
}

/// Ask the writer to settle its unsettled hooks (unless it is busy: a
/// group settles them first anyway); `false` once the writer is gone.
fn nudge(writer: &mpsc::WeakSender<Message>) -> bool {
    let Some(writer) = writer.upgrade() else { return false };
    !matches!(writer.try_send(Message::Settle), Err(mpsc::error::TrySendError::Closed(_)))
}

/// Ask the writer to recover; `false` once the writer is gone.
fn ask(writer: &mpsc::WeakSender<Message>) -> bool {
    let Some(writer) = writer.upgrade() else { return false };
    let (reply, answer) = oneshot::channel();
    if writer.blocking_send(Message::Recover { reply }).is_err() {
        return false;
    }
    drop(writer);
    match answer.blocking_recv() {
        Ok(Ok(_)) => {}
        // Most often the disk is still full: said once a second at most.
        Ok(Err(e)) => tracing::warn!("the store has not recovered yet: {e}"),
        Err(_) => return false,
    }
    true
}

impl Drop for Recovery {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
