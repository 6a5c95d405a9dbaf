//! The queue against a simple in-memory model: random sequences of
//! enqueues (with and without dedupe keys, several tenants, quotas and a
//! tenant maximum), claims, completions, retries, burials, purges,
//! restarts, and the passing of time with the dedupe sweep (keys expire;
//! an expired key not yet swept is taken over by the next hook that has
//! it). After every step the seqs, outcomes, counters, stored hooks and DLQ
//! contents must match the model.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use ankusa_common::error_class::ErrorClass;
use ankusa_queue::queue::{
    Clock, DeadQuery, Entry, EntryOutcome, Envelope, LastFailure, PurgeKinds, Queue, QueueConfig, Refusal,
    TenantPending,
};
use proptest::prelude::*;

const TENANTS_MAX: usize = 3;
const KEYS_PER_TENANT: u64 = 4;
const KEYS_PER_NODE: u64 = 9;
/// Claims and retries use a logical clock far past the wall clock, so a
/// row enqueued "now" is always due and a retry's due time is exact.
const T0: u64 = 4_000_000_000_000;
/// Where the queue's clock starts: before `T0`, so every hook enqueued is
/// due at any claim.
const CLOCK0: u64 = 1_700_000_000_000;
const DEDUPE_TTL_MS: u64 = 10_000;

#[derive(Clone, Debug)]
struct NewHook {
    tenant: u8,
    key: Option<u8>,
    sinks: u16,
    body: u8,
}

#[derive(Clone, Debug)]
enum Op {
    Enqueue(Vec<NewHook>),
    /// Claim every row due at `T0 + at`, or at most `limit`.
    Claim {
        at: u64,
        limit: usize,
    },
    /// Pick the n-th inflight row (mod the count).
    Complete(usize),
    Retry {
        pick: usize,
        delay: u64,
    },
    Bury {
        pick: usize,
        permanent: bool,
    },
    Purge {
        tenant: u8,
        pending: bool,
        inflight: bool,
        dead: bool,
    },
    Restart,
    /// Move the queue's clock forward (dedupe keys expire).
    Advance(u64),
    /// Sweep the expired dedupe keys.
    Sweep,
}

fn new_hook() -> impl Strategy<Value = NewHook> {
    (0u8..5, proptest::option::weighted(0.6, 0u8..6), 1u16..=3, any::<u8>())
        .prop_map(|(tenant, key, sinks, body)| NewHook { tenant, key, sinks, body })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => proptest::collection::vec(new_hook(), 1..4).prop_map(Op::Enqueue),
        3 => (0u64..3, 1usize..6).prop_map(|(at, limit)| Op::Claim { at: at * 1000, limit }),
        2 => any::<usize>().prop_map(Op::Complete),
        2 => (any::<usize>(), 1u64..3).prop_map(|(pick, delay)| Op::Retry { pick, delay: delay * 1000 }),
        2 => (any::<usize>(), any::<bool>()).prop_map(|(pick, permanent)| Op::Bury { pick, permanent }),
        1 => (0u8..5, any::<bool>(), any::<bool>(), any::<bool>())
            .prop_map(|(tenant, pending, inflight, dead)| Op::Purge { tenant, pending, inflight, dead }),
        1 => Just(Op::Restart),
        2 => (1u64..4).prop_map(|n| Op::Advance(n * 4_000)),
        1 => Just(Op::Sweep),
    ]
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum State {
    Due(u64),
    Inflight,
    Dead(ErrorClass),
}

#[derive(Clone, Debug)]
struct Row {
    tenant: String,
    bytes: i64,
    attempts: u32,
    state: State,
}

#[derive(Default)]
struct Model {
    hooks: BTreeMap<u64, String>,
    rows: BTreeMap<(u64, u16), Row>,
    /// (tenant, key) → id of the original and when the key expires. A key
    /// stays here, expired, until a sweep.
    keys: HashMap<(String, String), (String, u64)>,
    holding: BTreeSet<String>,
    last_seq: u64,
}

fn tenant(n: u8) -> String {
    format!("tenant-{n}")
}

impl Model {
    fn keys_of(&self, tenant: &str) -> u64 {
        self.keys.keys().filter(|(t, _)| t == tenant).count() as u64
    }

    /// What the queue must answer for one entry, applied to the model.
    fn enqueue(&mut self, hook: &NewHook, id: &str, body_len: i64, now: u64, outcome: &EntryOutcome) {
        let t = tenant(hook.tenant);
        if !self.holding.contains(&t) && self.holding.len() >= TENANTS_MAX {
            assert_eq!(outcome, &EntryOutcome::Refused(Refusal::TenantLimit), "{t} is one past tenants.max");
            return;
        }
        let key = hook.key.map(|k| format!("evt-{k}"));
        if let Some(key) = &key {
            let stored = self.keys.get(&(t.clone(), key.clone()));
            if let Some((original, expires_at)) = stored.filter(|(_, expires_at)| *expires_at > now) {
                match outcome {
                    EntryOutcome::Duplicate(env) => assert_eq!(&env.id, original, "a duplicate names the original"),
                    other => panic!("{t}/{key} is live until {expires_at}: expected a duplicate, got {other:?}"),
                }
                return;
            }
            // An expired key not yet swept is taken over, not added.
            let new = stored.is_none();
            if new && (self.keys.len() as u64 >= KEYS_PER_NODE || self.keys_of(&t) >= KEYS_PER_TENANT) {
                assert_eq!(outcome, &EntryOutcome::Refused(Refusal::DedupeQuota), "{t}/{key} is past a quota");
                return;
            }
        }
        let EntryOutcome::Committed(env) = outcome else { panic!("{t}: expected a commit, got {outcome:?}") };
        assert!(env.seq > self.last_seq, "seq {} after {}: strictly increasing, never reused", env.seq, self.last_seq);
        self.last_seq = env.seq;
        self.hooks.insert(env.seq, id.to_string());
        for sink in 0..hook.sinks {
            self.rows
                .insert((env.seq, sink), Row { tenant: t.clone(), bytes: body_len, attempts: 0, state: State::Due(1) });
        }
        if let Some(key) = key {
            self.keys.insert((t.clone(), key), (id.to_string(), now + DEDUPE_TTL_MS));
        }
        self.holding.insert(t);
    }

    fn inflight(&self) -> Vec<(u64, u16)> {
        self.rows.iter().filter(|(_, r)| r.state == State::Inflight).map(|(k, _)| *k).collect()
    }

    fn remove_row(&mut self, at: (u64, u16)) {
        self.rows.remove(&at);
        if !self.rows.keys().any(|(seq, _)| *seq == at.0) {
            self.hooks.remove(&at.0);
        }
    }

    fn counters(&self, tenant: Option<&str>) -> [i64; 6] {
        let mut c = [0i64; 6];
        for row in self.rows.values().filter(|r| tenant.is_none_or(|t| t == r.tenant)) {
            match row.state {
                State::Due(_) => {
                    c[0] += 1;
                    if row.attempts > 0 {
                        c[1] += 1;
                    }
                }
                State::Inflight => c[2] += 1,
                State::Dead(_) => c[3] += 1,
            }
            c[4] += row.bytes;
        }
        c[5] = self.keys.keys().filter(|(t, _)| tenant.is_none_or(|x| x == t)).count() as i64;
        c
    }
}

fn check(queue: &Queue, model: &Model) {
    let stored: BTreeMap<u64, String> =
        queue.hooks(0, 100_000).expect("hooks").into_iter().map(|e| (e.seq, e.id)).collect();
    assert_eq!(stored, model.hooks, "stored hooks");
    let tenants: BTreeSet<String> = (0..5).map(tenant).collect();
    for t in tenants.iter().map(Some).chain([None]) {
        let actual = ["pending", "scheduled", "inflight", "dead", "bytes", "dedupe_keys"]
            .map(|kind| queue.counter(t.map(String::as_str), kind).expect("counter"));
        assert_eq!(actual, model.counters(t.map(String::as_str)), "counters of {t:?}");
    }
    let page = queue.dead_letters().dead(&DeadQuery { limit: 10_000, ..DeadQuery::default() }).expect("dlq");
    let dead: BTreeMap<(u64, u16), Option<ErrorClass>> =
        page.entries.iter().map(|e| ((e.envelope.seq, e.sink), e.error_class)).collect();
    let expected: BTreeMap<(u64, u16), Option<ErrorClass>> = model
        .rows
        .iter()
        .filter_map(|(k, r)| match r.state {
            State::Dead(class) => Some((*k, Some(class))),
            _ => None,
        })
        .collect();
    assert_eq!(dead, expected, "DLQ contents");
    assert_eq!(page.total, Some(expected.len() as u64), "DLQ total from the counter");
    for t in &tenants {
        let [pending, scheduled, inflight, _, bytes, _] = model.counters(Some(t));
        assert_eq!(
            queue.pending_for_tenant(t).expect("pending"),
            TenantPending { pending, scheduled, inflight, bytes }
        );
    }
}

fn config(clock: &Clock) -> QueueConfig {
    QueueConfig {
        tenants_max: Some(TENANTS_MAX),
        dedupe_max_entries: Some(KEYS_PER_NODE),
        dedupe_max_entries_per_tenant: Some(KEYS_PER_TENANT),
        dedupe_ttl_ms: DEDUPE_TTL_MS,
        clock: clock.clone(),
        ..QueueConfig::default()
    }
}

async fn run(ops: Vec<Op>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = Clock::manual(CLOCK0);
    let mut queue = Queue::open(dir.path(), config(&clock)).expect("open");
    let mut model = Model::default();
    let mut ids = 0u64;
    for op in ops {
        match op {
            Op::Enqueue(hooks) => {
                let entries: Vec<Entry> = hooks
                    .iter()
                    .map(|h| {
                        ids += 1;
                        let body = vec![h.body; 10 + usize::from(h.body % 7)];
                        let mut envelope = Envelope::new(format!("id-{ids}"), "src".into(), tenant(h.tenant), 1, body);
                        envelope.dedupe_key = h.key.map(|k| format!("evt-{k}"));
                        Entry::new(envelope, (0..h.sinks).map(|s| (s, "sha".to_string())).collect())
                    })
                    .collect();
                let outcomes = queue.intake().enqueue(entries.clone(), None).await.expect("enqueue");
                assert_eq!(outcomes.len(), entries.len());
                for ((hook, entry), outcome) in hooks.iter().zip(&entries).zip(&outcomes) {
                    let len = entry.envelope.body.len() as i64;
                    model.enqueue(hook, &entry.envelope.id, len, clock.now_ms(), outcome);
                }
            }
            Op::Claim { at, limit } => {
                let now = T0 + at;
                let claimed = queue.deliveries().claim_due(now, limit).expect("claim");
                let mut due: Vec<(u64, u64, u16)> = model
                    .rows
                    .iter()
                    .filter_map(|(k, r)| match r.state {
                        State::Due(d) if d <= now => Some((d, k.0, k.1)),
                        _ => None,
                    })
                    .collect();
                due.sort();
                due.truncate(limit);
                let got: Vec<(u64, u16)> = claimed.iter().map(|r| (r.seq, r.sink)).collect();
                let want: Vec<(u64, u16)> = due.iter().map(|(_, s, k)| (*s, *k)).collect();
                assert_eq!(got, want, "claimed rows, oldest due first");
                for at in want {
                    if let Some(row) = model.rows.get_mut(&at) {
                        row.state = State::Inflight;
                    }
                }
            }
            Op::Complete(pick) => {
                let inflight = model.inflight();
                if let Some(&at) = inflight.get(pick % inflight.len().max(1)) {
                    queue.deliveries().complete(at.0, at.1).expect("complete");
                    model.remove_row(at);
                }
            }
            Op::Retry { pick, delay } => {
                let inflight = model.inflight();
                if let Some(&at) = inflight.get(pick % inflight.len().max(1)) {
                    let failure = LastFailure::new(ErrorClass::Transient, "the model's failure", T0);
                    queue.deliveries().retry(at.0, at.1, T0 + delay, failure).expect("retry");
                    if let Some(row) = model.rows.get_mut(&at) {
                        row.attempts += 1;
                        row.state = State::Due(T0 + delay);
                    }
                }
            }
            Op::Bury { pick, permanent } => {
                let inflight = model.inflight();
                if let Some(&at) = inflight.get(pick % inflight.len().max(1)) {
                    let class = if permanent { ErrorClass::Permanent } else { ErrorClass::Transient };
                    queue.deliveries().bury(at.0, at.1, T0 + 500, "gave up", class).expect("bury");
                    if let Some(row) = model.rows.get_mut(&at) {
                        row.attempts += 1;
                        row.state = State::Dead(class);
                    }
                }
            }
            Op::Purge { tenant: n, pending, inflight, dead } => {
                let t = tenant(n);
                let counts = queue.tenants().purge_tenant(&t, PurgeKinds { pending, inflight, dead }).expect("purge");
                let doomed: Vec<((u64, u16), State)> = model
                    .rows
                    .iter()
                    .filter(|(_, r)| r.tenant == t)
                    .filter(|(_, r)| match r.state {
                        State::Due(_) => pending,
                        State::Inflight => inflight,
                        State::Dead(_) => dead,
                    })
                    .map(|(k, r)| (*k, r.state.clone()))
                    .collect();
                let count = |f: fn(&State) -> bool| doomed.iter().filter(|(_, s)| f(s)).count() as u64;
                assert_eq!(counts.pending, count(|s| matches!(s, State::Due(_))), "purged pending");
                assert_eq!(counts.dead, count(|s| matches!(s, State::Dead(_))), "purged dead");
                assert_eq!(counts.inflight, inflight.then(|| count(|s| *s == State::Inflight)), "purged inflight");
                for (at, _) in doomed {
                    model.remove_row(at);
                }
            }
            Op::Restart => {
                queue.close().await;
                queue = Queue::open(dir.path(), config(&clock)).expect("reopen");
                queue.recover_inflight(0).expect("recover");
                for row in model.rows.values_mut() {
                    if row.state == State::Inflight {
                        row.state = State::Due(0);
                    }
                }
                assert!(queue.stats().expect("stats").next_seq > model.last_seq, "next_seq recovered past every seq");
            }
            Op::Advance(ms) => clock.advance(ms),
            Op::Sweep => {
                let now = clock.now_ms();
                let removed = queue.sweep_dedupe(now, 1_000).await.expect("sweep");
                let before = model.keys.len();
                model.keys.retain(|_, (_, expires_at)| *expires_at > now);
                assert_eq!(removed, before - model.keys.len(), "keys swept");
            }
        }
        check(&queue, &model);
    }
    queue.close().await;
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, max_shrink_iters: 200, ..ProptestConfig::default() })]

    #[test]
    fn the_queue_matches_its_model(ops in proptest::collection::vec(op(), 1..40)) {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
        runtime.block_on(run(ops));
    }
}
