//! The checker: what the receiver got, judged per hook, per key and per
//! lapse against what the provider was acked.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::provider::{Posted, Sent};
use super::schedule::{NODE_IDS, Schedule};
use super::world::Lapse;
use crate::fleet::LEASE_TTL_MS;
use crate::receiver::Received;

/// Each node's `dispatch.concurrency` (see `fleet::node_yaml`).
pub const CONCURRENCY: usize = 2;
/// The receiver's time per delivery: a node delivers at most
/// `CONCURRENCY / RECEIVER_DELAY` hooks a second.
pub const RECEIVER_DELAY: Duration = Duration::from_millis(5);
/// How often a node publishes its delivery outcomes (`fleet::outcomes`).
const OUTCOME_FLUSH: Duration = Duration::from_millis(100);
/// Every hook posted before the faults healed is acked within this of it.
pub const ACK_AFTER_HEAL: Duration = Duration::from_secs(15);

/// The documented bound for one node's lapse: its deliveries whose
/// outcomes it had not yet published (its last outcome flush) plus its
/// attempts in flight.
pub fn per_lapse() -> usize {
    CONCURRENCY + (OUTCOME_FLUSH.as_micros() * CONCURRENCY as u128 / RECEIVER_DELAY.as_micros()) as usize
}

/// One delivery the receiver answered 2xx: the hook, the node that
/// delivered it, and when (since the schedule began).
pub struct Delivery {
    pub id: String,
    pub by: String,
    pub at: Duration,
    pub body: Vec<u8>,
}

pub fn deliveries(received: &[Received], t0: Instant) -> Vec<Delivery> {
    let mut out: Vec<Delivery> = received
        .iter()
        .filter(|r| (200..300).contains(&r.status))
        .map(|r| Delivery {
            id: r.header("x-ankusa-id").expect("every delivery names its hook").to_string(),
            by: r.path.rsplit('/').next().unwrap_or_default().to_string(),
            at: r.at.saturating_duration_since(t0),
            body: r.body.to_vec(),
        })
        .collect();
    out.sort_by_key(|d| d.at);
    out
}

/// An ordered key's hooks that one node logged and one node delivered:
/// (key, the logging node's index, the delivering node's id).
type Run<'a> = (&'a str, usize, &'a str);

/// What a schedule came to.
#[derive(Clone, Debug, Default)]
pub struct Verdict {
    pub seed: u64,
    pub nodes: usize,
    pub server: String,
    pub retention_ms: u64,
    pub faults: Vec<String>,
    /// Pairs of faults whose spans overlapped.
    pub overlaps: usize,
    /// Hooks answered 201 (accepted or duplicate), and those given up.
    pub acked: usize,
    pub unacked: usize,
    /// Acked hooks never delivered (or, if doomed, in no DLQ).
    pub lost: Vec<String>,
    pub wrong_bytes: Vec<String>,
    /// Doomed acked hooks found in a DLQ, and those in none.
    pub dead_letters: usize,
    pub dead_lost: Vec<String>,
    /// Deliveries beyond the first of each hook.
    pub duplicates: usize,
    /// Duplicates no lapse of their deliverer explains.
    pub unexplained: Vec<String>,
    /// Per unexplained duplicate: the nodes that delivered it, and when its
    /// first and last copies came (for their logs around them).
    pub unexplained_spans: Vec<(Vec<String>, Duration, Duration)>,
    /// What those nodes logged around those copies.
    pub context: Vec<String>,
    pub lapses: usize,
    /// The most duplicates charged to one lapse, and the lapses over the bound.
    pub worst_lapse: usize,
    pub over_bound: Vec<String>,
    /// Ordered keys (per node that logged them and node that delivered
    /// them), and those delivered out of their ack order.
    pub ordered_runs: usize,
    pub out_of_order: Vec<String>,
    /// The longest a hook was refused before its ack, and hooks acked
    /// later than [`ACK_AFTER_HEAL`] after every fault healed.
    pub longest_refusal: Duration,
    pub late_acks: Vec<String>,
    /// Deliveries of hooks no one acked (answered 503, then settled).
    pub unowed: usize,
    pub fenced: usize,
    /// Lapses the nodes logged of themselves (stalls, attempts withdrawn or
    /// timed out; each also a lapse), and the duplicates no applied fault
    /// explains but such a lapse does.
    pub logged: usize,
    pub only_logged_explain: usize,
    pub crashes: Vec<String>,
    pub evidence: Option<PathBuf>,
    pub took: Duration,
}

impl Verdict {
    pub fn holds(&self) -> bool {
        self.lost.is_empty()
            && self.wrong_bytes.is_empty()
            && self.dead_lost.is_empty()
            && self.unexplained.is_empty()
            && self.over_bound.is_empty()
            && self.out_of_order.is_empty()
            && self.late_acks.is_empty()
            && self.crashes.is_empty()
    }

    /// Judge `posted` against what was delivered and dead-lettered.
    pub fn judge(
        schedule: &Schedule,
        posted: &Posted,
        delivered: &[Delivery],
        dead: &HashSet<String>,
        lapses: &[Lapse],
        healed_at: Duration,
        provider_t0: Duration,
    ) -> Verdict {
        let mut v = Verdict {
            seed: schedule.seed,
            nodes: schedule.nodes,
            retention_ms: schedule.retention_ms,
            faults: schedule.steps.iter().map(|s| format!("{}@{}ms", s.fault, s.at_ms)).collect(),
            overlaps: schedule.overlaps(),
            acked: posted.acked.len(),
            unacked: posted.unacked,
            lapses: lapses.len(),
            ..Verdict::default()
        };
        let mut by_id: HashMap<&str, Vec<&Delivery>> = HashMap::new();
        for d in delivered {
            by_id.entry(&d.id).or_default().push(d);
        }
        for (id, sent) in &posted.acked {
            let copies = by_id.get(id.as_str());
            if sent.doomed {
                if dead.contains(id) {
                    v.dead_letters += 1;
                } else {
                    v.dead_lost.push(id.clone());
                }
                continue;
            }
            match copies {
                None => v.lost.push(id.clone()),
                Some(copies) if copies.iter().any(|c| c.body != sent.body.as_bytes()) => v.wrong_bytes.push(id.clone()),
                Some(_) => {}
            }
            v.longest_refusal = v.longest_refusal.max(sent.refused_for);
            let acked_at = provider_t0 + sent.acked_at;
            if acked_at > healed_at + ACK_AFTER_HEAL && sent.acked_at.saturating_sub(sent.refused_for) < healed_at {
                v.late_acks.push(format!("{id} acked {:.1} s after the heal", (acked_at - healed_at).as_secs_f64()));
            }
        }
        v.unowed = by_id.keys().filter(|id| !posted.acked.contains_key(**id)).count();
        v.charge_duplicates(&by_id, lapses, schedule.nodes);
        v.check_order(&posted.acked, &by_id);
        v
    }

    /// Each delivery beyond a hook's first is charged to a lapse of the
    /// node that first delivered it (or of NATS), around that delivery;
    /// none may go uncharged, and no lapse may carry more than its bound.
    fn charge_duplicates(&mut self, by_id: &HashMap<&str, Vec<&Delivery>>, lapses: &[Lapse], nodes: usize) {
        let mut charged = vec![0usize; lapses.len()];
        let before = Duration::from_secs(1);
        for (id, copies) in by_id {
            let Some(first) = copies.first() else { continue };
            let extra = copies.len() - 1;
            if extra == 0 {
                continue;
            }
            self.duplicates += extra;
            let node = NODE_IDS.iter().position(|n| *n == first.by);
            let window = |l: &Lapse| first.at + before >= l.at && first.at <= l.until;
            let explains = |l: &Lapse| (l.node.is_none() || l.node == node) && window(l);
            let lapse = lapses
                .iter()
                .enumerate()
                .filter(|(_, l)| explains(l))
                .min_by_key(|(_, l)| l.at.abs_diff(first.at))
                .map(|(i, _)| i);
            if lapse.is_some() && lapses.iter().filter(|l| !l.logged).all(|l| !explains(l)) {
                self.only_logged_explain += extra;
            }
            match lapse {
                Some(i) => charged[i] += extra,
                None => {
                    let each: Vec<String> =
                        copies.iter().map(|c| format!("{} at {:.2} s", c.by, c.at.as_secs_f64())).collect();
                    self.unexplained.push(format!("{id}: {} copies: {}", copies.len(), each.join(", ")));
                    let mut by: Vec<String> = copies.iter().map(|c| c.by.clone()).collect();
                    by.sort();
                    by.dedup();
                    let last = copies.last().map_or(first.at, |c| c.at);
                    self.unexplained_spans.push((by, first.at, last));
                }
            }
        }
        for (lapse, count) in lapses.iter().zip(&charged) {
            let bound = if lapse.node.is_some() { per_lapse() } else { per_lapse() * nodes };
            self.worst_lapse = self.worst_lapse.max(*count);
            if *count > bound {
                self.over_bound.push(format!(
                    "{} at {:.2} s: {count} duplicates (bound {bound})",
                    lapse.fault,
                    lapse.at.as_secs_f64()
                ));
            }
        }
    }

    /// Per ordered key, the hooks one node logged, as one node delivered
    /// them: in the order they were acked (each hook where it was first
    /// delivered by that node). Hooks acked as duplicates are left out:
    /// the node that logged them may be another.
    fn check_order(&mut self, acked: &HashMap<String, Sent>, by_id: &HashMap<&str, Vec<&Delivery>>) {
        let mut runs: HashMap<Run<'_>, Vec<(Duration, usize)>> = HashMap::new();
        for (id, sent) in acked {
            let Some(key) = sent.key.as_deref().filter(|_| !sent.duplicate && !sent.doomed) else { continue };
            let mut seen_by = HashSet::new();
            for d in by_id.get(id.as_str()).into_iter().flatten() {
                if seen_by.insert(d.by.as_str()) {
                    runs.entry((key, sent.node, d.by.as_str())).or_default().push((d.at, sent.n));
                }
            }
        }
        self.ordered_runs = runs.len();
        for ((key, logged_by, delivered_by), mut run) in runs {
            run.sort();
            if let Some(pair) = run.windows(2).find(|w| w[0].1 > w[1].1) {
                self.out_of_order.push(format!(
                    "key {key} logged by {} delivered by {delivered_by}: n {} at {:.3} s before n {} at {:.3} s",
                    NODE_IDS[logged_by],
                    pair[0].1,
                    pair[0].0.as_secs_f64(),
                    pair[1].1,
                    pair[1].0.as_secs_f64()
                ));
            }
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seed {} ({} nodes, nats {}, retention {} s): {} acked, {} lost, {} wrong bytes, {} dead letters ({} lost), \
             {} duplicates over {} lapses ({} of them the nodes logged, explaining {} alone; worst {} of bound {}, \
             {} unexplained, {} over), \
             {} ordered runs ({} out of order), \
             longest refusal {:.1} s ({} late), {} unacked, {} unowed, {} fenced exits, {} crashes, {} overlapping pairs, \
             {:.1} s; {}",
            self.seed,
            self.nodes,
            self.server,
            self.retention_ms / 1000,
            self.acked,
            self.lost.len(),
            self.wrong_bytes.len(),
            self.dead_letters,
            self.dead_lost.len(),
            self.duplicates,
            self.lapses,
            self.logged,
            self.only_logged_explain,
            self.worst_lapse,
            per_lapse(),
            self.unexplained.len(),
            self.over_bound.len(),
            self.ordered_runs,
            self.out_of_order.len(),
            self.longest_refusal.as_secs_f64(),
            self.late_acks.len(),
            self.unacked,
            self.unowed,
            self.fenced,
            self.crashes.len(),
            self.overlaps,
            self.took.as_secs_f64(),
            self.faults.join(", ")
        )
    }
}

/// A lease, for the lapse windows.
pub const LEASE: Duration = Duration::from_millis(LEASE_TTL_MS);
