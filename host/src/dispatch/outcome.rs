//! What becomes of a row after its attempt: counted, then done, due
//! again after a jittered backoff, or dead, handed to the settler; and
//! what the scheduler hears of it.

use std::time::Duration;

use tokio::sync::mpsc;

use super::lane::{RowId, SinkKey, Verdict};
use super::settle::Settling;
use super::{DispatchConfig, Next};
use crate::error_class::ErrorClass;
use crate::queue::{Deliveries, DeliveryRow, LastFailure, QueueError, Settlement, now_ms};
use crate::runtime::Outcome;

/// What a finished call (one attempt, or one batch of them) tells the
/// scheduler: its slot is free, and how each row went.
pub(super) struct Done {
    pub key: SinkKey,
    pub rows: Vec<RowDone>,
}

/// How one row's attempt went.
pub(super) struct RowDone {
    pub row: RowId,
    pub bytes: u64,
    pub verdict: Verdict,
    /// When the row is due again, if it is to be retried.
    pub due_again: Option<u64>,
}

/// Where an attempt reports: its outcome to the settler, then its verdict
/// to the scheduler.
pub(super) struct Report {
    pub done: mpsc::UnboundedSender<Done>,
    pub settler: std::sync::mpsc::Sender<Settling>,
}

/// A row whose attempt does not count (withdrawn as the lease lapsed, or
/// put back behind its key's failed row; see `deliver`): due again now,
/// its attempts unchanged.
pub(super) fn put_back(row: &DeliveryRow, verdict: Verdict, report: &Report) -> RowDone {
    let due_at = now_ms();
    if report.settler.send((row.seq, row.sink, Settlement::Park { due_at })).is_err() {
        tracing::error!(seq = row.seq, sink = row.sink, "cannot record the outcome: the settler has stopped");
    }
    RowDone { row: (row.seq, row.sink), bytes: row.bytes, verdict, due_again: Some(due_at) }
}

/// One row's outcome: counted, turned into its settlement (done, due again
/// after a backoff, or dead), told where an operator should hear of it, and
/// handed to the settler. `hook_id`: the hook's id, where it was read.
pub(super) fn settle_one(
    row: &DeliveryRow,
    hook_id: Option<&str>,
    outcome: Outcome,
    sink_name: &str,
    config: &DispatchConfig,
    report: &Report,
) -> RowDone {
    let attempt = row.attempts + 1;
    let class = match &outcome {
        Outcome::Delivered => "ok",
        Outcome::Failed(f) => f.class.as_str(),
    };
    crate::metrics::metrics()
        .deliveries
        .get_or_create(&crate::metrics::DeliveryLabels {
            source: row.source.clone(),
            sink: sink_name.to_string(),
            class,
        })
        .inc();
    let now = now_ms();
    let (settlement, verdict) = match outcome {
        Outcome::Delivered => (Settlement::Complete, Verdict::Delivered),
        Outcome::Failed(f) => {
            let retry_after = f.retry_after_ms.map(Duration::from_millis);
            let unit = jitter_unit(row.seq, attempt);
            tracing::debug!(
                seq = row.seq,
                source = %row.source,
                sink = %sink_name,
                attempt,
                class = f.class.as_str(),
                reason = %f.reason,
                "attempt failed"
            );
            let settlement = match config.retry.next(f.class, retry_after, attempt, unit) {
                Next::RetryIn(wait) => {
                    let class = f.class.as_str();
                    crate::telemetry::logs::delivery_retrying(
                        &row.source,
                        sink_name,
                        class,
                        row.seq,
                        attempt,
                        &f.reason,
                    );
                    let failure = LastFailure::new(f.class, &f.reason, now);
                    Settlement::Retry { due_at: now + wait.as_millis() as u64, failure }
                }
                Next::GiveUp => {
                    tracing::info!(
                        id = hook_id.unwrap_or("-"),
                        seq = row.seq,
                        source = %row.source,
                        tenant = %row.tenant,
                        sink = %sink_name,
                        class = f.class.as_str(),
                        reason = %f.reason,
                        attempts = attempt,
                        "hook dead-lettered"
                    );
                    Settlement::Bury { dead_at: now, reason: f.reason, class: f.class }
                }
            };
            (settlement, Verdict::Failed(f.class))
        }
    };
    let due_again = match settlement {
        Settlement::Retry { due_at, .. } => Some(due_at),
        _ => None,
    };
    if report.settler.send((row.seq, row.sink, settlement)).is_err() {
        // The row stays inflight; the next start makes it due again.
        tracing::error!(seq = row.seq, sink = row.sink, "cannot record the outcome: the settler has stopped");
    }
    RowDone { row: (row.seq, row.sink), bytes: row.bytes, verdict, due_again }
}

/// A hook a transform of the row's binding dropped: counted, and filed
/// as `filtered` (never delivered, never dead).
pub(super) fn settle_filtered(
    row: &DeliveryRow,
    hook_id: &str,
    reason: String,
    sink_name: &str,
    report: &Report,
) -> RowDone {
    crate::metrics::metrics().count_filtered(&row.source, sink_name);
    tracing::debug!(id = hook_id, seq = row.seq, source = %row.source, sink = %sink_name, %reason, "hook filtered");
    if report.settler.send((row.seq, row.sink, Settlement::Filter { at: now_ms(), reason })).is_err() {
        tracing::error!(seq = row.seq, sink = row.sink, "cannot record the outcome: the settler has stopped");
    }
    RowDone { row: (row.seq, row.sink), bytes: row.bytes, verdict: Verdict::Filtered, due_again: None }
}

/// A hook the store holds damaged will never be readable: no retry can
/// deliver it. Its row is dead-lettered at once as a `fault`, naming the
/// damage. The store told the operator of the damaged block (ERROR with
/// the file, `ankusa_store_corruption_total{family="hooks"}`) when it met it.
pub(super) fn bury_unreadable(deliveries: &Deliveries, row: &DeliveryRow, sink: &str, error: &QueueError) -> Verdict {
    tracing::warn!(
        seq = row.seq,
        source = %row.source,
        sink,
        "a hook is unreadable, damaged in the store; its delivery is dead-lettered: {error}"
    );
    let reason = format!("the hook is unreadable, damaged in the store: {error}");
    if let Err(e) = deliveries.bury(row.seq, row.sink, now_ms(), &reason, ErrorClass::Fault) {
        tracing::error!(seq = row.seq, sink = row.sink, "cannot record the outcome: {e}");
    }
    Verdict::Unreadable
}

/// A jitter draw in [0, 1) that differs per row and attempt.
fn jitter_unit(seq: u64, attempt: u32) -> f64 {
    let mut x = seq ^ (u64::from(attempt) << 40) ^ 0x9E37_79B9_7F4A_7C15;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    (x >> 11) as f64 / (1u64 << 53) as f64
}
