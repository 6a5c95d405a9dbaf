//! Dispatch: delivers due rows through their sink components.
//!
//! One scheduler task owns the state. It is woken by commits, by finished
//! deliveries, or when the earliest due row comes due, never by polling.
//! It claims due rows in batches (due → inflight, one store batch), within
//! the `max_inflight` and `max_inflight_bytes` windows, and queues each
//! under its sink key (tenant, source, sink index). Free slots (`concurrency`
//! overall, `sink_concurrency` per key) are handed round-robin across
//! keys, so a slow or dead sink holds only its own slots: rows past its
//! waiting bound, and every row while its circuit breaker is open, are
//! parked (due again later, attempts unchanged).
//!
//! Each attempt's outcome becomes one row transition: done, due again
//! after a backoff, or dead with reason, class and attempts. The settler
//! (`settle`) writes them, a batch at a time.

mod breaker;
mod policy;
mod settle;
mod stalled;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use opentelemetry::trace::SpanId;
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, mpsc};

pub use breaker::{Breaker, BreakerPolicy, State as BreakerState, Transition};
pub use policy::{MAX_RETRY_AFTER, Next, RetryPolicy};

use crate::error_class::ErrorClass;
use crate::problem::Checker;
use crate::queue::{ClaimDecision, DeliveryRow, Envelope, Queue, QueueError, Settlement, now_ms};
use crate::runtime::{Outcome, Sink};
use crate::source::Directory;
use crate::telemetry::traces::{self, HookTrace};

/// `dispatch`: how many deliveries run at once, and what a failure costs.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct DispatchConfig {
    /// Deliveries running at once, all sinks together.
    pub concurrency: usize,
    /// Deliveries running at once per sink key.
    pub sink_concurrency: usize,
    /// Rows claimed per store batch.
    pub claim_batch: usize,
    /// Claimed rows (running or waiting for a slot) at most.
    pub max_inflight: usize,
    /// Bodies of claimed rows, in bytes, at most.
    pub max_inflight_bytes: u64,
    /// Rows waiting per key beyond this are parked, so one stuck sink
    /// cannot fill the window.
    #[serde(skip)]
    pub max_waiting_per_key: usize,
    /// Bounds every attempt (the runtime enforces it with epochs and an
    /// async timeout).
    #[serde(rename = "attempt_timeout_ms", with = "crate::settings::millis")]
    #[schema(value_type = u64)]
    pub attempt_timeout: Duration,
    pub retry: RetryPolicy,
    pub breaker: BreakerPolicy,
}

impl Default for DispatchConfig {
    fn default() -> Self {
        DispatchConfig {
            concurrency: 32,
            sink_concurrency: 8,
            claim_batch: 128,
            max_inflight: 4096,
            max_inflight_bytes: 128 << 20,
            max_waiting_per_key: 256,
            attempt_timeout: Duration::from_secs(30),
            retry: RetryPolicy::default(),
            breaker: BreakerPolicy::default(),
        }
    }
}

impl DispatchConfig {
    pub fn check(&self, c: &mut Checker) {
        c.within("concurrency", self.concurrency as u64, 1, 65_536);
        c.at_least("sink_concurrency", self.sink_concurrency as u64, 1);
        if self.concurrency >= 1 && self.sink_concurrency > self.concurrency {
            c.add(
                "sink_concurrency",
                format!(
                    "{} is above dispatch.concurrency ({}): one sink cannot use more",
                    self.sink_concurrency, self.concurrency
                ),
            );
        }
        c.within("claim_batch", self.claim_batch as u64, 1, 65_536);
        c.at_least("max_inflight", self.max_inflight as u64, self.claim_batch as u64);
        c.within_ms("attempt_timeout_ms", self.attempt_timeout, 1, 3_600_000);
        self.retry.check(&mut c.section("retry"));
        self.breaker.check(&mut c.section("breaker"));
    }
}

/// Where a claimed row goes: its sink, and the headers its source lets
/// through.
#[derive(Clone)]
struct Target {
    sink: Arc<Sink>,
    forward: Arc<crate::source::ForwardHeaders>,
}

/// A sink key: deliveries to one sink of one source.
type Key = (String, String, u16);

/// A claimed row waiting for a slot, with its hook if the claim's read
/// got it.
struct Claimed {
    row: DeliveryRow,
    target: Target,
    hook: Option<Envelope>,
    /// When it was claimed: a batch waits for company at most its sink's
    /// `max_wait` after its oldest row.
    at: std::time::Instant,
}

#[derive(Default)]
struct KeyState {
    waiting: VecDeque<Claimed>,
    running: usize,
    breaker: Breaker,
    /// The row the half-open breaker let through, (seq, sink).
    probe: Option<(u64, u16)>,
}

/// What a finished call (one attempt, or one batch of them) tells the
/// scheduler: its slot is free, and how each row went.
struct Done {
    key: Key,
    rows: Vec<RowDone>,
}

/// How one row's attempt went.
struct RowDone {
    /// The row's (seq, sink).
    row: (u64, u16),
    bytes: u64,
    verdict: Verdict,
    /// When the row is due again, if it is to be retried.
    due_again: Option<u64>,
}

/// What an attempt says about its sink.
enum Verdict {
    Delivered,
    Failed(ErrorClass),
    /// The hook could not be read (damaged in the store): the sink was
    /// never called, so its breaker hears nothing.
    Unreadable,
    /// Withdrawn because this fleet node's lease lapsed: not the sink's
    /// doing, so its breaker hears nothing.
    Withdrawn,
}

/// A running dispatcher; dropping it does not stop it, [`Dispatcher::stop`] does.
pub struct Dispatcher {
    stop: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
    breakers: Breakers,
}

/// The breaker state of every key whose breaker is not plainly closed.
type Breakers = Arc<std::sync::Mutex<HashMap<Key, BreakerState>>>;

impl Dispatcher {
    /// Start dispatching. Rows left inflight by a previous run must have
    /// been recovered first (`Queue::recover_inflight`). Fails only if the
    /// settler's thread cannot be started.
    pub fn start(
        queue: Arc<Queue>,
        directory: Arc<dyn Directory>,
        config: DispatchConfig,
    ) -> std::io::Result<Dispatcher> {
        let settler = settle::start(queue.clone())?;
        let stop = Arc::new(Notify::new());
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        let breakers = Breakers::default();
        let scheduler = Scheduler {
            breakers: breakers.clone(),
            saturated: None,
            starved_since: None,
            stalled: stalled::Stalled::default(),
            next_due: NextDue::Unknown,
            batch_wake: None,
            queue,
            directory,
            config,
            keys: HashMap::new(),
            ring: VecDeque::new(),
            running: 0,
            claimed: 0,
            claimed_bytes: 0,
            done_tx,
            settler,
        };
        let task = tokio::spawn(scheduler.run(done_rx, stop.clone()));
        Ok(Dispatcher { stop, task, breakers })
    }

    /// The breaker of one sink key (`None`: closed, no recent failures).
    pub fn breaker(&self, tenant: &str, source: &str, sink: u16) -> Option<BreakerState> {
        let breakers = self.breakers.lock().unwrap_or_else(|e| e.into_inner());
        breakers.get(&(tenant.to_string(), source.to_string(), sink)).copied()
    }

    /// Breakers open or probing now.
    pub fn breakers_open(&self) -> usize {
        let breakers = self.breakers.lock().unwrap_or_else(|e| e.into_inner());
        breakers.values().filter(|s| !matches!(s, BreakerState::Closed { .. })).count()
    }

    /// Stop claiming; deliveries already running finish on their own.
    pub async fn stop(self) {
        self.stop.notify_one();
        let _ = self.task.await;
    }
}

struct Scheduler {
    queue: Arc<Queue>,
    directory: Arc<dyn Directory>,
    config: DispatchConfig,
    keys: HashMap<Key, KeyState>,
    /// Keys with waiting rows, in round-robin order.
    ring: VecDeque<Key>,
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
    saturated: Option<(usize, std::time::Instant)>,
    /// When the next row comes due, as far as dispatch knows.
    next_due: NextDue,
    /// When the first batch left waiting to fill must be sent anyway.
    batch_wake: Option<std::time::Instant>,
    /// Since when claims have found only rows of full keys: past
    /// [`DEEP_SCAN_AFTER`], a claim looks much further down the due index,
    /// so rows of other keys behind a stuck key's backlog are reached.
    starved_since: Option<std::time::Instant>,
    /// Claims failing (a damaged or full store): waits between tries.
    stalled: stalled::Stalled,
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

/// Make a key's breaker state visible to [`Dispatcher::breaker`].
fn publish_breaker(breakers: &Breakers, key: &Key, state: BreakerState) {
    let mut breakers = breakers.lock().unwrap_or_else(|e| e.into_inner());
    if state == (BreakerState::Closed { failures: 0 }) {
        breakers.remove(key);
    } else {
        breakers.insert(key.clone(), state);
    }
}

impl Scheduler {
    async fn run(mut self, mut done_rx: mpsc::UnboundedReceiver<Done>, stop: Arc<Notify>) {
        let commits = self.queue.commits();
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
                () = tokio::time::sleep_until(wake_at) => {}
                () = stop.notified() => return,
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
        let read = self.queue.next_due_at()?;
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
        let queue = self.queue.clone();
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
            let keys = &mut self.keys;
            let breakers = &self.breakers;
            let directory = self.directory.as_ref();
            // An erasing tenant's rows stay where they are for the erase.
            let erasing = queue.erasing_tenants();
            let mut taken: HashMap<Key, usize> = HashMap::new();
            let mut skipped = false;
            let mut parked_until: Option<u64> = None;
            let rows = queue.claim_due_with(now, want, examine, |row| {
                if erasing.contains(&row.tenant) {
                    skipped = true;
                    return ClaimDecision::Skip;
                }
                let key: Key = (row.tenant.clone(), row.source.clone(), row.sink);
                let state = keys.entry(key.clone()).or_default();
                let taken = taken.entry(key.clone()).or_default();
                if state.waiting.len() + *taken >= max_waiting {
                    skipped = true;
                    return ClaimDecision::Skip;
                }
                match state.breaker.admit(now) {
                    Err(until) => {
                        parked_until = Some(parked_until.map_or(until, |p| p.min(until)));
                        return ClaimDecision::Park(until);
                    }
                    Ok(Some(Transition::Probing)) => {
                        state.probe = Some((row.seq, row.sink));
                        let name = sink_name(directory, &key);
                        tracing::info!(tenant = %key.0, source = %key.1, sink = %name, "circuit breaker half-open: probing");
                        count_transition(&key.1, name, "half_open");
                        publish_breaker(breakers, &key, state.breaker.state());
                    }
                    Ok(_) => {}
                }
                *taken += 1;
                ClaimDecision::Claim
            })?;
            if let Some(until) = parked_until {
                self.due_later(until);
            }
            let got = rows.len();
            // The hooks ride with the claim: one read for the batch.
            let seqs: Vec<u64> = rows.iter().map(|row| row.seq).collect();
            for (row, hook) in rows.into_iter().zip(queue.prefetch_hooks(&seqs)) {
                self.route(row, hook, now)?;
            }
            let at = std::time::Instant::now();
            self.starved_since = match (skipped && got == 0, deep) {
                (false, false) => None,
                (true, false) => self.starved_since.or(Some(at)),
                // A deep claim that found nothing waits its full turn again.
                (true, true) => Some(at),
                // One that found rows comes round again soon.
                (false, true) => Some(at.checked_sub(DEEP_SCAN_AFTER - DEEP_SCAN_AGAIN).unwrap_or(at)),
            };
            if skipped {
                self.saturated = Some((self.claimed - self.running, std::time::Instant::now()));
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
        let key: Key = (row.tenant.clone(), row.source.clone(), row.sink);
        let Some(target) = self.bound_sink(&row) else {
            if let Some(state) = self.keys.get_mut(&key)
                && state.probe == Some((row.seq, row.sink))
            {
                state.probe = None;
                state.breaker.probe_lost(now);
            }
            let reason = format!("sink {} of source `{}` is no longer configured", row.sink, row.source);
            return self.queue.bury(row.seq, row.sink, now, &reason, ErrorClass::Gone);
        };
        let state = self.keys.entry(key.clone()).or_default();
        self.claimed += 1;
        self.claimed_bytes += row.bytes;
        if state.waiting.is_empty() {
            self.ring.push_back(key);
        }
        state.waiting.push_back(Claimed { row, target, hook, at: std::time::Instant::now() });
        Ok(())
    }

    /// The sink bound to the row at ack time, if its source still has it:
    /// the same index with the same sink (its component may have been
    /// reloaded since).
    fn bound_sink(&self, row: &DeliveryRow) -> Option<Target> {
        let source = self.directory.resolve(Some(&row.tenant), &row.source)?;
        let binding = source.sinks.iter().find(|b| b.index == row.sink)?;
        (binding.sink.label().sink == row.sink_name)
            .then(|| Target { sink: binding.sink.clone(), forward: source.forward_headers.clone() })
    }

    /// Hand free slots round-robin to keys with waiting rows. A slot of a
    /// batching sink takes a batch of its key's rows; a batch not yet full
    /// waits (up to the sink's `max_wait`) unless its key can hold no more.
    fn start_ready(&mut self) {
        self.batch_wake = None;
        let mut passes = self.ring.len();
        while self.running < self.config.concurrency && passes > 0 {
            let Some(key) = self.ring.pop_front() else { break };
            passes -= 1;
            let Some(state) = self.keys.get_mut(&key) else { continue };
            if state.running >= self.config.sink_concurrency {
                self.ring.push_back(key);
                continue;
            }
            let Some(first) = state.waiting.front() else { continue };
            let taken = match first.target.sink.batch().filter(|limits| limits.max_hooks > 1) {
                None => state.waiting.pop_front().into_iter().collect::<Vec<_>>(),
                Some(limits) => {
                    let full = state.waiting.len() >= limits.max_hooks.min(self.config.max_waiting_per_key)
                        || state.waiting.iter().map(|c| c.row.bytes).sum::<u64>() >= limits.max_bytes;
                    let until = first.at + limits.max_wait;
                    if !full && std::time::Instant::now() < until {
                        self.batch_wake = Some(self.batch_wake.map_or(until, |at| at.min(until)));
                        self.ring.push_back(key);
                        continue;
                    }
                    take_batch(&mut state.waiting, limits.max_hooks, limits.max_bytes, |c| c.row.bytes)
                }
            };
            state.running += 1;
            self.running += 1;
            if !state.waiting.is_empty() {
                self.ring.push_back(key.clone());
                passes += 1;
            }
            let report = Report { done: self.done_tx.clone(), settler: self.settler.clone() };
            let (queue, config) = (self.queue.clone(), self.config.clone());
            tokio::spawn(deliver(queue, taken, key, config, report));
        }
    }

    fn finish(&mut self, done: Done) {
        self.running -= 1;
        if let Some(state) = self.keys.get_mut(&done.key) {
            state.running -= 1;
        }
        for row in done.rows {
            self.finish_row(&done.key, row);
        }
        let Some(state) = self.keys.get(&done.key) else { return };
        if state.running == 0
            && state.waiting.is_empty()
            && matches!(state.breaker.state(), BreakerState::Closed { failures: 0 })
        {
            self.keys.remove(&done.key);
        }
    }

    /// One row's outcome: its window share is freed, its breaker hears of it.
    fn finish_row(&mut self, key: &Key, done: RowDone) {
        if let Some(at) = done.due_again {
            self.due_later(at);
        }
        self.claimed -= 1;
        self.claimed_bytes -= done.bytes;
        let now = now_ms();
        let Some(state) = self.keys.get_mut(key) else { return };
        let probe = state.probe == Some(done.row);
        if probe {
            state.probe = None;
        }
        let mut parked_until = None;
        let transition = match done.verdict {
            Verdict::Delivered | Verdict::Failed(ErrorClass::Permanent | ErrorClass::Denied | ErrorClass::Gone) => {
                state.breaker.succeeded()
            }
            Verdict::Failed(_) => state.breaker.failed(&self.config.breaker, now, probe),
            Verdict::Unreadable | Verdict::Withdrawn => {
                if probe {
                    state.breaker.probe_lost(now);
                }
                None
            }
        };
        let current = state.breaker.state();
        let (tenant, source, _) = key;
        match transition {
            Some(Transition::Opened { for_ms }) => {
                let name = sink_name(self.directory.as_ref(), key);
                tracing::warn!(%tenant, %source, sink = %name, for_ms, "circuit breaker opened: rows of this sink are parked");
                count_transition(source, name, "open");
                // Rows already waiting for this key wait out the breaker
                // in the store, not in the window.
                let until = now + for_ms;
                let parked: Vec<Claimed> = state.waiting.drain(..).collect();
                if !parked.is_empty() {
                    parked_until = Some(until);
                }
                for Claimed { row, .. } in parked {
                    self.claimed -= 1;
                    self.claimed_bytes -= row.bytes;
                    if let Err(e) = self.queue.park(row.seq, row.sink, until) {
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
        if let Some(until) = parked_until {
            self.due_later(until);
        }
    }
}

/// The first rows of `waiting`, up to `max_hooks` and `max_bytes` of
/// bodies (at least one, however large).
fn take_batch<T>(waiting: &mut VecDeque<T>, max_hooks: usize, max_bytes: u64, bytes_of: impl Fn(&T) -> u64) -> Vec<T> {
    let mut taken: Vec<T> = Vec::new();
    let mut bytes = 0u64;
    while let Some(next) = waiting.front() {
        let over = !taken.is_empty() && (taken.len() >= max_hooks || bytes + bytes_of(next) > max_bytes);
        if over {
            break;
        }
        bytes += bytes_of(next);
        taken.extend(waiting.pop_front());
    }
    taken
}

/// Where an attempt reports: its outcome to the settler, then its verdict
/// to the scheduler.
struct Report {
    done: mpsc::UnboundedSender<Done>,
    settler: std::sync::mpsc::Sender<settle::Settling>,
}

/// One call: read the hooks, call the sink (once for the lot if there are
/// several: they share a key, so a sink that batches), and hand each row's
/// outcome over.
async fn deliver(queue: Arc<Queue>, claimed: Vec<Claimed>, key: Key, config: DispatchConfig, report: Report) {
    let Some(Target { sink, forward }) = claimed.first().map(|first| first.target.clone()) else { return };
    let sink_name = sink.label().sink.clone();
    let mut rows_done = Vec::with_capacity(claimed.len());
    // Rows whose hook was read, and those hooks, ready for the sink.
    let mut rows = Vec::with_capacity(claimed.len());
    let mut hooks = Vec::with_capacity(claimed.len());
    // Each hook's trace, when traces are on (from its stored headers).
    let mut traced = Vec::with_capacity(claimed.len());
    for Claimed { row, hook, .. } in claimed {
        let read = match hook {
            Some(envelope) => Ok(Some(envelope)),
            None => queue.hook(row.seq),
        };
        let failure = match read {
            Ok(Some(envelope)) => {
                traced.push(traces::enabled().then(|| HookTrace::of(&envelope.id, &envelope.headers)));
                hooks.push(forward.hook(&envelope, row.sink, row.replay_id.clone()));
                rows.push(row);
                continue;
            }
            Ok(None) => crate::runtime::Failure::new(ErrorClass::Gone, "the hook is no longer stored"),
            Err(e) if e.is_damage() => {
                let verdict = bury_unreadable(&queue, &row, &sink_name, &e);
                rows_done.push(RowDone { row: (row.seq, row.sink), bytes: row.bytes, verdict, due_again: None });
                continue;
            }
            Err(e) => crate::runtime::Failure::new(ErrorClass::Transient, format!("cannot read the hook: {e}")),
        };
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
    // A fleet node delivers only while its lease is proven: rows claimed
    // before it lapsed are not started, and an attempt in flight is
    // dropped (its instance with it) the moment it lapses, before a peer
    // can take these hooks over.
    let outcomes = if !queue.leased() {
        call.await
    } else if !queue.claims_open() {
        Vec::new()
    } else {
        tokio::select! {
            biased;
            () = queue.lease_lapsed() => Vec::new(),
            outcomes = call => outcomes,
        }
    };
    if outcomes.len() != rows.len() {
        tracing::warn!(
            rows = rows.len(),
            sink = %sink_name,
            "the lease lapsed: attempts withdrawn, their rows due again once it is proven"
        );
        for row in &rows {
            rows_done.push(withdraw(row, &report));
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
        rows_done.push(settle_one(row, Some(&hook.id), outcome, &sink_name, &config, &report));
    }
    let _ = report.done.send(Done { key, rows: rows_done });
}

/// A row whose attempt was withdrawn (see `deliver`): due again now, its
/// attempts unchanged.
fn withdraw(row: &DeliveryRow, report: &Report) -> RowDone {
    let due_at = now_ms();
    if report.settler.send((row.seq, row.sink, Settlement::Park { due_at })).is_err() {
        tracing::error!(seq = row.seq, sink = row.sink, "cannot record the outcome: the settler has stopped");
    }
    RowDone { row: (row.seq, row.sink), bytes: row.bytes, verdict: Verdict::Withdrawn, due_again: Some(due_at) }
}

/// One row's outcome: counted, turned into its settlement (done, due again
/// after a backoff, or dead), told where an operator should hear of it, and
/// handed to the settler. `hook_id`: the hook's id, where it was read.
fn settle_one(
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
                    crate::telemetry::logs::delivery_retrying(&row.source, sink_name, f.class.as_str());
                    Settlement::Retry { due_at: now + wait.as_millis() as u64 }
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
        Settlement::Retry { due_at } => Some(due_at),
        _ => None,
    };
    if report.settler.send((row.seq, row.sink, settlement)).is_err() {
        // The row stays inflight; the next start makes it due again.
        tracing::error!(seq = row.seq, sink = row.sink, "cannot record the outcome: the settler has stopped");
    }
    RowDone { row: (row.seq, row.sink), bytes: row.bytes, verdict, due_again }
}

/// A hook the store holds damaged will never be readable: no retry can
/// deliver it. Its row is dead-lettered at once as a `fault`, naming the
/// damage. The store told the operator of the damaged block (ERROR with
/// the file, `ankusa_store_corruption_total{family="hooks"}`) when it met it.
fn bury_unreadable(queue: &Queue, row: &DeliveryRow, sink: &str, error: &QueueError) -> Verdict {
    tracing::warn!(
        seq = row.seq,
        source = %row.source,
        sink,
        "a hook is unreadable, damaged in the store; its delivery is dead-lettered: {error}"
    );
    let reason = format!("the hook is unreadable, damaged in the store: {error}");
    if let Err(e) = queue.bury(row.seq, row.sink, now_ms(), &reason, ErrorClass::Fault) {
        tracing::error!(seq = row.seq, sink = row.sink, "cannot record the outcome: {e}");
    }
    Verdict::Unreadable
}

/// The name of the sink a key is for (its index where the source is gone;
/// breaker transitions are rare, so the name is looked up only then).
fn sink_name(directory: &dyn Directory, key: &Key) -> String {
    let (tenant, source, index) = key;
    directory
        .resolve(Some(tenant), source)
        .and_then(|s| s.sinks.iter().find(|b| b.index == *index).map(|b| b.sink.label().sink.clone()))
        .unwrap_or_else(|| index.to_string())
}

/// Count a breaker transition under the sink's name.
fn count_transition(source: &str, sink: String, to: &'static str) {
    crate::metrics::metrics()
        .breaker_transitions
        .get_or_create(&crate::metrics::BreakerLabels { source: source.to_string(), sink, to })
        .inc();
}

/// A jitter draw in [0, 1) that differs per row and attempt.
fn jitter_unit(seq: u64, attempt: u32) -> f64 {
    let mut x = seq ^ (u64::from(attempt) << 40) ^ 0x9E37_79B9_7F4A_7C15;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    (x >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::take_batch;

    #[test]
    fn a_batch_stops_at_max_hooks_or_max_bytes_and_takes_at_least_one() {
        let take = |sizes: &[u64], max_hooks, max_bytes| {
            let mut waiting: VecDeque<u64> = sizes.iter().copied().collect();
            let taken = take_batch(&mut waiting, max_hooks, max_bytes, |b| *b);
            (taken, waiting.len())
        };
        assert_eq!(take(&[1, 1, 1, 1, 1], 3, 100), (vec![1, 1, 1], 2), "max_hooks");
        assert_eq!(take(&[40, 40, 40], 10, 100), (vec![40, 40], 1), "max_bytes");
        assert_eq!(take(&[500, 1], 10, 100), (vec![500], 1), "one over max_bytes still goes, alone");
        assert_eq!(take(&[60, 40, 1], 10, 100), (vec![60, 40], 1), "max_bytes reached exactly");
        assert_eq!(take(&[], 10, 100), (vec![], 0));
    }
}
