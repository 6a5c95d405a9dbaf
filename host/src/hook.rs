//! The hook a sink component receives for a stored envelope: what the
//! edge (direct mode) and dispatch both hand to the runtime.

use crate::queue::Envelope;
use crate::runtime::Hook;
use crate::source::ForwardHeaders;

/// The hook a sink receives for `envelope`, with the headers `forward`
/// lets through.
pub fn hook_of(envelope: &Envelope, sink: u16, replay_id: Option<String>, forward: &ForwardHeaders) -> Hook {
    Hook {
        id: envelope.id.clone(),
        idempotency_key: format!("{}:{sink}", envelope.id),
        seq: envelope.seq,
        source: envelope.source_id.clone(),
        tenant: envelope.tenant_id.clone(),
        received_at: envelope.received_at,
        content_type: envelope.content_type.clone(),
        headers: forward.filter(&envelope.headers),
        body: envelope.body.clone(),
        sha256: envelope.sha256.clone(),
        dedupe_key: envelope.dedupe_key.clone(),
        replay_id,
    }
}
