//! The scheduler: one task that owns dispatch's state. It claims due
//! rows within the windows, queues each in its key's [`Lane`], hands
//! free slots round-robin across lanes, and hears each call's end. It is
//! woken by commits, by finished calls, or when the earliest due row
//! comes due, never by polling.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Notify, mpsc};

use super::lane::{Admit, Claimed, Lane, Offer, SinkKey, Target, batching};
use super::outcome::{Done, Report, RowDone};
use super::{BreakerState, Breakers, DispatchConfig, Transition, attempt, settle, stalled};
use crate::error_class::ErrorClass;
use crate::queue::{ClaimDecision, Deliveries, DeliveryRow, Envelope, QueueError, Settlement, now_ms};
use crate::runtime::BatchLimits;
use crate::source::Directory;

pub(super) struct Scheduler {
    deliveries: Deliveries,
    directory: Arc<dyn Directory>,
    config: DispatchConfig,
    lanes: HashMap<SinkKey, Lane>,
    /// Keys with waiting rows, in round-robin order.
    ring: VecDeque<SinkKey>,
    running: usize,
    /// Rows claimed and not finished (waiting or running), and their bytes.
    claimed: usize,
    claimed_bytes: u64,
    done_tx: mpsc::UnboundedSender<Done>,
    /// Where finished attempts' outcomes go to be written.
    settler: std::sync::mpsc::Sender<settle::Settling>,
    breakers: Breakers,
    /// The last claim left due rows behind because their keys had no room:
    /// finished deliveries, not the due time, are what to wait for. Holds
    /// the rows then waiting; claiming resumes once a batch of them has
    /// started (or a moment has passed), so the same skipped rows are not
    /// read again after every single delivery.
    saturated: Option<(usize, Instant)>,
    /// When the next row comes due, as far as dispatch knows.
    next_due: NextDue,
    /// When the first batch left waiting to fill must be sent anyway.
    batch_wake: Option<Instant>,
    /// Since when claims have found only rows of full keys: past
    /// [`DEEP_SCAN_AFTER`], a claim looks much further down the due index,
    /// so rows of other keys behind a stuck key's backlog are reached.
    starved_since: Option<Instant>,
    /// Claims failing (a damaged or full store): waits between tries.
    stalled: stalled::Stalled,
}

/// What the node tells a running scheduler.
pub(super) enum Control {
    /// The component of `sink` (its name) in `source` was swapped.
    Swapped { source: String, sink: String },
}

/// What the scheduler knows of the next due time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NextDue {
    /// Not known: read it from the store.
    Unknown,
    /// No row is due, now or later.
    Nothing,
    At(u64),
}

/// Due entries a claim examines per row it wants.
const EXAMINE_PER_ROW: usize = 4;
/// Once claims have found nothing but rows of full keys for
/// [`DEEP_SCAN_AFTER`], a claim examines this many entries, and wants as
/// many rows as the windows allow; while such deep claims find rows, the
/// next comes after [`DEEP_SCAN_AGAIN`].
const DEEP_EXAMINE: usize = 16_384;
const DEEP_SCAN_AFTER: Duration = Duration::from_secs(1);
const DEEP_SCAN_AGAIN: Duration = Duration::from_millis(250);

/// Make a key's breaker state visible to [`super::Dispatcher::breaker`].
fn publish_breaker(breakers: &Breakers, key: &SinkKey, state: BreakerState) {
    let mut breakers = breakers.lock().unwrap_or_else(|e| e.into_inner());
    if state == (BreakerState::Closed { failures: 0 }) {
        breakers.remove(key);
    } else {
        breakers.insert(key.clone(), state);
    }
}

impl Scheduler {
    /// The scheduler's task: runs until `stop` is notified.
    pub fn run(
        deliveries: Deliveries,
        directory: Arc<dyn Directory>,
        config: DispatchConfig,
        breakers: Breakers,
        settler: std::sync::mpsc::Sender<settle::Settling>,
        control: mpsc::UnboundedReceiver<Control>,
        stop: Arc<Notify>,
    ) -> impl Future<Output = ()> + Send + 'static {
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        let scheduler = Scheduler {
            breakers,
            saturated: None,
            starved_since: None,
            stalled: stalled::Stalled::default(),
            next_due: NextDue::Unknown,
            batch_wake: None,
            deliveries,
            directory,
            config,
            lanes: HashMap::new(),
            ring: VecDeque::new(),
            running: 0,
            claimed: 0,
            claimed_bytes: 0,
            done_tx,
            settler,
        };
        scheduler.run_until(done_rx, control, stop)
    }

    async fn run_until(
        mut self,
        mut done_rx: mpsc::UnboundedReceiver<Done>,
        mut control: mpsc::UnboundedReceiver<Control>,
        stop: Arc<Notify>,
    ) {
        let commits = self.deliveries.commits();
        loop {
            match self.claim() {
                Ok(()) => self.stalled.worked("dispatch claims rows"),
                Err(e) => {
                    self.stalled.failed("dispatch cannot claim rows", &e);
                }
            }
            self.start_ready();
            let now = tokio::time::Instant::now();
            let wake_at = if let Some(wait) = self.stalled.wait() {
                now + wait
            } else if self.saturated.is_some() {
                now + Duration::from_millis(250)
            } else if !self.has_room() {
                // Finished deliveries make room, and wake this loop.
                now + Duration::from_secs(3600)
            } else {
                match self.next_due() {
                    Ok(Some(due)) => now + Duration::from_millis(due.saturating_sub(now_ms()).max(1)),
                    Ok(None) => now + Duration::from_secs(3600),
                    // A store that cannot be read is tried again shortly.
                    Err(_) => now + Duration::from_millis(500),
                }
            };
            // A batch waiting to fill is sent by then at the latest.
            let wake_at = self.batch_wake.map_or(wake_at, |at| wake_at.min(tokio::time::Instant::from_std(at)));
            tokio::select! {
                Some(done) = done_rx.recv() => {
                    self.finish(done);
                    while let Ok(done) = done_rx.try_recv() {
                        self.finish(done);
                    }
                }
                // New rows, due by the queue's clock: the next due time
                // is read again.
                () = commits.notified() => self.next_due = NextDue::Unknown,
                Some(Control::Swapped { source, sink }) = control.recv() => self.swapped(&source, &sink),
                () = tokio::time::sleep_until(wake_at) => {}
                () = stop.notified() => {
                    self.hand_back_waiting();
                    self.let_running_finish(&mut done_rx).await;
                    return;
                }
            }
        }
    }

    /// At a stop: rows claimed but not started are due again at once, as
    /// if never claimed (a peer taking this node over, or its next start,
    /// finds them due, not inflight).
    fn hand_back_waiting(&mut self) {
        let now = now_ms();
        for lane in self.lanes.values_mut() {
            for Claimed { row, .. } in lane.take_waiting() {
                self.claimed -= 1;
                self.claimed_bytes -= row.bytes;
                if self.settler.send((row.seq, row.sink, Settlement::Park { due_at: now })).is_err() {
                    tracing::error!(seq = row.seq, sink = row.sink, "cannot hand a row back: the settler has stopped");
                }
            }
        }
    }

    /// At a stop: the attempts running end (each within its attempt
    /// timeout) and their outcomes reach the settler, so a stopped node
    /// delivers none of them again.
    async fn let_running_finish(&mut self, done_rx: &mut mpsc::UnboundedReceiver<Done>) {
        let deadline = tokio::time::Instant::now() + self.config.attempt_timeout + Duration::from_secs(1);
        while self.running > 0 {
            match tokio::time::timeout_at(deadline, done_rx.recv()).await {
                Ok(Some(done)) => self.finish(done),
                Ok(None) | Err(_) => {
                    tracing::warn!(
                        running = self.running,
                        "attempts still running at the stop: due again at the next start"
                    );
                    return;
                }
            }
        }
    }

    /// When the next row comes due, read from the store only when not
    /// known: after a claim, every row due by then was claimed or skipped,
    /// and the only rows due later are those dispatch itself puts off
    /// (retries and parks, noted as they are made) or those a commit adds
    /// (new hooks, revived rows), whose wake-up makes it unknown again.
    fn next_due(&mut self) -> Result<Option<u64>, QueueError> {
        let now = now_ms();
        match self.next_due {
            NextDue::Nothing => return Ok(None),
            NextDue::At(at) if at > now => return Ok(Some(at)),
            NextDue::At(_) | NextDue::Unknown => {}
        }
        self.next_due = NextDue::Unknown;
        let read = self.deliveries.next_due_at()?;
        self.next_due = match read {
            None => NextDue::Nothing,
            Some(at) if at > now => NextDue::At(at),
            // Due already, yet not claimed (its key has no room): read again.
            Some(_) => NextDue::Unknown,
        };
        Ok(read)
    }

    /// A row dispatch put off is due at `at`.
    fn due_later(&mut self, at: u64) {
        self.next_due = match self.next_due {
            NextDue::Unknown => NextDue::Unknown,
            NextDue::Nothing => NextDue::At(at),
            NextDue::At(known) => NextDue::At(known.min(at)),
        };
    }

    fn has_room(&self) -> bool {
        self.claimed < self.config.max_inflight && self.claimed_bytes < self.config.max_inflight_bytes
    }

    /// Claim due rows while the windows allow. A row whose key already has
    /// enough waiting is left due where it is; a row whose key's breaker is
    /// open is parked until the breaker lets a probe through.
    fn claim(&mut self) -> Result<(), QueueError> {
        if let Some((waiting, at)) = self.saturated {
            let now_waiting = self.claimed - self.running;
            if now_waiting + self.config.claim_batch / 2 > waiting && at.elapsed() < Duration::from_millis(250) {
                return Ok(());
            }
            self.saturated = None;
        }
        let deliveries = self.deliveries.clone();
        while self.has_room() {
            let room = self.config.max_inflight - self.claimed;
            let deep = self.starved_since.is_some_and(|since| since.elapsed() >= DEEP_SCAN_AFTER);
            let (want, examine) = match deep {
                true => (room, DEEP_EXAMINE.max(room)),
                false => {
                    let want = self.config.claim_batch.min(room);
                    (want, want * EXAMINE_PER_ROW)
                }
            };
            let now = now_ms();
            let max_waiting = self.config.max_waiting_per_key;
            let lanes = &mut self.lanes;
            let breakers = &self.breakers;
            let directory = self.directory.as_ref();
            // An erasing tenant's rows stay where they are for the erase.
            let erasing = deliveries.erasing_tenants();
            let mut taken: HashMap<SinkKey, usize> = HashMap::new();
            let mut skipped = false;
            let mut parked_until: Option<u64> = None;
            let rows = deliveries.claim_due_with(now, want, examine, |row| {
                if erasing.contains(&row.tenant) {
                    skipped = true;
                    return ClaimDecision::Skip;
                }
                let key = SinkKey::of(row);
                let lane = lanes.entry(key.clone()).or_default();
                let taken = taken.entry(key.clone()).or_default();
                let admitted = lane.admit(row, *taken, max_waiting, now);
                match admitted {
                    Admit::Full => {
                        skipped = true;
                        return ClaimDecision::Skip;
                    }
                    Admit::Park(until) => {
                        parked_until = Some(parked_until.map_or(until, |p| p.min(until)));
                        return ClaimDecision::Park(until);
                    }
                    Admit::Probe => {
                        let name = sink_name(directory, &key);
                        tracing::info!(tenant = %key.tenant, source = %key.source, sink = %name, "circuit breaker half-open: probing");
                        count_transition(&key.source, name, "half_open");
                        publish_breaker(breakers, &key, lane.breaker_state());
                    }
                    Admit::Claim => {}
                }
                *taken += 1;
                // A batching sink gets the rows behind an ordered head in
                // the same call (a probe goes alone). Its lane knows
                // whether it batches once a row was queued there.
                let room = max_waiting.saturating_sub(lane.waiting() + *taken) + 1;
                if row.line.is_none() || room == 1 || !matches!(admitted, Admit::Claim) {
                    return ClaimDecision::Claim;
                }
                match lane.batching().unwrap_or_else(|| sink_batching(directory, &key)) {
                    Some(limits) => ClaimDecision::Run { rows: limits.max_hooks.min(room), bytes: limits.max_bytes },
                    None => ClaimDecision::Claim,
                }
            })?;
            if let Some(until) = parked_until {
                self.due_later(until);
            }
            let got = rows.len();
            // The hooks ride with the claim: one read for the batch.
            let seqs: Vec<u64> = rows.iter().map(|row| row.seq).collect();
            for (row, hook) in rows.into_iter().zip(deliveries.prefetch_hooks(&seqs)) {
                self.route(row, hook, now)?;
            }
            let at = Instant::now();
            self.starved_since = match (skipped && got == 0, deep) {
                (false, false) => None,
                (true, false) => self.starved_since.or(Some(at)),
                // A deep claim that found nothing waits its full turn again.
                (true, true) => Some(at),
                // One that found rows comes round again soon.
                (false, true) => Some(at.checked_sub(DEEP_SCAN_AFTER - DEEP_SCAN_AGAIN).unwrap_or(at)),
            };
            if skipped {
                self.saturated = Some((self.claimed - self.running, Instant::now()));
                break;
            }
            if got < want {
                break;
            }
        }
        Ok(())
    }

    /// Queue a claimed row under its key, or bury it if its sink is gone.
    fn route(&mut self, row: DeliveryRow, hook: Option<Envelope>, now: u64) -> Result<(), QueueError> {
        let key = SinkKey::of(&row);
        let Some(target) = self.bound_sink(&row) else {
            if let Some(lane) = self.lanes.get_mut(&key) {
                lane.forget((row.seq, row.sink), now);
            }
            let reason = format!("sink {} of source `{}` is no longer configured", row.sink, row.source);
            return self.deliveries.bury(row.seq, row.sink, now, &reason, ErrorClass::Gone);
        };
        self.claimed += 1;
        self.claimed_bytes += row.bytes;
        let lane = self.lanes.entry(key.clone()).or_default();
        if lane.push(Claimed { row, target, hook, at: Instant::now() }) {
            self.ring.push_back(key);
        }
        Ok(())
    }

    /// The sink bound to the row at ack time, if its source still has it:
    /// the same index with the same sink (its component may have been
    /// reloaded since). A row that lost its sink's name (made again from
    /// its hook after damage, by a version that did not name it) takes
    /// the binding at its index.
    fn bound_sink(&self, row: &DeliveryRow) -> Option<Target> {
        let source = self.directory.resolve(Some(&row.tenant), &row.source)?;
        let binding = source.sinks.iter().find(|b| b.index == row.sink)?;
        let same = row.sink_name.is_empty() || binding.sink.label().sink == row.sink_name;
        same.then(|| Target {
            sink: binding.sink.clone(),
            transforms: binding.transforms.clone(),
            forward: source.forward_headers.clone(),
        })
    }

    /// Hand free slots round-robin to lanes with waiting rows.
    fn start_ready(&mut self) {
        self.batch_wake = None;
        let mut passes = self.ring.len();
        while self.running < self.config.concurrency && passes > 0 {
            let Some(key) = self.ring.pop_front() else { break };
            passes -= 1;
            let Some(lane) = self.lanes.get_mut(&key) else { continue };
            let taken = match lane.offer(self.config.sink_concurrency, self.config.max_waiting_per_key) {
                Offer::Rows(taken) => taken,
                Offer::Filling(until) => {
                    self.batch_wake = Some(self.batch_wake.map_or(until, |at| at.min(until)));
                    self.ring.push_back(key);
                    continue;
                }
                Offer::Busy => {
                    self.ring.push_back(key);
                    continue;
                }
                Offer::Empty => continue,
            };
            self.running += 1;
            if lane.has_waiting() {
                self.ring.push_back(key.clone());
                passes += 1;
            }
            let report = Report { done: self.done_tx.clone(), settler: self.settler.clone() };
            let (deliveries, config) = (self.deliveries.clone(), self.config.clone());
            tokio::spawn(attempt::deliver(deliveries, taken, key, config, report));
        }
    }

    fn finish(&mut self, done: Done) {
        self.running -= 1;
        if let Some(lane) = self.lanes.get_mut(&done.key) {
            lane.call_ended();
        }
        for row in done.rows {
            self.finish_row(&done.key, row);
        }
        if self.lanes.get(&done.key).is_some_and(Lane::idle) {
            self.lanes.remove(&done.key);
        }
    }

    /// A sink's component was swapped (a reload or an upload): its lanes'
    /// breakers close, and its rows put off by faults or by the breaker
    /// are due now, so a fixed component delivers them at once.
    fn swapped(&mut self, source: &str, sink: &str) {
        let directory = self.directory.as_ref();
        for (key, lane) in self.lanes.iter_mut().filter(|(key, _)| key.source == source) {
            if sink_name(directory, key) != sink {
                continue;
            }
            if lane.swapped() == Some(Transition::Closed) {
                tracing::info!(tenant = %key.tenant, %source, %sink, "circuit breaker closed: the sink's component was swapped");
                count_transition(source, sink.to_string(), "closed");
            }
            publish_breaker(&self.breakers, key, lane.breaker_state());
        }
        let (deliveries, source, sink) = (self.deliveries.clone(), source.to_string(), sink.to_string());
        tokio::task::spawn_blocking(move || {
            let waits_for_the_component = |row: &DeliveryRow| {
                row.source == source
                    && row.sink_name == sink
                    && row.last_failure.as_ref().is_none_or(|failure| failure.class == ErrorClass::Fault)
            };
            match deliveries.hasten(now_ms(), waits_for_the_component) {
                Ok(0) => {}
                Ok(rows) => tracing::info!(%source, %sink, rows, "rows waiting on the old component are due now"),
                Err(e) => tracing::warn!(%source, %sink, "cannot make the sink's waiting rows due now: {e}"),
            }
        });
    }

    /// One row's outcome: its window share is freed, its breaker hears of it.
    fn finish_row(&mut self, key: &SinkKey, done: RowDone) {
        if let Some(at) = done.due_again {
            self.due_later(at);
        }
        self.claimed -= 1;
        self.claimed_bytes -= done.bytes;
        let now = now_ms();
        let Some(lane) = self.lanes.get_mut(key) else { return };
        let heard = lane.hear(done.row, &done.verdict, &self.config.breaker, now);
        let current = lane.breaker_state();
        let SinkKey { tenant, source, .. } = key;
        match heard.transition {
            Some(Transition::Opened { for_ms }) => {
                let name = sink_name(self.directory.as_ref(), key);
                tracing::warn!(%tenant, %source, sink = %name, for_ms, "circuit breaker opened: rows of this sink are parked");
                count_transition(source, name, "open");
                let until = now + for_ms;
                if !heard.parked.is_empty() {
                    self.due_later(until);
                }
                for Claimed { row, .. } in heard.parked {
                    self.claimed -= 1;
                    self.claimed_bytes -= row.bytes;
                    if let Err(e) = self.deliveries.park(row.seq, row.sink, until) {
                        tracing::error!(seq = row.seq, sink = row.sink, "cannot park a row: {e}");
                    }
                }
            }
            Some(Transition::Closed) => {
                let name = sink_name(self.directory.as_ref(), key);
                tracing::info!(%tenant, %source, sink = %name, "circuit breaker closed");
                count_transition(source, name, "closed");
            }
            Some(Transition::Probing) | None => {}
        }
        publish_breaker(&self.breakers, key, current);
    }
}

/// The name of the sink a key is for (its index where the source is gone;
/// breaker transitions are rare, so the name is looked up only then).
fn sink_name(directory: &dyn Directory, key: &SinkKey) -> String {
    directory
        .resolve(Some(&key.tenant), &key.source)
        .and_then(|s| s.sinks.iter().find(|b| b.index == key.sink).map(|b| b.sink.label().sink.clone()))
        .unwrap_or_else(|| key.sink.to_string())
}

/// The bounds of the key's sink for one call, if it batches.
fn sink_batching(directory: &dyn Directory, key: &SinkKey) -> Option<BatchLimits> {
    let source = directory.resolve(Some(&key.tenant), &key.source)?;
    let binding = source.sinks.iter().find(|b| b.index == key.sink)?;
    batching(&binding.sink)
}

/// Count a breaker transition under the sink's name.
fn count_transition(source: &str, sink: String, to: &'static str) {
    crate::metrics::metrics()
        .breaker_transitions
        .get_or_create(&crate::metrics::BreakerLabels { source: source.to_string(), sink, to })
        .inc();
}
