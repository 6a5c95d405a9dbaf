//! What the kill -9 test and its child agree on: a hook's bytes follow
//! from its id, so the parent can check every acked hook byte for byte.

use ankusa::queue::Envelope;

/// The envelope the child enqueues for `id`.
pub fn hook_envelope(id: &str) -> Envelope {
    let mut body = format!("{{\"id\":\"{id}\",\"data\":\"").into_bytes();
    body.extend(id.bytes().cycle().take(900));
    body.extend_from_slice(b"\"}");
    let mut envelope = Envelope::new(id.to_string(), "github".into(), "acme".into(), 1_700_000_000_000, body);
    envelope.headers = vec![("x-github-delivery".into(), id.as_bytes().to_vec())];
    envelope.dedupe_key = Some(id.to_string());
    envelope
}
