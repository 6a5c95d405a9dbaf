//! A lane: how one sink key admits the rows a claim meets, hands them to
//! a free slot (one at a time, or a batch for a batching sink), and hears
//! how they went through its circuit breaker.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::BreakerPolicy;
use super::breaker::{Breaker, State as BreakerState, Transition};
use crate::error_class::ErrorClass;
use crate::queue::{DeliveryRow, Envelope};
use crate::runtime::{BatchLimits, Sink, Transform};
use crate::source::ForwardHeaders;

/// A sink key: deliveries to one sink of one source of one tenant.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SinkKey {
    pub tenant: String,
    pub source: String,
    /// The sink's index among its source's bindings.
    pub sink: u16,
}

impl SinkKey {
    pub fn new(tenant: &str, source: &str, sink: u16) -> SinkKey {
        SinkKey { tenant: tenant.to_string(), source: source.to_string(), sink }
    }

    pub(super) fn of(row: &DeliveryRow) -> SinkKey {
        SinkKey::new(&row.tenant, &row.source, row.sink)
    }
}

/// A row by its (seq, sink index).
pub(super) type RowId = (u64, u16);

/// Where a claimed row goes: its sink, and the headers its source lets
/// through.
#[derive(Clone)]
pub(super) struct Target {
    pub sink: Arc<Sink>,
    /// The binding's transforms, in the order each hook passes them.
    pub transforms: Arc<[Arc<Transform>]>,
    pub forward: Arc<ForwardHeaders>,
}

/// A claimed row waiting for a slot, with its hook if the claim's read
/// got it.
pub(super) struct Claimed {
    pub row: DeliveryRow,
    pub target: Target,
    pub hook: Option<Envelope>,
    /// When it was claimed: a batch waits for company at most its sink's
    /// `max_wait` after its oldest row.
    pub at: Instant,
}

/// What an attempt says about its sink.
pub(super) enum Verdict {
    Delivered,
    Failed(ErrorClass),
    /// The hook could not be read (damaged in the store): the sink was
    /// never called, so its breaker hears nothing.
    Unreadable,
    /// Withdrawn because this fleet node's lease lapsed: not the sink's
    /// doing, so its breaker hears nothing.
    Withdrawn,
    /// A transform dropped the hook: the sink was never called.
    Filtered,
    /// Put back behind a row of its ordering key that did not get
    /// through in the same call, to go again after it: whatever the sink
    /// made of it, it is not this row's outcome, so the breaker hears
    /// nothing.
    PutBack,
}

/// What a lane says of a due row a claim meets.
pub(super) enum Admit {
    Claim,
    /// Claim it as the half-open breaker's probe.
    Probe,
    /// Leave it due: enough of this key's rows are waiting already.
    Full,
    /// Park it until then: the breaker is open.
    Park(u64),
}

/// What a lane offers a free slot.
pub(super) enum Offer {
    /// Rows for one call.
    Rows(Vec<Claimed>),
    /// A batch waiting to fill, to be sent by then at the latest.
    Filling(Instant),
    /// Its own slots are all in use.
    Busy,
    /// No rows are waiting.
    Empty,
}

/// What a lane heard from one row's verdict.
pub(super) struct Heard {
    pub transition: Option<Transition>,
    /// Rows that were waiting when the breaker opened: they wait out the
    /// breaker in the store, not in the window.
    pub parked: Vec<Claimed>,
}

/// How long the row that opened a breaker is passed over when the
/// breaker may probe, so that another row of the key probes first.
const PASS_OVER: Duration = Duration::from_secs(1);

#[derive(Default)]
pub(super) struct Lane {
    waiting: VecDeque<Claimed>,
    running: usize,
    breaker: Breaker,
    /// The row the half-open breaker let through.
    probe: Option<RowId>,
    /// The row whose failure last opened the breaker. A hook that always
    /// fails (a poison hook) must not be its sink's only probe: when the
    /// breaker may probe, it is passed over once, and another row probes.
    suspect: Option<RowId>,
    /// Whether the sink its rows last went to batches, and within what:
    /// unknown (`None`) until a row is queued here.
    batching: Option<Option<BatchLimits>>,
}

/// A sink's bounds for one call, if it takes hooks a batch at a time.
pub(super) fn batching(sink: &Sink) -> Option<BatchLimits> {
    sink.batch().filter(|limits| limits.max_hooks > 1)
}

impl Lane {
    /// A due row a claim meets, when the claim has already taken `taken`
    /// rows of this key.
    pub fn admit(&mut self, row: &DeliveryRow, taken: usize, max_waiting: usize, now: u64) -> Admit {
        if self.waiting.len() + taken >= max_waiting {
            return Admit::Full;
        }
        let may_probe = matches!(self.breaker.state(), BreakerState::Open { until_ms, .. } if now >= until_ms);
        if may_probe && self.suspect == Some((row.seq, row.sink)) {
            self.suspect = None;
            return Admit::Park(now + PASS_OVER.as_millis() as u64);
        }
        match self.breaker.admit(now) {
            Err(until) => Admit::Park(until),
            Ok(Some(Transition::Probing)) => {
                self.probe = Some((row.seq, row.sink));
                Admit::Probe
            }
            Ok(_) => Admit::Claim,
        }
    }

    /// Queue a claimed row; true if it is the only one waiting (the key
    /// joins the round-robin ring).
    pub fn push(&mut self, claimed: Claimed) -> bool {
        self.batching = Some(batching(&claimed.target.sink));
        self.waiting.push_back(claimed);
        self.waiting.len() == 1
    }

    /// A claimed row that will not be delivered (its sink is gone): if it
    /// was the probe, the probe is lost.
    pub fn forget(&mut self, row: RowId, now: u64) {
        if self.probe == Some(row) {
            self.probe = None;
            self.breaker.probe_lost(now);
        }
    }

    /// What a free slot gets here. A batching sink's batch not yet full
    /// waits (up to the sink's `max_wait`) unless the key can hold no more.
    /// A run of one ordering key's rows (claimed together) is never split
    /// between two calls, which could run at once.
    pub fn offer(&mut self, sink_concurrency: usize, max_waiting: usize) -> Offer {
        if self.running >= sink_concurrency {
            return Offer::Busy;
        }
        let Some(first) = self.waiting.front() else { return Offer::Empty };
        let taken = match batching(&first.target.sink) {
            // (A run met here was claimed while the sink batched: it goes
            // whole, one hook after another in one call.)
            None => take_batch(&mut self.waiting, 1, 0, |c| c.row.bytes, same_run),
            Some(limits) => {
                let full = self.waiting.len() >= limits.max_hooks.min(max_waiting)
                    || self.waiting.iter().map(|c| c.row.bytes).sum::<u64>() >= limits.max_bytes;
                let until = first.at + limits.max_wait;
                if !full && Instant::now() < until {
                    return Offer::Filling(until);
                }
                take_batch(&mut self.waiting, limits.max_hooks, limits.max_bytes, |c| c.row.bytes, same_run)
            }
        };
        self.running += 1;
        Offer::Rows(taken)
    }

    /// Rows waiting for a slot.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Whether the key's sink batches, as its last queued row found it
    /// (`None`: no row was queued here yet).
    pub fn batching(&self) -> Option<Option<BatchLimits>> {
        self.batching
    }

    /// Every row waiting for a slot, taken out (at a stop).
    pub fn take_waiting(&mut self) -> Vec<Claimed> {
        self.waiting.drain(..).collect()
    }

    pub fn has_waiting(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// A call this lane started has ended.
    pub fn call_ended(&mut self) {
        self.running -= 1;
    }

    /// Nothing waiting, nothing running, nothing remembered: the lane can go.
    pub fn idle(&self) -> bool {
        self.running == 0 && self.waiting.is_empty() && self.breaker_state() == (BreakerState::Closed { failures: 0 })
    }

    pub fn breaker_state(&self) -> BreakerState {
        self.breaker.state()
    }

    /// One row's verdict, told to the breaker. Permanent refusals say the
    /// destination answered, so they count as the sink working.
    pub fn hear(&mut self, row: RowId, verdict: &Verdict, policy: &BreakerPolicy, now: u64) -> Heard {
        let probe = self.probe == Some(row);
        if probe {
            self.probe = None;
        }
        let transition = match verdict {
            Verdict::Delivered | Verdict::Failed(ErrorClass::Permanent | ErrorClass::Denied | ErrorClass::Gone) => {
                self.breaker.succeeded()
            }
            Verdict::Failed(_) => self.breaker.failed(policy, now, probe),
            Verdict::Unreadable | Verdict::Withdrawn | Verdict::Filtered | Verdict::PutBack => {
                if probe {
                    self.breaker.probe_lost(now);
                }
                None
            }
        };
        let parked = match transition {
            Some(Transition::Opened { .. }) => {
                self.suspect = Some(row);
                self.waiting.drain(..).collect()
            }
            _ => Vec::new(),
        };
        Heard { transition, parked }
    }

    /// The sink's component was swapped: what its breaker learned was of
    /// the old one, so it closes.
    pub fn swapped(&mut self) -> Option<Transition> {
        self.suspect = None;
        self.probe = None;
        self.breaker.succeeded()
    }
}

/// Whether `next`, queued right after `row`, is of the same run: a claim
/// queues a run's rows together, and only a run puts two rows of one
/// ordering key in flight.
fn same_run(row: &Claimed, next: &Claimed) -> bool {
    matches!((&row.row.line, &next.row.line), (Some(a), Some(b)) if a.key == b.key)
}

/// The first rows of `waiting`, up to `max_hooks` and `max_bytes` of
/// bodies (at least one, however large), taking each run (a row and those
/// after it that `same_run` joins to it) whole or not at all. The first
/// run goes whole even if it is over the bounds: its claim kept it within
/// them, unless the sink was reloaded with smaller ones since.
fn take_batch<T>(
    waiting: &mut VecDeque<T>,
    max_hooks: usize,
    max_bytes: u64,
    bytes_of: impl Fn(&T) -> u64,
    same_run: impl Fn(&T, &T) -> bool,
) -> Vec<T> {
    let mut taken: Vec<T> = Vec::new();
    let mut bytes = 0u64;
    while let Some(first) = waiting.front() {
        let mut run = (1, bytes_of(first));
        while let (Some(last), Some(next)) = (waiting.get(run.0 - 1), waiting.get(run.0)) {
            if !same_run(last, next) {
                break;
            }
            run = (run.0 + 1, run.1 + bytes_of(next));
        }
        let over = !taken.is_empty() && (taken.len() + run.0 > max_hooks || bytes + run.1 > max_bytes);
        if over {
            break;
        }
        bytes += run.1;
        taken.extend(waiting.drain(..run.0));
    }
    taken
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;
    use crate::queue::RowState;

    fn row(seq: u64) -> DeliveryRow {
        DeliveryRow {
            seq,
            sink: 0,
            tenant: "default".into(),
            source: "shop".into(),
            sink_name: "out".into(),
            bytes: 10,
            attempts: 0,
            replay_id: None,
            state: RowState::Due { due_at: 0 },
            rows_of_hook: 1,
            last_failure: None,
            line: None,
            previous_dead: None,
        }
    }

    /// A lane whose breaker `poison` (seq 1) opened at time 0.
    fn opened_by_poison(policy: &BreakerPolicy) -> Lane {
        let mut lane = Lane::default();
        for _ in 0..policy.failures {
            assert!(matches!(lane.admit(&row(1), 0, 100, 0), Admit::Claim));
            lane.hear((1, 0), &Verdict::Failed(ErrorClass::Fault), policy, 0);
        }
        assert!(matches!(lane.breaker_state(), BreakerState::Open { .. }));
        lane
    }

    #[test]
    fn the_row_that_opened_the_breaker_is_not_its_probe_while_another_can_be() {
        let policy = BreakerPolicy::default();
        let mut lane = opened_by_poison(&policy);
        let open = policy.open_for.as_millis() as u64;
        assert!(matches!(lane.admit(&row(2), 0, 100, open - 1), Admit::Park(at) if at == open), "parked while open");
        assert!(
            matches!(lane.admit(&row(1), 0, 100, open), Admit::Park(at) if at == open + 1000),
            "the poison hook is passed over when the breaker may probe"
        );
        assert!(matches!(lane.admit(&row(2), 0, 100, open), Admit::Probe), "another row probes");
        let heard = lane.hear((2, 0), &Verdict::Delivered, &policy, open + 5);
        assert_eq!(heard.transition, Some(Transition::Closed));
        assert!(matches!(lane.admit(&row(1), 0, 100, open + 1000), Admit::Claim), "then it is tried as any row");
    }

    #[test]
    fn a_poison_hook_alone_still_probes_after_being_passed_over_once() {
        let policy = BreakerPolicy::default();
        let mut lane = opened_by_poison(&policy);
        let open = policy.open_for.as_millis() as u64;
        assert!(matches!(lane.admit(&row(1), 0, 100, open), Admit::Park(_)));
        assert!(matches!(lane.admit(&row(1), 0, 100, open + 1000), Admit::Probe), "no other row came: it probes");
    }

    #[test]
    fn a_swapped_component_closes_the_breaker() {
        let policy = BreakerPolicy::default();
        let mut lane = opened_by_poison(&policy);
        assert_eq!(lane.swapped(), Some(Transition::Closed));
        assert!(matches!(lane.admit(&row(1), 0, 100, 1), Admit::Claim), "the poison hook goes to the new component");
    }

    #[test]
    fn a_batch_stops_at_max_hooks_or_max_bytes_and_takes_at_least_one() {
        let take = |sizes: &[u64], max_hooks, max_bytes| {
            let mut waiting: VecDeque<u64> = sizes.iter().copied().collect();
            let taken = take_batch(&mut waiting, max_hooks, max_bytes, |b| *b, |_, _| false);
            (taken, waiting.len())
        };
        assert_eq!(take(&[1, 1, 1, 1, 1], 3, 100), (vec![1, 1, 1], 2), "max_hooks");
        assert_eq!(take(&[40, 40, 40], 10, 100), (vec![40, 40], 1), "max_bytes");
        assert_eq!(take(&[500, 1], 10, 100), (vec![500], 1), "one over max_bytes still goes, alone");
        assert_eq!(take(&[60, 40, 1], 10, 100), (vec![60, 40], 1), "max_bytes reached exactly");
        assert_eq!(take(&[], 10, 100), (vec![], 0));
    }

    #[test]
    fn a_batch_takes_a_run_whole_or_leaves_it_for_the_next() {
        // (run, bytes): rows of one run share its letter; '-' is no run.
        let take = |rows: &[(char, u64)], max_hooks, max_bytes| {
            let mut waiting: VecDeque<(char, u64)> = rows.iter().copied().collect();
            let same = |a: &(char, u64), b: &(char, u64)| a.0 != '-' && a.0 == b.0;
            let taken = take_batch(&mut waiting, max_hooks, max_bytes, |r| r.1, same);
            (taken.iter().map(|r| r.0).collect::<String>(), waiting.iter().map(|r| r.0).collect::<String>())
        };
        let rows = [('-', 1), ('a', 1), ('a', 1), ('a', 1), ('b', 1)];
        assert_eq!(take(&rows, 3, 100), ("-".into(), "aaab".into()), "the run would cross max_hooks");
        assert_eq!(take(&rows, 4, 100), ("-aaa".into(), "b".into()));
        assert_eq!(take(&rows[1..], 2, 100), ("aaa".into(), "b".into()), "a first run over the bounds goes whole");
        assert_eq!(take(&rows[1..], 10, 2), ("aaa".into(), "b".into()), "over max_bytes too");
        assert_eq!(take(&[('a', 1), ('b', 1), ('b', 1)], 10, 2), ("a".into(), "bb".into()), "bytes of the whole run");
        assert_eq!(take(&[('a', 1), ('a', 1), ('b', 1)], 1, 100), ("aa".into(), "b".into()), "one call, one run");
    }
}
