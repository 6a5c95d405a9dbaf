//! One attempt: read the hooks, pass each through its binding's
//! transforms, call the sink (once, or once for a batch), trace it, and
//! hand each row's outcome over.

use std::collections::HashSet;
use std::time::{Instant, SystemTime};

use opentelemetry::trace::SpanId;

use super::DispatchConfig;
use super::lane::Verdict;
use super::lane::{Claimed, SinkKey, Target};
use super::outcome::{Done, Report, RowDone, bury_unreadable, put_back, settle_filtered, settle_one};
use crate::error_class::ErrorClass;
use crate::queue::{Deliveries, DeliveryRow};
use crate::runtime::{Failure, Outcome};
use crate::source::run_chain;
use crate::telemetry::traces::{self, HookTrace};

/// The header a delivery of an ordered binding carries after a skipped
/// dead hook of its key: that hook's id. Only the host sets it (a
/// provider's `x-ankusa-*` headers never reach a sink).
pub const PREVIOUS_DEAD: &str = "x-ankusa-previous-dead";

/// The ordering keys of a call's rows that stopped: a run of one key's
/// rows goes on past a row only if it got through (delivered, or dropped
/// by a transform with no gap to tell of), so the rows after one that did
/// not are put back, to go again after it, in order.
#[derive(Default)]
struct Stopped(HashSet<String>);

impl Stopped {
    fn stop(&mut self, row: &DeliveryRow) {
        if let Some(line) = &row.line {
            self.0.insert(line.key.clone());
        }
    }

    fn behind(&self, row: &DeliveryRow) -> bool {
        row.line.as_ref().is_some_and(|line| self.0.contains(&line.key))
    }
}

/// One call: read the hooks, call the sink (once for the lot if there are
/// several: they share a key, so a sink that batches), and hand each row's
/// outcome over.
pub(super) async fn deliver(
    deliveries: Deliveries,
    claimed: Vec<Claimed>,
    key: SinkKey,
    config: DispatchConfig,
    report: Report,
) {
    let Some(Target { sink, transforms, forward }) = claimed.first().map(|first| first.target.clone()) else {
        return;
    };
    // The binding's transforms share one attempt's deadline for the call.
    let transforms_until = Instant::now() + config.attempt_timeout;
    let sink_name = sink.label().sink.clone();
    let mut rows_done = Vec::with_capacity(claimed.len());
    // Rows whose hook was read, and those hooks, ready for the sink.
    let mut rows = Vec::with_capacity(claimed.len());
    let mut hooks = Vec::with_capacity(claimed.len());
    // Each hook's trace, when traces are on (from its stored headers).
    let mut traced = Vec::with_capacity(claimed.len());
    let mut stopped = Stopped::default();
    for Claimed { row, hook, .. } in claimed {
        if stopped.behind(&row) {
            rows_done.push(put_back(&row, Verdict::PutBack, &report));
            continue;
        }
        let read = match hook {
            Some(envelope) => Ok(Some(envelope)),
            None => deliveries.hook(row.seq),
        };
        let failure = match read {
            Ok(Some(envelope)) => {
                let mut hook = forward.hook(&envelope, row.sink, row.replay_id.clone());
                match run_chain(&transforms, &mut hook, transforms_until).await {
                    Ok(None) => {}
                    Ok(Some(reason)) => {
                        if row.previous_dead.is_some() {
                            // The gap it was to tell of goes to the next one.
                            stopped.stop(&row);
                        }
                        rows_done.push(settle_filtered(&row, &envelope.id, reason, &sink_name, &report));
                        continue;
                    }
                    Err(failure) => {
                        stopped.stop(&row);
                        let outcome = Outcome::Failed(failure);
                        rows_done.push(settle_one(&row, Some(&envelope.id), outcome, &sink_name, &config, &report));
                        continue;
                    }
                }
                traced.push(traces::enabled().then(|| HookTrace::of(&envelope.id, &envelope.headers)));
                if let Some(dead) = &row.previous_dead {
                    // The gap marker: a hook of this key died, skipped, just before.
                    hook.headers.push((PREVIOUS_DEAD.to_string(), dead.clone().into_bytes()));
                }
                hooks.push(hook);
                rows.push(row);
                continue;
            }
            Ok(None) => Failure::new(ErrorClass::Gone, "the hook is no longer stored"),
            Err(e) if e.is_damage() => {
                stopped.stop(&row);
                let verdict = bury_unreadable(&deliveries, &row, &sink_name, &e);
                rows_done.push(RowDone { row: (row.seq, row.sink), bytes: row.bytes, verdict, due_again: None });
                continue;
            }
            Err(e) => Failure::new(ErrorClass::Transient, format!("cannot read the hook: {e}")),
        };
        stopped.stop(&row);
        rows_done.push(settle_one(&row, None, Outcome::Failed(failure), &sink_name, &config, &report));
    }
    let spans: Vec<Option<(HookTrace, SpanId)>> = rows
        .iter()
        .zip(&hooks)
        .zip(&traced)
        .map(|((row, hook), trace)| {
            trace.map(|t| (t, HookTrace::attempt_span(&hook.id, row.sink, row.replay_id.as_deref(), row.attempts + 1)))
        })
        .collect();
    let started = SystemTime::now();
    let call = async {
        match (rows.as_slice(), hooks.as_slice()) {
            ([row], [hook]) => {
                // The attempt's own span rides on the sink's HTTP requests.
                let traceparent = spans[0].map(|(trace, span)| trace.traceparent(span));
                let call = sink.deliver_within(hook, row.attempts + 1, config.attempt_timeout);
                vec![traces::scope(traceparent, call).await]
            }
            ([], _) => Vec::new(),
            (rows, hooks) => {
                let attempts: Vec<u32> = rows.iter().map(|row| row.attempts + 1).collect();
                crate::metrics::metrics().batch_hooks.observe(hooks.len() as f64);
                sink.deliver_batch_within(hooks, &attempts, config.attempt_timeout).await
            }
        }
    };
    // Why attempts were withdrawn, should the outcomes not match the rows.
    const UNANSWERED: &str = "after the sink answered for fewer rows than it was given";
    // A fleet node delivers only while its lease is proven: rows claimed
    // before it lapsed are not started, and an attempt in flight is
    // dropped (its instance with it) the moment it lapses, before a peer
    // can take these hooks over.
    let (outcomes, withdrawn) = if !deliveries.leased() {
        (call.await, UNANSWERED)
    } else if !deliveries.claims_open() {
        (Vec::new(), "before they started: claims closed (the lease unproven, or outcomes unpublished too long)")
    } else {
        tokio::select! {
            biased;
            () = deliveries.lease_lapsed() => (Vec::new(), "in flight: the lease's proof ended"),
            outcomes = call => (outcomes, UNANSWERED),
        }
    };
    if outcomes.len() != rows.len() {
        tracing::warn!(
            rows = rows.len(),
            sink = %sink_name,
            "attempts withdrawn {withdrawn}; their rows are due again once claims open"
        );
        for row in &rows {
            rows_done.push(put_back(row, Verdict::Withdrawn, &report));
        }
        let _ = report.done.send(Done { key, rows: rows_done });
        return;
    }
    let ended = SystemTime::now();
    for (((row, hook), span), outcome) in rows.iter().zip(&hooks).zip(&spans).zip(outcomes) {
        if let Some((trace, span)) = span {
            let (class, reason) = match &outcome {
                Outcome::Delivered => ("ok", None),
                Outcome::Failed(f) => (f.class.as_str(), Some(f.reason.as_str())),
            };
            traces::attempted(traces::Attempt {
                trace: *trace,
                span: *span,
                hook_id: &hook.id,
                seq: row.seq,
                source: &row.source,
                sink: &sink_name,
                sink_index: row.sink,
                attempt: row.attempts + 1,
                replay_id: row.replay_id.as_deref(),
                class,
                reason,
                time: (started, ended),
            });
        }
        if stopped.behind(row) {
            rows_done.push(put_back(row, Verdict::PutBack, &report));
            continue;
        }
        if matches!(outcome, Outcome::Failed(_)) {
            stopped.stop(row);
        }
        rows_done.push(settle_one(row, Some(&hook.id), outcome, &sink_name, &config, &report));
    }
    let _ = report.done.send(Done { key, rows: rows_done });
}
