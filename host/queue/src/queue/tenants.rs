//! Which tenants hold data on this node, and which are being erased.
//!
//! `tenants.max` caps the distinct tenants holding data; a tenant joins
//! the book in the same synced batch as its first hook, and leaves it only
//! when it is forgotten (the last step of an erase). An erasing tenant gets
//! no new hooks. Both sets live in the meta family and in memory; the
//! writer is the only one that adds to them, so its check-then-add is
//! exact. (Their keys: `store::keys::meta`.)

use std::collections::HashSet;
use std::sync::Mutex;

use super::QueueError;
use crate::store::keys::meta;
use crate::store::{Cf, Scan, Store};

#[derive(Debug, Default)]
struct Sets {
    holding: HashSet<String>,
    erasing: HashSet<String>,
}

/// Why a tenant may not take a new hook.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TenantRefusal {
    Limit,
    Erasing,
}

#[derive(Debug, Default)]
pub struct TenantBook {
    sets: Mutex<Sets>,
}

impl TenantBook {
    pub fn load(store: &dyn Store) -> Result<TenantBook, QueueError> {
        let book = TenantBook::default();
        book.reload(store)?;
        Ok(book)
    }

    /// Read both sets from the store again (after it recovered).
    pub fn reload(&self, store: &dyn Store) -> Result<(), QueueError> {
        let read = |prefix: Vec<u8>| -> Result<HashSet<String>, QueueError> {
            let rows = store.scan(&Scan::prefix(Cf::Meta, &prefix, usize::MAX))?;
            rows.iter()
                .map(|(key, _)| {
                    meta::marked_tenant(key)
                        .ok_or_else(|| QueueError::Corrupt(format!("tenant key {}", hex::encode(key))))
                })
                .collect()
        };
        let sets = Sets { holding: read(meta::all_holding())?, erasing: read(meta::all_erasing())? };
        *self.sets() = sets;
        Ok(())
    }

    fn sets(&self) -> std::sync::MutexGuard<'_, Sets> {
        self.sets.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// May `tenant` take a new hook, given the tenants `joining` in the
    /// same batch? `Ok(true)` when it would be new to the node. Changes
    /// nothing: the writer [`TenantBook::join`]s them once its batch commits.
    pub fn check(&self, tenant: &str, max: Option<usize>, joining: &[String]) -> Result<bool, TenantRefusal> {
        let sets = self.sets();
        if sets.erasing.contains(tenant) {
            return Err(TenantRefusal::Erasing);
        }
        if sets.holding.contains(tenant) || joining.iter().any(|t| t == tenant) {
            return Ok(false);
        }
        if max.is_some_and(|max| sets.holding.len() + joining.len() >= max) {
            return Err(TenantRefusal::Limit);
        }
        Ok(true)
    }

    /// Record tenants whose first hooks just committed.
    pub fn join(&self, tenants: &[String]) {
        let mut sets = self.sets();
        for tenant in tenants {
            sets.holding.insert(tenant.clone());
        }
    }

    pub fn set_erasing(&self, tenant: &str, erasing: bool) {
        let mut sets = self.sets();
        if erasing {
            sets.erasing.insert(tenant.to_string());
        } else {
            sets.erasing.remove(tenant);
        }
    }

    pub fn forget(&self, tenant: &str) {
        self.sets().holding.remove(tenant);
    }

    pub fn holding(&self) -> usize {
        self.sets().holding.len()
    }

    pub fn holding_list(&self) -> Vec<String> {
        self.sets().holding.iter().cloned().collect()
    }

    pub fn erasing(&self) -> Vec<String> {
        let mut list: Vec<String> = self.sets().erasing.iter().cloned().collect();
        list.sort();
        list
    }
}
