//! Outcomes published for takeovers: rows delivered (a taker passes them
//! over) and dead letters (a taker keeps them in its DLQ), on the node's
//! outcome subject, in batches.
//!
//! Off the delivery path: the settler hands outcomes over and goes on; a
//! task publishes what gathered every [`FLUSH_EVERY`]. What is not yet
//! published when the node dies is what a takeover may deliver again, so
//! once the oldest outcome waiting is older than [`UNPUBLISHED_AT_MOST`]
//! the publisher is [`behind`](OutcomeLog::behind) and the node claims no
//! more rows until it catches up: a node cut off from NATS but not from
//! its sinks stops delivering within that time, not when its lease's
//! proof runs out. While NATS is away, outcomes wait (up to
//! [`MAX_WAITING`], then the oldest are dropped: more duplicates after a
//! takeover, never a loss).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream;

use crate::error_class::ErrorClass;
use crate::queue::codec::{CodecError, Reader, Writer};
use crate::queue::{FinalOutcome, OutcomeLog};

/// How often gathered outcomes are published.
pub const FLUSH_EVERY: Duration = Duration::from_millis(50);
/// The age the oldest unpublished outcome may reach before the node stops
/// claiming rows: the deliveries a takeover can repeat are those of this
/// last stretch, plus those in flight.
pub const UNPUBLISHED_AT_MOST: Duration = Duration::from_millis(100);
/// Outcomes per message at most.
const PER_MESSAGE: usize = 2_000;
/// Outcomes held while NATS is away at most.
const MAX_WAITING: usize = 1_000_000;
const VERSION: u8 = 1;

type Row = (u64, u16, FinalOutcome);

/// One published message: a store's outcomes.
pub struct Outcomes {
    /// The store's id (hex), as its hooks' headers name it.
    pub store: String,
    pub rows: Vec<Row>,
}

pub fn encode(store: &str, rows: &[Row]) -> Vec<u8> {
    let mut w = Writer::with_capacity(16 + rows.len() * 16);
    w.u8(VERSION).str(store).u32(rows.len() as u32);
    for (seq, sink, outcome) in rows {
        w.u64(*seq).u16(*sink);
        match outcome {
            FinalOutcome::Delivered => {
                w.u8(0);
            }
            FinalOutcome::Dead { dead_at, reason, class, attempts } => {
                w.u8(1).u64(*dead_at).str(reason).str(class.as_str()).u32(*attempts);
            }
        }
    }
    w.finish()
}

pub fn decode(bytes: &[u8]) -> Result<Outcomes, CodecError> {
    let mut r = Reader::new(bytes, "published outcomes");
    r.version(VERSION)?;
    let store = r.string("store")?;
    let count = r.u32()? as usize;
    let mut rows = Vec::with_capacity(count.min(PER_MESSAGE));
    for _ in 0..count {
        let (seq, sink) = (r.u64()?, r.u16()?);
        let outcome = match r.u8()? {
            0 => FinalOutcome::Delivered,
            1 => FinalOutcome::Dead {
                dead_at: r.u64()?,
                reason: r.string("reason")?,
                class: r
                    .string("class")?
                    .parse::<ErrorClass>()
                    .map_err(|_| CodecError::Invalid { what: "published outcomes", field: "class" })?,
                attempts: r.u32()?,
            },
            _ => return Err(CodecError::Invalid { what: "published outcomes", field: "kind" }),
        };
        rows.push((seq, sink, outcome));
    }
    r.end()?;
    Ok(Outcomes { store, rows })
}

/// Outcomes not yet published: those waiting, each with when it was
/// recorded, and when the oldest of those being published was.
#[derive(Default)]
struct Waiting {
    rows: VecDeque<(Instant, Row)>,
    publishing_since: Option<Instant>,
}

impl Waiting {
    /// When the oldest outcome not yet published was recorded.
    fn oldest(&self) -> Option<Instant> {
        match (self.publishing_since, self.rows.front().map(|(at, _)| *at)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

pub struct Publisher {
    waiting: Mutex<Waiting>,
    context: jetstream::Context,
    subject: String,
    store: String,
}

impl Publisher {
    /// Start publishing what gathers every [`FLUSH_EVERY`], until the
    /// queue lets go of it.
    pub fn start(context: jetstream::Context, subject: String, store: String) -> Arc<Publisher> {
        let publisher = Arc::new(Publisher { waiting: Mutex::new(Waiting::default()), context, subject, store });
        let running = Arc::downgrade(&publisher);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(FLUSH_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(publisher) = running.upgrade() else { return };
                if let Err(e) = publisher.flush().await {
                    tracing::warn!("publishing delivery outcomes failed (kept, tried again): {e}");
                }
            }
        });
        publisher
    }

    /// Publish everything waiting; what fails goes back to the front.
    pub async fn flush(&self) -> Result<(), String> {
        loop {
            let (since, rows): (Instant, Vec<Row>) = {
                let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
                let n = waiting.rows.len().min(PER_MESSAGE);
                let Some(since) = waiting.rows.front().map(|(at, _)| *at) else { return Ok(()) };
                waiting.publishing_since = Some(since);
                (since, waiting.rows.drain(..n).map(|(_, row)| row).collect())
            };
            let payload = encode(&self.store, &rows);
            let published = match self.context.publish(self.subject.clone(), payload.into()).await {
                Ok(ack) => ack.await.map(|_| ()).map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
            waiting.publishing_since = None;
            if let Err(e) = published {
                // Back in front, each as old as the oldest of them: the
                // publisher may seem behind a little early, never late.
                for row in rows.into_iter().rev() {
                    waiting.rows.push_front((since, row));
                }
                return Err(e);
            }
        }
    }
}

impl OutcomeLog for Publisher {
    fn record(&self, outcomes: Vec<Row>) {
        let now = Instant::now();
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        waiting.rows.extend(outcomes.into_iter().map(|row| (now, row)));
        let over = waiting.rows.len().saturating_sub(MAX_WAITING);
        if over > 0 {
            waiting.rows.drain(..over);
            tracing::warn!(dropped = over, "NATS has been away long: the oldest unpublished outcomes are dropped");
        }
    }

    fn behind(&self) -> bool {
        let waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        waiting.oldest().is_some_and(|at| at.elapsed() > UNPUBLISHED_AT_MOST)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_round_trip_and_damage_is_an_error() {
        let rows = vec![
            (7, 0, FinalOutcome::Delivered),
            (
                9,
                2,
                FinalOutcome::Dead { dead_at: 5, reason: "refused".into(), class: ErrorClass::Permanent, attempts: 3 },
            ),
        ];
        let bytes = encode("00ff", &rows);
        let back = decode(&bytes).expect("decodes");
        assert_eq!(back.store, "00ff");
        assert_eq!(back.rows, rows);
        for cut in [0, 3, bytes.len() - 1] {
            assert!(decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
    }
}
