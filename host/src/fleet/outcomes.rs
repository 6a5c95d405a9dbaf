//! Outcomes published for takeovers: rows delivered (a taker passes them
//! over) and dead letters (a taker keeps them in its DLQ), on the node's
//! outcome subject, in batches.
//!
//! Off the delivery path: the settler hands outcomes over and goes on; a
//! task publishes what gathered every [`FLUSH_EVERY`]. What is not yet
//! published when the node dies is what a takeover may deliver again, so
//! once the oldest outcome waiting is older than a publish normally takes
//! to leave (see [`Publisher::allowed_age`]) the publisher is
//! [`behind`](OutcomeLog::behind) and the node claims no more rows until
//! it catches up: a node cut off from NATS but not from its sinks stops
//! delivering within that time, not when its lease's proof runs out.
//! While NATS is away, outcomes wait (up to
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
/// The age the oldest unpublished outcome may always reach before the node
/// stops claiming rows: the deliveries a takeover can repeat are those of
/// this last stretch (longer where NATS is far away), plus those in flight.
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
    /// A publish's usual round trip to its ack (a moving average, µs).
    round_trip_us: std::sync::atomic::AtomicU64,
    /// The most `allowed_age` grows to: a quarter of the lease, so a node
    /// far from NATS still stops well before its lease's proof runs out.
    longest_allowed: Duration,
}

impl Publisher {
    /// Start publishing what gathers every [`FLUSH_EVERY`], until the
    /// queue lets go of it.
    pub fn start(context: jetstream::Context, subject: String, store: String, lease_ttl: Duration) -> Arc<Publisher> {
        let publisher = Arc::new(Publisher {
            waiting: Mutex::new(Waiting::default()),
            context,
            subject,
            store,
            round_trip_us: std::sync::atomic::AtomicU64::new(0),
            longest_allowed: (lease_ttl / 4).max(UNPUBLISHED_AT_MOST),
        });
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
            let sent = Instant::now();
            let published = match self.context.publish(self.subject.clone(), payload.into()).await {
                Ok(ack) => ack.await.map(|_| ()).map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            if published.is_ok() {
                self.note_round_trip(sent.elapsed());
            }
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

impl Publisher {
    fn note_round_trip(&self, took: Duration) {
        use std::sync::atomic::Ordering::Relaxed;
        let took = took.as_micros().min(u64::MAX as u128) as u64;
        let before = self.round_trip_us.load(Relaxed);
        let average = if before == 0 { took } else { before - before / 8 + took / 8 };
        self.round_trip_us.store(average, Relaxed);
    }

    /// How old the oldest unpublished outcome may grow before the node
    /// stops claiming rows: [`UNPUBLISHED_AT_MOST`], or a flush's wait and
    /// two usual round trips where NATS is farther, at most a quarter
    /// lease. (A fixed 100 ms closed claims whenever NATS was 50 ms away.)
    pub fn allowed_age(&self) -> Duration {
        let round_trip = Duration::from_micros(self.round_trip_us.load(std::sync::atomic::Ordering::Relaxed));
        allowed_age(round_trip, self.longest_allowed)
    }
}

fn allowed_age(round_trip: Duration, longest: Duration) -> Duration {
    (FLUSH_EVERY + round_trip * 2).clamp(UNPUBLISHED_AT_MOST, longest)
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
        let allowed = self.allowed_age();
        waiting.oldest().is_some_and(|at| at.elapsed() > allowed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_age_allowed_follows_the_round_trip_between_100_ms_and_a_quarter_lease() {
        let quarter = Duration::from_millis(500);
        let ms = Duration::from_millis;
        assert_eq!(allowed_age(ms(1), quarter), ms(100), "loopback");
        assert_eq!(allowed_age(ms(50), quarter), ms(150), "NATS 50 ms away");
        assert_eq!(allowed_age(ms(2_000), quarter), quarter, "an election's stall");
    }

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
