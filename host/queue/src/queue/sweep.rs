//! The queue's background sweep: dedupe keys past their time to live and
//! archived hooks past their retention.

use std::sync::Arc;

use tokio::sync::oneshot;

use super::commit::Message;
use super::{Queue, QueueError};

impl Queue {
    /// Delete up to `limit` dedupe keys that expired by `now_ms`; returns
    /// how many. Run in the background; each call is one batch.
    pub async fn sweep_dedupe(&self, now_ms: u64, limit: usize) -> Result<usize, QueueError> {
        let (reply, answer) = oneshot::channel();
        self.writer()?.send(Message::Sweep { now_ms, limit, reply }).await.map_err(|_| QueueError::Closed)?;
        answer.await.map_err(|_| QueueError::Closed)?
    }

    /// Sweep expired dedupe keys (and archived hooks past their retention)
    /// every `every` until the queue closes, in batches of 10 000 (each
    /// one write through the writer).
    pub fn sweep_in_background(queue: Arc<Queue>, every: std::time::Duration) -> tokio::task::JoinHandle<()> {
        const BATCH: usize = 10_000;
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                loop {
                    match queue.sweep_dedupe(queue.config.clock.now_ms(), BATCH).await {
                        Ok(removed) if removed == BATCH => continue,
                        Ok(_) => break,
                        Err(QueueError::Closed) => return,
                        Err(e) => {
                            tracing::warn!("dedupe sweep failed (tried again later): {e}");
                            break;
                        }
                    }
                }
                if let Some(retention) = queue.config.archive_retention_ms {
                    let sweeping = queue.clone();
                    let before = queue.config.clock.now_ms().saturating_sub(retention);
                    match tokio::task::spawn_blocking(move || sweeping.archive().sweep_archive(before)).await {
                        Ok(Ok(0)) => {}
                        Ok(Ok(removed)) => tracing::info!(removed, "archived hooks past their retention dropped"),
                        Ok(Err(e)) => tracing::warn!("archive sweep failed (tried again later): {e}"),
                        Err(_) => return,
                    }
                }
            }
        })
    }
}
