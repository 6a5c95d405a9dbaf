//! Reading committed hooks and their rows.

use std::sync::Arc;

use super::{Deliveries, DeliveryRow, Envelope, QueueError};
use crate::store::keys::{deliveries, hooks};
use crate::store::{Cf, Scan};

impl Deliveries {
    /// Every delivery row of hook `seq`, by sink index.
    pub fn rows_of_hook(&self, seq: u64) -> Result<Vec<DeliveryRow>, QueueError> {
        let rows = self.store.scan(&Scan::prefix(Cf::Deliveries, &deliveries::of_hook(seq), u16::MAX as usize + 1))?;
        rows.into_iter()
            .map(|(key, value)| {
                let (seq, sink) = deliveries::parse(&key).ok_or_else(|| QueueError::Corrupt("delivery key".into()))?;
                DeliveryRow::decode(seq, sink, &value)
                    .map_err(|e| QueueError::Corrupt(format!("row {seq}/{sink}: {e}")))
            })
            .collect()
    }

    /// One committed hook, if it is still stored.
    pub fn hook(&self, seq: u64) -> Result<Option<Envelope>, QueueError> {
        match self.store.get(Cf::Hooks, &hooks::hook(seq))? {
            None => Ok(None),
            Some(bytes) => {
                Envelope::decode(seq, &bytes).map(Some).map_err(|e| QueueError::Corrupt(format!("hook {seq}: {e}")))
            }
        }
    }

    /// The hooks of `seqs` in one read, for dispatch to deliver without a
    /// read each. Best effort: a hook that is gone, damaged or not read
    /// (the read failed) is `None`, and [`Deliveries::hook`] tells which.
    pub fn prefetch_hooks(&self, seqs: &[u64]) -> Vec<Option<Envelope>> {
        let keys: Vec<Vec<u8>> = seqs.iter().map(|seq| hooks::hook(*seq)).collect();
        match self.store.multi_get(Cf::Hooks, &keys) {
            Ok(values) => seqs
                .iter()
                .zip(values)
                .map(|(seq, value)| value.and_then(|bytes| Envelope::decode(*seq, &bytes).ok()))
                .collect(),
            Err(_) => vec![None; seqs.len()],
        }
    }

    /// Notified after every commit that added hooks: dispatch sleeps on it.
    pub fn commits(&self) -> Arc<tokio::sync::Notify> {
        self.stats.committed.clone()
    }

    /// Tenants being erased: their rows stay where they are for the erase.
    pub fn erasing_tenants(&self) -> Vec<String> {
        self.tenants.erasing()
    }
}
