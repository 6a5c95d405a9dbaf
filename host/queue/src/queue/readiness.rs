//! Whether this node's store can take hooks and hand out rows: what
//! `/ready` answers. Every reason that holds is given, not only the first.

use std::sync::atomic::Ordering;

use super::Intake;

/// One reason the node is not ready: a stable code and what it means.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotReady {
    pub code: &'static str,
    pub message: String,
}

impl NotReady {
    fn new(code: &'static str, message: impl Into<String>) -> NotReady {
        NotReady { code, message: message.into() }
    }
}

impl Intake {
    /// Why the node is not ready (empty: it is): a failed WAL sync (until
    /// the store recovers), a store write that failed with none succeeding
    /// since (a commit, a claim or an outcome), free space under the store
    /// below the reserve, damage found and not repaired.
    pub fn readiness(&self) -> Vec<NotReady> {
        let mut reasons = Vec::new();
        if self.stats.sync_failed.load(Ordering::Acquire) {
            reasons.push(NotReady::new(
                "store_sync_failed",
                "a WAL sync failed: commits are refused until the store recovers",
            ));
        }
        if let Some(failure) = self.store.health().write_failure() {
            reasons.push(NotReady::new("store_write_failed", format!("a store write failed: {failure}")));
        } else if self.stats.write_failed.load(Ordering::Acquire) {
            reasons.push(NotReady::new("store_write_failed", "a commit's write failed: the store is recovering"));
        }
        let reserve = self.config.disk_reserve_bytes;
        if reserve > 0 {
            let location = self.store.location();
            match crate::store::free_bytes(std::path::Path::new(&location)) {
                Ok(free) if free < reserve => reasons.push(NotReady::new(
                    "low_disk_space",
                    format!(
                        "{free} bytes free under {location}, below the reserve of {reserve} (node.disk_reserve_bytes)"
                    ),
                )),
                Ok(_) => {}
                Err(e) => reasons
                    .push(NotReady::new("low_disk_space", format!("cannot read free space under {location}: {e}"))),
            }
        }
        for (family, reason) in self.store.health().damage() {
            reasons.push(NotReady::new(
                "store_damaged",
                format!("the {family} family is damaged ({reason}); run `ankusa store verify --repair`"),
            ));
        }
        reasons
    }
}
