//! Builds the outgoing request for one hook and sends it.

use ankusa_sdk::http::{self, Request};
use ankusa_sdk::{Failure, Hook};

use crate::classify::classify;
use crate::options::Options;

/// Headers never forwarded from the hook: hop-by-hop ones, those the
/// transport computes, and those this sink sets itself.
fn is_reserved(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "transfer-encoding"
            | "upgrade"
            | "host"
            | "http2-settings"
            | "te"
            | "trailer"
            | "content-length"
            | "content-type"
    ) || name.starts_with("x-ankusa-")
        || name.starts_with("webhook-")
}

/// The id of the hook skipped, dead, just before this one in its key's
/// line (`on_dead: skip`).
const PREVIOUS_DEAD: &str = "x-ankusa-previous-dead";

pub fn deliver(options: &Options, hook: &Hook, _attempt: u32) -> Result<(), Failure> {
    let mut request = Request::post(options.url.clone())
        .connect_timeout(options.connect_timeout)
        .first_byte_timeout(options.response_timeout)
        .max_response_bytes(options.max_response_bytes);
    if options.forward_headers {
        for (name, value) in hook.headers.iter().filter(|(n, _)| !is_reserved(n)) {
            request = request.header(name.clone(), value.clone());
        }
    }
    for (name, value) in &options.headers {
        request = request.header(name.clone(), value.clone());
    }
    let content_type = hook.content_type.as_deref().unwrap_or("application/octet-stream");
    request = request
        .header("content-type", content_type)
        .header("content-length", hook.body.len().to_string())
        .header("x-ankusa-id", hook.id.clone())
        .header("x-ankusa-source", hook.source.clone())
        .header("x-ankusa-tenant", hook.tenant.clone())
        .header("x-ankusa-idempotency-key", hook.idempotency_key.clone());
    if let Some(replay) = &hook.replay_id {
        request = request.header("x-ankusa-replay-id", replay.clone());
    }
    // The gap marker of an ordered binding, set by the host alone (it
    // never hands a sink a provider's `x-ankusa-*` header).
    if let Some((_, dead)) = hook.headers.iter().find(|(n, _)| n == PREVIOUS_DEAD) {
        request = request.header(PREVIOUS_DEAD, dead.clone());
    }
    if let Some(signer) = &options.signer {
        let now = http::now_unix_secs();
        request = request
            .header("webhook-id", hook.id.clone())
            .header("webhook-timestamp", now.to_string())
            .header("webhook-signature", signer.sign(&hook.id, now, &hook.body));
    }
    let response = request.body(hook.body.clone()).send()?;
    // A success needs nothing but the status; the body is not read (the host
    // drains it, so the connection is reused).
    let outcome = classify(response.status, || response.header("retry-after"), http::now_unix_secs);
    outcome.map_err(|mut failure| {
        // The start of an error answer tells an operator why, in the DLQ.
        if let Ok(body) = response.body() {
            append_snippet(&mut failure.reason, &body.bytes);
        }
        failure
    })
}

const SNIPPET_CHARS: usize = 200;

fn append_snippet(reason: &mut String, body: &[u8]) {
    let text = String::from_utf8_lossy(body);
    let snippet: String = text.split_whitespace().collect::<Vec<_>>().join(" ").chars().take(SNIPPET_CHARS).collect();
    if !snippet.is_empty() {
        reason.push_str(": ");
        reason.push_str(&snippet);
    }
}
