//! A hook as a record: the body as its value, a hook field as its key (and
//! so its partition), the time it was received as its timestamp, and the
//! hook's metadata as headers.

use std::cell::Cell;

use ankusa_sdk::Hook;

use crate::client::batch::{Record, partition_for};
use crate::client::{KafkaError, Producer};
use crate::options::{Key, Options};

fn key<'h>(options: &Options, hook: &'h Hook) -> Option<&'h str> {
    match options.key {
        Key::Id => Some(&hook.id),
        Key::IdempotencyKey => Some(&hook.idempotency_key),
        Key::DedupeKey => hook.dedupe_key.as_deref(),
        Key::Source => Some(&hook.source),
        Key::Tenant => Some(&hook.tenant),
        Key::None => None,
    }
}

/// Produce `hook` on `producer`; its offset. Records without a key take
/// the partitions in turn (`turn` counts them).
pub fn exchange(
    options: &Options,
    turn: &Cell<usize>,
    producer: &mut Producer,
    hook: &Hook,
) -> Result<i64, KafkaError> {
    let key = key(options, hook);
    let partition = match key {
        Some(key) => partition_for(key.as_bytes(), producer.partitions()),
        None => {
            let next = turn.get();
            turn.set(next.wrapping_add(1));
            next % producer.partitions().max(1)
        }
    };
    let seq = hook.seq.to_string();
    let received_at = hook.received_at.to_string();
    let mut headers: Vec<(&str, &[u8])> = vec![
        ("ankusa-id", hook.id.as_bytes()),
        ("ankusa-seq", seq.as_bytes()),
        ("ankusa-source", hook.source.as_bytes()),
        ("ankusa-tenant", hook.tenant.as_bytes()),
        ("ankusa-received-at", received_at.as_bytes()),
        ("ankusa-sha256", hook.sha256.as_bytes()),
        ("ankusa-idempotency-key", hook.idempotency_key.as_bytes()),
    ];
    let optional = [
        ("content-type", &hook.content_type),
        ("ankusa-dedupe-key", &hook.dedupe_key),
        ("ankusa-replay-id", &hook.replay_id),
    ];
    headers.extend(optional.iter().filter_map(|(name, value)| value.as_ref().map(|v| (*name, v.as_bytes()))));
    let record = Record {
        key: key.map(str::as_bytes),
        value: &hook.body,
        headers,
        timestamp_ms: i64::try_from(hook.received_at).unwrap_or(i64::MAX),
    };
    producer.send(&options.topic, partition, &record)
}
