//! The planner: what a group of calls commits, decided before anything is
//! written. Dedupe (the group's own keys, then the window of keys
//! committed lately, then the callers' prefetches or a read again),
//! tenants, quotas, seqs, and the batch with its counter deltas. It writes
//! nothing and reads only a tenant's key count the first time and a
//! duplicate's original, so it is tested on its own.

use std::collections::HashMap;

use super::call::{Call, Kind, Logged, Prepared, Replies};
use crate::intake::HookRecord;
use crate::queue::dedupe::{Freshness, Original, Recent};
use crate::queue::envelope::Envelope;
use crate::queue::tenants::{TenantBook, TenantRefusal};
use crate::queue::{DeliveryRow, EntryOutcome, QueueError, Refusal, RowState, counter_key};
use crate::store::keys::{archive, dedupe, deliveries, hooks, index, meta};
use crate::store::{Batch, Cf, Store, StoreError};

/// The bounds the writer enforces.
#[derive(Clone, Debug)]
pub struct Limits {
    pub dedupe_ttl_ms: u64,
    pub dedupe_max_entries: Option<u64>,
    pub dedupe_max_entries_per_tenant: Option<u64>,
    pub tenants_max: Option<usize>,
    /// `dual`: refuse new hooks (`intake_pending`) while the intake log
    /// holds more than this, waiting for a checkpoint.
    pub intake_max_bytes: u64,
    /// Keep a copy of every accepted hook (not of redriven ones: they are
    /// archived already).
    pub archive: bool,
}

/// What the writer knows of live dedupe keys between commits: the window
/// of keys committed lately (by epoch) and the counts quotas are checked
/// against.
pub(super) struct Ledger {
    pub(super) recent: Recent,
    /// The last epoch `recent` holds keys of. The epoch callers see
    /// (`stats.epoch`) trails it while fleet rounds are in flight: their
    /// keys are in no store a prefetch could have read.
    pub(super) last_epoch: u64,
    /// Live dedupe keys of the node, and of each tenant seen (the writer
    /// is the only one that changes them).
    pub(super) node_keys: i64,
    pub(super) tenant_keys: HashMap<String, i64>,
}

impl Ledger {
    pub(super) fn new(node_keys: i64) -> Ledger {
        Ledger { recent: Recent::new(0), last_epoch: 0, node_keys, tenant_keys: HashMap::new() }
    }

    /// Count what a planned group changes (tenants, dedupe keys and their
    /// counts) as done, before or after its write; returns the epoch its
    /// keys are recorded under, for the writer to publish once they are in
    /// the store.
    pub(super) fn assume(&mut self, group: &mut Group, tenants: &TenantBook) -> u64 {
        tenants.join(&group.joining);
        self.node_keys += group.added_keys;
        for (tenant, added) in group.keys_by_tenant.drain() {
            if let Some(n) = self.tenant_keys.get_mut(&tenant) {
                *n += added;
            }
        }
        self.last_epoch += 1;
        let keys = group.new_keys.drain(..).map(|new| (new.key, new.original)).collect();
        self.recent.record(self.last_epoch, keys);
        self.last_epoch
    }

    /// Dedupe keys were deleted outside a commit (a sweep, a forgotten
    /// tenant, a group that did not commit after all): prefetches made
    /// before may name keys that are gone, so every one of them is read
    /// again. Returns the new epoch, which marks them older.
    pub(super) fn forget_prefetches(&mut self) -> u64 {
        self.last_epoch += 1;
        self.recent.reset(self.last_epoch);
        self.last_epoch
    }
}

/// Plans calls into one group, on what the ledger and the tenant book say.
pub(super) struct Planner<'a> {
    pub(super) store: &'a dyn Store,
    pub(super) limits: &'a Limits,
    pub(super) tenants: &'a TenantBook,
    pub(super) ledger: &'a mut Ledger,
    /// `fleet`: every hook the group takes the first time (or again) is
    /// collected for the hook log.
    pub(super) logs_hooks: bool,
}

/// The batch a group is building, and what it will change in memory once
/// it commits.
#[derive(Default)]
pub(super) struct Group {
    pub(super) batch: Batch,
    pub(super) next_seq: u64,
    pub(super) first_seq: u64,
    pub(super) hooks: u64,
    /// Dedupe keys this group writes, in order.
    pub(super) new_keys: Vec<NewKey>,
    /// How many of them are new to the store (counted against quotas).
    pub(super) added_keys: i64,
    /// Index into `new_keys` by key.
    pub(super) live: HashMap<Vec<u8>, usize>,
    pub(super) keys_by_tenant: HashMap<String, i64>,
    /// Tenants whose first hook is in this batch.
    pub(super) joining: Vec<String>,
    /// Counter deltas per tenant, summed over the group and written once
    /// (with the node's totals) when the batch is sealed.
    pub(super) counters: HashMap<String, Deltas>,
    /// Hooks a hook-framed intake log must take before the store write,
    /// and the (call, entry) each came from.
    pub(super) to_log: Vec<HookRecord>,
    pub(super) logged_from: Vec<(usize, usize)>,
    /// The last log position of a hook of this store this group commits.
    pub(super) logged_through: u64,
}

/// A dedupe key a group writes.
pub(super) struct NewKey {
    key: Vec<u8>,
    original: Original,
    tenant: String,
    /// It is new to the store. A key that expired but is not yet swept is
    /// taken over in place: the store holds as many keys as before.
    added: bool,
}

/// A tenant's counter changes within one group.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Deltas {
    pending: i64,
    dead: i64,
    /// Dead rows that hold their ordered line (a takeover's).
    held: i64,
    /// Rows written behind an earlier row of their line.
    waiting: i64,
    bytes: i64,
    dedupe_keys: i64,
}

/// What planning an entry needs to know of its call.
struct CallContext {
    kind: Kind,
    now_ms: u64,
    prefetch_epoch: u64,
}

/// Where a group stood before a call, to roll a refused release back.
struct Mark {
    batch: usize,
    next_seq: u64,
    hooks: u64,
    new_keys: usize,
    added_keys: i64,
    joining: usize,
    to_log: usize,
    counters: Option<HashMap<String, Deltas>>,
}

impl Group {
    /// Note where the group stands; `counters` only for calls that may be
    /// rolled back whole (releases), since it copies the deltas.
    fn mark(&self, counters: bool) -> Mark {
        Mark {
            batch: self.batch.len(),
            next_seq: self.next_seq,
            hooks: self.hooks,
            new_keys: self.new_keys.len(),
            added_keys: self.added_keys,
            joining: self.joining.len(),
            to_log: self.to_log.len(),
            counters: counters.then(|| self.counters.clone()),
        }
    }

    /// Add the summed counter deltas to the batch.
    pub(super) fn seal_counters(&mut self) {
        let mut node = Deltas::default();
        for (tenant, d) in self.counters.drain() {
            self.batch.add_counter(counter_key(Some(&tenant), "pending"), d.pending);
            self.batch.add_counter(counter_key(Some(&tenant), "bytes"), d.bytes);
            self.batch.add_counter(counter_key(Some(&tenant), "dedupe_keys"), d.dedupe_keys);
            if d.dead != 0 {
                self.batch.add_counter(counter_key(Some(&tenant), "dead"), d.dead);
            }
            if d.held != 0 {
                self.batch.add_counter(counter_key(Some(&tenant), "held"), d.held);
            }
            if d.waiting != 0 {
                self.batch.add_counter(counter_key(Some(&tenant), "waiting"), d.waiting);
            }
            node.pending += d.pending;
            node.dead += d.dead;
            node.held += d.held;
            node.waiting += d.waiting;
            node.bytes += d.bytes;
            node.dedupe_keys += d.dedupe_keys;
        }
        self.batch.add_counter(counter_key(None, "pending"), node.pending);
        if node.dead != 0 {
            self.batch.add_counter(counter_key(None, "dead"), node.dead);
        }
        if node.held != 0 {
            self.batch.add_counter(counter_key(None, "held"), node.held);
        }
        if node.waiting != 0 {
            self.batch.add_counter(counter_key(None, "waiting"), node.waiting);
        }
        self.batch.add_counter(counter_key(None, "bytes"), node.bytes);
        self.batch.add_counter(counter_key(None, "dedupe_keys"), node.dedupe_keys);
    }

    fn rollback(&mut self, mark: Mark) {
        self.batch.truncate(mark.batch);
        self.next_seq = mark.next_seq;
        self.hooks = mark.hooks;
        if let Some(counters) = mark.counters {
            self.counters = counters;
        }
        for new in self.new_keys.drain(mark.new_keys..) {
            self.live.remove(&new.key);
            if new.added {
                *self.keys_by_tenant.entry(new.tenant).or_default() -= 1;
            }
        }
        self.added_keys = mark.added_keys;
        self.joining.truncate(mark.joining);
        self.to_log.truncate(mark.to_log);
        self.logged_from.truncate(mark.to_log);
    }
}

impl Planner<'_> {
    /// Read again the dedupe keys whose prefetch the window cannot vouch
    /// for, in one `multi_get`.
    pub(super) fn reread(&self, calls: &[Call]) -> Result<HashMap<Vec<u8>, Option<Original>>, QueueError> {
        let mut keys = Vec::new();
        for call in calls.iter().filter(|c| !c.kind.acked_before()) {
            for entry in &call.entries {
                if let Some(stored) = &entry.dedupe {
                    let key = dedupe::entry(&entry.envelope.tenant_id, &entry.envelope.source_id, stored);
                    if self.ledger.recent.freshness(&key, call.prefetch_epoch) == Freshness::Unknown {
                        keys.push(key);
                    }
                }
            }
        }
        if keys.is_empty() {
            return Ok(HashMap::new());
        }
        let values = crate::queue::damage::absent_if_damaged(self.store.multi_get_each(Cf::Dedupe, &keys)?)?;
        Ok(keys.into_iter().zip(values).map(|(k, v)| (k, v.and_then(|v| Original::decode(&v).ok()))).collect())
    }

    /// Plan every call into one group; unlogged seqs start at `next_seq`.
    pub(super) fn plan(
        &mut self,
        calls: &mut [Call],
        reread: &HashMap<Vec<u8>, Option<Original>>,
        first_seq: u64,
        next_seq: u64,
    ) -> (Group, Replies) {
        let mut group = Group { next_seq, first_seq, ..Group::default() };
        let mut replies = Vec::with_capacity(calls.len());
        for (c, call) in calls.iter_mut().enumerate() {
            let mark = group.mark(call.kind == Kind::Release);
            let context = CallContext { kind: call.kind, now_ms: call.now_ms, prefetch_epoch: call.prefetch_epoch };
            let planned: Result<Vec<EntryOutcome>, QueueError> = call
                .entries
                .iter_mut()
                .enumerate()
                .map(|(e, entry)| self.plan_entry(&context, (c, e), entry, reread, &mut group))
                .collect();
            let reply = match planned {
                Ok(outcomes) if call.kind == Kind::Release => match whole_call_refusal(&outcomes) {
                    Some(refusal) => {
                        group.rollback(mark);
                        Err(QueueError::Refused(refusal))
                    }
                    None => Ok(outcomes),
                },
                Ok(outcomes) => Ok(outcomes),
                Err(e) => {
                    group.rollback(mark);
                    Err(e)
                }
            };
            if reply.is_ok() {
                group.batch.extend(std::mem::take(&mut call.extra));
            }
            replies.push(reply);
        }
        (group, replies)
    }

    /// Decide one entry, adding its writes to the group.
    fn plan_entry(
        &mut self,
        call: &CallContext,
        at: (usize, usize),
        entry: &mut Prepared,
        reread: &HashMap<Vec<u8>, Option<Original>>,
        group: &mut Group,
    ) -> Result<EntryOutcome, QueueError> {
        match &entry.logged {
            Logged::Duplicate(original) => return Ok(EntryOutcome::Duplicate((**original).clone())),
            Logged::Failed { .. } => return Ok(EntryOutcome::Refused(Refusal::IntakeUnavailable)),
            Logged::Not | Logged::Under(_) | Logged::Resend(_) => {}
        }
        let env = &entry.envelope;
        let max = if call.kind.acked_before() { None } else { self.limits.tenants_max };
        let joins = match self.tenants.check(&env.tenant_id, max, &group.joining) {
            Ok(joins) => joins,
            Err(TenantRefusal::Erasing) => return Ok(EntryOutcome::Refused(Refusal::TenantErasing)),
            Err(TenantRefusal::Limit) => return Ok(EntryOutcome::Refused(Refusal::TenantLimit)),
        };
        let dedupe_key = match (&entry.dedupe, call.kind) {
            (Some(stored), Kind::Enqueue | Kind::Release) => {
                Some(dedupe::entry(&env.tenant_id, &env.source_id, stored))
            }
            _ => None,
        };
        let mut takes_over = false;
        if let Some(key) = &dedupe_key {
            let original = match group.live.get(key) {
                Some(&i) => group.new_keys.get(i).map(|new| new.original.clone()),
                None => match self.ledger.recent.freshness(key, call.prefetch_epoch) {
                    Freshness::Newer(original) => Some(original),
                    Freshness::Prefetch => entry.prefetched.clone(),
                    Freshness::Unknown => reread.get(key).cloned().flatten(),
                },
            };
            match original {
                Some(original) if original.expires_at > call.now_ms => {
                    return Ok(EntryOutcome::Duplicate(original_envelope(self.store, &original, env)?));
                }
                // Expired but not yet swept: the new hook takes the key over
                // in place, so the store holds no more keys than before.
                Some(_) => takes_over = true,
                None if self.over_dedupe_quota(&env.tenant_id, group)? => {
                    return Ok(EntryOutcome::Refused(Refusal::DedupeQuota));
                }
                None => {}
            }
        }

        let seq = match entry.logged {
            // Logged before: its seq, which later seqs must pass (a hook
            // settled from the log may be past what the store knew).
            Logged::Under(seq) | Logged::Resend(seq) => {
                group.next_seq = group.next_seq.max(seq + 1);
                seq
            }
            _ => {
                group.next_seq += 1;
                group.next_seq - 1
            }
        };
        group.hooks += 1;
        if self.logs_hooks && matches!(entry.logged, Logged::Not | Logged::Resend(_)) {
            let msg_id = entry
                .msg_id
                .clone()
                .or_else(|| dedupe_key.as_ref().map(|key| format!("d.{}", crate::digest::sha256_hex(key))));
            let payload = crate::queue::handoff::encode(&entry.encoded, &entry.rows);
            group.to_log.push(HookRecord { msg_id, seq, payload });
            group.logged_from.push(at);
        }
        let env = &entry.envelope;
        let batch = &mut group.batch;
        if self.limits.archive && call.kind.archived() {
            batch.put(Cf::Archive, archive::archived(&env.tenant_id, env.received_at, &env.id), entry.encoded.clone());
        }
        batch.put(Cf::Hooks, hooks::hook(seq), std::mem::take(&mut entry.encoded));
        // Each row is due now, with its owner entry (see `rows`), except
        // a row of a hook acked before that was already given up on.
        let rows = entry.rows.len() as i64;
        let (mut dead, mut held, mut waiting) = (0, 0, 0);
        for (sink, value) in std::mem::take(&mut entry.rows) {
            match given_up(call.kind, seq, sink, &value) {
                Some(row) => {
                    dead += 1;
                    held += i64::from(row.in_line());
                    for (key, value) in row.index_entries() {
                        batch.put(Cf::Index, key, value);
                    }
                }
                None => match entry.lines.iter().find(|place| place.sink == sink) {
                    Some(place) if place.waiting => {
                        waiting += 1;
                        batch.put(Cf::Index, index::line(&place.line, seq), index::WRITTEN_WAITING.to_vec());
                    }
                    place => {
                        batch.put(Cf::Index, index::due(call.now_ms, seq, sink), Vec::new());
                        if let Some(place) = place {
                            batch.put(Cf::Index, index::line(&place.line, seq), Vec::new());
                        }
                    }
                },
            }
            batch.put(Cf::Deliveries, deliveries::row(seq, sink), value);
            batch.put(Cf::Index, index::owner(&env.tenant_id, seq, sink), Vec::new());
        }
        let deltas = match group.counters.get_mut(&env.tenant_id) {
            Some(deltas) => deltas,
            None => group.counters.entry(env.tenant_id.clone()).or_default(),
        };
        deltas.pending += rows - dead;
        deltas.dead += dead;
        deltas.held += held;
        deltas.waiting += waiting;
        deltas.bytes += rows * env.size() as i64;
        let batch = &mut group.batch;
        if let (Some(key), Some(stored)) = (dedupe_key, &entry.dedupe) {
            let expires_at = call.now_ms + self.limits.dedupe_ttl_ms;
            let original = Original { seq, expires_at, id: env.id.clone() };
            batch.put(Cf::Dedupe, key.clone(), original.encode());
            batch.put(Cf::Dedupe, dedupe::expiry(expires_at, &env.tenant_id, &env.source_id, stored), Vec::new());
            let added = !takes_over;
            if added {
                deltas.dedupe_keys += 1;
                group.added_keys += 1;
                *group.keys_by_tenant.entry(env.tenant_id.clone()).or_default() += 1;
            }
            group.live.insert(key.clone(), group.new_keys.len());
            group.new_keys.push(NewKey { key, original, tenant: env.tenant_id.clone(), added });
        }
        if joins {
            group.batch.put(Cf::Meta, meta::holding(&env.tenant_id), Vec::new());
            group.joining.push(env.tenant_id.clone());
        }
        Ok(EntryOutcome::Committed(Envelope { seq, ..std::mem::take(&mut entry.envelope) }))
    }

    fn over_dedupe_quota(&mut self, tenant: &str, group: &Group) -> Result<bool, QueueError> {
        let in_group = group.keys_by_tenant.get(tenant).copied().unwrap_or(0);
        if let Some(max) = self.limits.dedupe_max_entries
            && self.ledger.node_keys + group.added_keys >= max as i64
        {
            return Ok(true);
        }
        match self.limits.dedupe_max_entries_per_tenant {
            Some(max) => Ok(self.tenant_keys(tenant)? + in_group >= max as i64),
            None => Ok(false),
        }
    }

    fn tenant_keys(&mut self, tenant: &str) -> Result<i64, QueueError> {
        if let Some(n) = self.ledger.tenant_keys.get(tenant) {
            return Ok(*n);
        }
        let n = self.store.counter(&counter_key(Some(tenant), "dedupe_keys"))?;
        self.ledger.tenant_keys.insert(tenant.to_string(), n);
        Ok(n)
    }
}

/// A release is refused whole when any entry is refused.
fn whole_call_refusal(outcomes: &[EntryOutcome]) -> Option<Refusal> {
    outcomes.iter().find_map(|o| match o {
        EntryOutcome::Refused(refusal) => Some(refusal.clone()),
        _ => None,
    })
}

/// The envelope a duplicate answers with: the original hook if it is still
/// stored, else what the dedupe entry remembers of it (id and seq).
fn original_envelope(store: &dyn Store, original: &Original, incoming: &Envelope) -> Result<Envelope, QueueError> {
    let stored = match store.get(Cf::Hooks, &hooks::hook(original.seq)) {
        Ok(stored) => stored,
        // Its block is damaged: the dedupe entry still says which hook
        // the retry repeats (the store told the damage already).
        Err(StoreError::Corruption { .. }) => None,
        Err(e) => return Err(e.into()),
    };
    if let Some(bytes) = stored {
        if let Ok(envelope) = Envelope::decode(original.seq, &bytes) {
            return Ok(envelope);
        }
        tracing::warn!(
            seq = original.seq,
            "stored hook does not decode; answering the duplicate from its dedupe entry"
        );
    }
    let remembered =
        Envelope::new(original.id.clone(), incoming.source_id.clone(), incoming.tenant_id.clone(), 0, Vec::new());
    Ok(Envelope { seq: original.seq, ..remembered })
}

/// A row of a hook acked before (imported, settled, redriven) that was
/// already given up on, decoded under its seq for its dead index entries.
/// A hook taken the first time has only due rows, and is not decoded.
fn given_up(kind: Kind, seq: u64, sink: u16, value: &[u8]) -> Option<DeliveryRow> {
    if !kind.acked_before() {
        return None;
    }
    DeliveryRow::decode(seq, sink, value).ok().filter(|row| matches!(row.state, RowState::Dead { .. }))
}

#[cfg(test)]
mod tests;
