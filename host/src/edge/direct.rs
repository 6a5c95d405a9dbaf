//! Direct mode (`wal.mode: none`): no queue. A request is published to
//! every sink of its source at once, under one deadline, and answered
//! `201` only if every sink confirmed; otherwise `503` and the provider
//! retries. Only sources with a durable sink are allowed in this mode
//! (`queue::check_durable`), so a `201` still means "durable somewhere".

use std::time::Duration;

use super::source::Source;
use crate::queue::Envelope;
use crate::runtime::{Hook, Outcome};

/// The default deadline for all sinks together.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(8);

/// The hook a sink receives for `envelope`.
pub fn hook_of(envelope: &Envelope, sink: u16, replay_id: Option<String>) -> Hook {
    Hook {
        id: envelope.id.clone(),
        idempotency_key: format!("{}:{sink}", envelope.id),
        seq: envelope.seq,
        source: envelope.source_id.clone(),
        tenant: envelope.tenant_id.clone(),
        received_at: envelope.received_at,
        content_type: envelope.content_type.clone(),
        headers: envelope.headers.clone(),
        body: envelope.body.clone(),
        sha256: envelope.sha256.clone(),
        dedupe_key: envelope.dedupe_key.clone(),
        replay_id,
    }
}

/// Why a direct publish was not confirmed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unconfirmed {
    /// (sink index, what it answered).
    pub failures: Vec<(u16, String)>,
}

/// Deliver to every sink concurrently, each within what is left of
/// `deadline`; `Ok` only when all delivered.
pub async fn publish(source: &Source, envelope: &Envelope, deadline: Duration) -> Result<(), Unconfirmed> {
    let attempts = source.sinks.iter().map(|binding| async move {
        let hook = hook_of(envelope, binding.index, None);
        (binding.index, binding.sink.deliver_within(&hook, 1, deadline).await)
    });
    let outcomes = futures_util::future::join_all(attempts).await;
    let failures: Vec<(u16, String)> = outcomes
        .into_iter()
        .filter_map(|(index, outcome)| match outcome {
            Outcome::Delivered => None,
            Outcome::Failed(f) => Some((index, format!("{}: {}", f.class.as_str(), f.reason))),
        })
        .collect();
    if failures.is_empty() && !source.sinks.is_empty() { Ok(()) } else { Err(Unconfirmed { failures }) }
}
