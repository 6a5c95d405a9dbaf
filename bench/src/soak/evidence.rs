//! The checker: what the clients were acked against what the receiver was
//! given, hook by hook.

use std::collections::HashMap;

use super::node::CONCURRENCY;
use super::recorder::Delivery;
use super::traffic::Acked;

/// The counts a soak run is judged by.
#[derive(Clone, Debug, Default)]
pub struct Evidence {
    /// Hooks of the main tenant answered `201`.
    pub acked: usize,
    /// Of those, delivered at least once.
    pub delivered: usize,
    /// Acked and never delivered: must be 0.
    pub lost: usize,
    /// Deliveries whose bytes or tenant differ from what was acked: must be 0.
    pub other_bytes: usize,
    /// Deliveries beyond the first of a hook (both tenants).
    pub duplicates: usize,
    /// Hooks delivered whose ack the client never saw (the node was killed
    /// between the commit and the answer): allowed, at least once.
    pub unacked_delivered: usize,
    /// Scratch-tenant hooks acked; of those, delivered before an erase took
    /// the rest.
    pub scratch_acked: usize,
    pub scratch_delivered: usize,
}

impl Evidence {
    pub fn weigh(acked: &HashMap<String, Acked>, delivered: &HashMap<String, Vec<Delivery>>) -> Evidence {
        let mut evidence = Evidence::default();
        for (id, ack) in acked {
            let got = delivered.get(id).map(Vec::as_slice).unwrap_or_default();
            let scratch = ack.tenant != super::node::TENANT;
            match (scratch, got.is_empty()) {
                (false, false) => evidence.delivered += 1,
                (false, true) => evidence.lost += 1,
                (true, false) => evidence.scratch_delivered += 1,
                (true, true) => {}
            }
            if scratch {
                evidence.scratch_acked += 1;
            } else {
                evidence.acked += 1;
            }
            evidence.other_bytes += got.iter().filter(|d| d.sha256 != ack.sha256 || d.tenant != ack.tenant).count();
        }
        for (id, got) in delivered {
            evidence.duplicates += got.len().saturating_sub(1);
            if !acked.contains_key(id) {
                evidence.unacked_delivered += 1;
            }
        }
        evidence
    }

    /// Duplicates a run may show: a kill can leave at most the deliveries
    /// in flight (the dispatch concurrency) delivered but not marked done.
    pub fn duplicate_bound(kills: u32) -> usize {
        kills as usize * CONCURRENCY
    }

    /// What is wrong, if anything.
    pub fn failures(&self, kills: u32) -> Vec<String> {
        let mut failures = Vec::new();
        if self.acked == 0 {
            failures.push("no hook was acked: the run tested nothing".to_string());
        }
        if self.lost > 0 {
            failures.push(format!("{} acked hooks were never delivered", self.lost));
        }
        if self.other_bytes > 0 {
            failures.push(format!("{} deliveries carried other bytes than were acked", self.other_bytes));
        }
        if self.duplicates > Evidence::duplicate_bound(kills) {
            failures.push(format!(
                "{} duplicates, over the bound of {} ({kills} kills × {CONCURRENCY} in flight)",
                self.duplicates,
                Evidence::duplicate_bound(kills)
            ));
        }
        failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ack(tenant: &'static str, sha: &str) -> Acked {
        Acked { tenant, sha256: sha.into() }
    }

    fn got(tenant: &str, sha: &str) -> Delivery {
        Delivery { tenant: tenant.into(), sha256: sha.into() }
    }

    #[test]
    fn counts_lost_changed_and_duplicated_hooks() {
        let acked = HashMap::from([
            ("a".to_string(), ack("main", "1")),
            ("b".to_string(), ack("main", "2")),
            ("c".to_string(), ack("main", "3")),
            ("s".to_string(), ack("scratch", "4")),
        ]);
        let delivered = HashMap::from([
            ("a".to_string(), vec![got("main", "1"), got("main", "1")]),
            ("b".to_string(), vec![got("main", "x")]),
            ("u".to_string(), vec![got("main", "9")]),
        ]);
        let evidence = Evidence::weigh(&acked, &delivered);
        assert_eq!((evidence.acked, evidence.delivered, evidence.lost), (3, 2, 1));
        assert_eq!((evidence.other_bytes, evidence.duplicates, evidence.unacked_delivered), (1, 1, 1));
        assert_eq!((evidence.scratch_acked, evidence.scratch_delivered), (1, 0));
        let failures = evidence.failures(1);
        assert_eq!(failures.len(), 2, "{failures:?}");
    }

    #[test]
    fn duplicates_past_the_bound_fail_the_run() {
        let acked = HashMap::from([("a".to_string(), ack("main", "1"))]);
        let delivered = HashMap::from([("a".to_string(), vec![got("main", "1"); CONCURRENCY + 2])]);
        let evidence = Evidence::weigh(&acked, &delivered);
        assert!(evidence.failures(1).iter().any(|f| f.contains("over the bound")));
        assert!(evidence.failures(2).is_empty());
    }
}
