//! The hook a sink component receives for a stored envelope: what the
//! edge (direct mode) and dispatch both hand to the runtime.

use crate::queue::Envelope;
use crate::runtime::Hook;

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
