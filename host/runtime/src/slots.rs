//! The node's instance slots: `runtime.max_instances` instances at most,
//! busy or idle, across every sink and transform, so the setting bounds
//! memory (each instance's linear memory has its own cap) rather than how
//! many sources a node may hold.
//!
//! An instance takes a slot when it starts and gives it back when it is
//! dropped. A start that finds every slot taken first evicts the instance
//! idle longest, in any pool; if none is idle, it waits for a slot until
//! its call's deadline, and an instance that finishes a call while a start
//! waits is dropped rather than kept idle. A start that waits in vain is a
//! `transient` failure: the node is busy, the sink is not at fault.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::outcome::Failure;
use crate::error_class::ErrorClass;

/// A pool whose idle instances may be evicted to free a slot.
pub trait Evict: Send + Sync {
    /// When its longest-idle instance went idle, if it has one.
    fn idle_since(&self) -> Option<Instant>;
    /// Drop its longest-idle instance; whether there was one.
    fn evict_oldest(&self) -> bool;
}

/// The slots, and the pools that may give one back.
pub struct InstanceSlots {
    slots: Arc<Semaphore>,
    total: usize,
    /// Starts waiting for a slot now.
    waiting: AtomicUsize,
    pools: Mutex<Vec<Weak<dyn Evict>>>,
}

/// A slot held by one instance, for as long as it lives.
pub type Slot = OwnedSemaphorePermit;

impl InstanceSlots {
    pub fn new(total: usize) -> Arc<InstanceSlots> {
        let total = total.max(1);
        Arc::new(InstanceSlots {
            slots: Arc::new(Semaphore::new(total)),
            total,
            waiting: AtomicUsize::new(0),
            pools: Mutex::new(Vec::new()),
        })
    }

    /// A pool whose idle instances may be evicted; forgotten once dropped.
    pub fn register(&self, pool: Weak<dyn Evict>) {
        let mut pools = self.pools.lock().unwrap_or_else(|e| e.into_inner());
        pools.retain(|p| p.strong_count() > 0);
        pools.push(pool);
    }

    /// Slots not held by an instance.
    pub fn free(&self) -> usize {
        self.slots.available_permits()
    }

    /// Whether a start is waiting for a slot: an instance done with its
    /// call is then dropped, not kept idle.
    pub fn wanted(&self) -> bool {
        self.waiting.load(Ordering::Acquire) > 0
    }

    /// A slot for a new instance: a free one, one an idle instance gives
    /// up, or one freed within `within`.
    pub async fn take(&self, within: Duration) -> Result<Slot, Failure> {
        if let Ok(slot) = self.slots.clone().try_acquire_owned() {
            return Ok(slot);
        }
        if self.evict_idlest()
            && let Ok(slot) = self.slots.clone().try_acquire_owned()
        {
            return Ok(slot);
        }
        self.waiting.fetch_add(1, Ordering::AcqRel);
        // An instance may have gone idle before the wait was seen.
        self.evict_idlest();
        let waited = tokio::time::timeout(within, self.slots.clone().acquire_owned()).await;
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        match waited {
            Ok(Ok(slot)) => Ok(slot),
            _ => Err(Failure::new(
                ErrorClass::Transient,
                format!("all {} instances of the node are busy (runtime.max_instances)", self.total),
            )),
        }
    }

    /// Evict the instance idle longest across the pools; whether one was.
    fn evict_idlest(&self) -> bool {
        let pools: Vec<Arc<dyn Evict>> = {
            let mut pools = self.pools.lock().unwrap_or_else(|e| e.into_inner());
            pools.retain(|p| p.strong_count() > 0);
            pools.iter().filter_map(Weak::upgrade).collect()
        };
        let idlest = pools.iter().filter_map(|pool| Some((pool.idle_since()?, pool))).min_by_key(|(since, _)| *since);
        idlest.is_some_and(|(_, pool)| pool.evict_oldest())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pool of idle instances, each holding its slot.
    struct Idle(Mutex<Vec<(Instant, Slot)>>);

    impl Evict for Idle {
        fn idle_since(&self) -> Option<Instant> {
            self.0.lock().expect("lock").first().map(|(since, _)| *since)
        }
        fn evict_oldest(&self) -> bool {
            let mut idle = self.0.lock().expect("lock");
            if idle.is_empty() {
                return false;
            }
            drop(idle.remove(0));
            true
        }
    }

    #[tokio::test]
    async fn a_full_node_evicts_the_idlest_instance_then_waits_then_says_it_is_busy() {
        let slots = InstanceSlots::new(2);
        let older = Arc::new(Idle(Mutex::new(Vec::new())));
        let newer = Arc::new(Idle(Mutex::new(Vec::new())));
        slots.register(Arc::downgrade(&older) as Weak<dyn Evict>);
        slots.register(Arc::downgrade(&newer) as Weak<dyn Evict>);
        let first = slots.take(Duration::ZERO).await.expect("a free slot");
        older.0.lock().expect("lock").push((Instant::now(), first));
        let second = slots.take(Duration::ZERO).await.expect("a free slot");
        newer.0.lock().expect("lock").push((Instant::now(), second));
        assert_eq!(slots.free(), 0);

        let third = slots.take(Duration::ZERO).await.expect("the idlest instance gives its slot up");
        assert!(older.0.lock().expect("lock").is_empty(), "the one idle longest went");
        assert_eq!(newer.0.lock().expect("lock").len(), 1);

        let busy = slots.take(Duration::from_millis(10));
        let fourth = slots.take(Duration::ZERO).await.expect("the other idle one goes");
        let refused = busy.await.expect_err("nothing idle, nothing freed");
        assert_eq!(refused.class, ErrorClass::Transient);
        assert!(refused.reason.contains("max_instances"), "{}", refused.reason);

        let waiting = tokio::spawn({
            let slots = slots.clone();
            async move { slots.take(Duration::from_secs(5)).await.map(drop) }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(slots.wanted());
        drop(third);
        waiting.await.expect("task").expect("a slot freed while it waited");
        drop(fourth);
        assert_eq!(slots.free(), 2);
    }
}
