//! Settling with a hook-framed intake log (`fleet`): every hook this store
//! put in the replicated log ends up committed here, even when the round
//! that logged it failed.
//!
//! In `fleet` a hook goes to the log before the store. A round can fail
//! after the log took some of its hooks (a connection lost mid-round, an
//! ack that never came, a store write refused after the publish), and a
//! provider's retry then meets the log's duplicate window: it is answered
//! `duplicate` on the strength of a hook no store has. So:
//!
//! - A hook whose round failed after it may have left is *unsettled*. The
//!   writer appends it again under the same message id before its next
//!   group (or on its own within a second when idle): the log answers that
//!   it has it (this store's, under the same seq), or takes it now, and the
//!   group commits it under its seq; if the log holds another node's hook
//!   under that id, that node delivers it and this one is dropped.
//! - Until then a retry whose duplicate is an unsettled hook of this store
//!   is refused (`503`), never answered `duplicate`.
//! - [`Settled`] (in the meta family, written with each group that moves
//!   it) is the log position through which every hook this store logged is
//!   committed here, and the seqs still unsettled. After a restart or a
//!   store that lost unsynced writes, the writer reads this store's hooks
//!   past that position and commits the ones it lacks ([`candidates`]).

use std::collections::HashSet;

use super::QueueError;
use super::codec::{CodecError, Reader, Writer};
use crate::intake::LoggedHook;
use crate::store::keys::{hooks, meta};
use crate::store::{Cf, Store};

const VERSION: u8 = 1;

/// How far this store is settled with its log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settled {
    /// The log this position is of ([`crate::intake::IntakeLog::identity`]).
    pub log: String,
    /// Every hook this store logged at or below it is committed here.
    pub position: u64,
    /// Seqs logged (perhaps) and not committed: unsettled when last written.
    pub seqs: Vec<u64>,
}

impl Settled {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(self.log.len() + 16 + 8 * self.seqs.len());
        w.u8(VERSION).str(&self.log).u64(self.position).u32(self.seqs.len() as u32);
        for seq in &self.seqs {
            w.u64(*seq);
        }
        w.finish()
    }

    pub fn decode(bytes: &[u8]) -> Result<Settled, CodecError> {
        let mut r = Reader::new(bytes, "fleet settled mark");
        r.version(VERSION)?;
        let log = r.string("log")?;
        let position = r.u64()?;
        let count = r.u32()? as usize;
        let mut seqs = Vec::with_capacity(count.min(4096));
        for _ in 0..count {
            seqs.push(r.u64()?);
        }
        r.end()?;
        Ok(Settled { log, position, seqs })
    }

    /// The mark the store holds (none: nothing settled yet).
    pub fn load(store: &dyn Store) -> Result<Settled, QueueError> {
        match store.get(Cf::Meta, meta::FLEET_SETTLED)? {
            Some(bytes) => Settled::decode(&bytes)
                .map_err(|e| QueueError::Corrupt(format!("{e}: the fleet's settled mark (meta fleet_settled)"))),
            None => Ok(Settled::default()),
        }
    }

    /// Where to read the log from: past this mark if it is of `log`, and
    /// never at or below `floor` (positions a peer's takeover took).
    pub fn read_from(&self, log: &str, floor: u64) -> u64 {
        if self.log == log { self.position.max(floor) } else { floor }
    }
}

/// The hooks read back from the log that this store must commit: logged
/// under a seq no durable write covered (at or past `durable_next`, or
/// unsettled when the mark was written), not held by the store, and not
/// already waiting in memory (`in_memory`: the writer appends those again).
pub fn candidates(
    store: &dyn Store,
    logged: Vec<LoggedHook>,
    mark: &Settled,
    durable_next: u64,
    in_memory: &HashSet<u64>,
) -> Result<Vec<LoggedHook>, QueueError> {
    let unsettled: HashSet<u64> = mark.seqs.iter().copied().collect();
    let mut lacking = Vec::new();
    let mut seen = HashSet::new();
    for hook in logged {
        let uncovered = hook.seq >= durable_next || unsettled.contains(&hook.seq);
        // A hook logged twice (appended again after a failure) is one hook.
        if !uncovered || in_memory.contains(&hook.seq) || !seen.insert(hook.seq) {
            continue;
        }
        if store.get(Cf::Hooks, &hooks::hook(hook.seq))?.is_none() {
            lacking.push(hook);
        }
    }
    Ok(lacking)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_round_trips_and_damage_is_an_error() {
        let mark = Settled { log: "HOOKS:1733".into(), position: 42, seqs: vec![7, 9] };
        let bytes = mark.encode();
        assert_eq!(Settled::decode(&bytes), Ok(mark.clone()));
        for cut in 0..bytes.len() {
            assert!(Settled::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        assert_eq!(mark.read_from("HOOKS:1733", 10), 42);
        assert_eq!(mark.read_from("HOOKS:1733", 50), 50);
        assert_eq!(mark.read_from("HOOKS:9999", 10), 10, "a recreated stream is read from its start");
    }
}
