//! One hook, one line: a JSON object with its identity, its forwarded
//! headers, and its body as text when it is UTF-8 (`body`), else as base64
//! (`body_base64`), so every byte survives.

use ankusa_sdk::{Failure, Hook};
use base64::Engine;
use serde_json::{Value, json};

use crate::client;
use crate::options::Options;

/// Append `hook`'s line to the sink's file.
pub fn deliver(options: &Options, hook: &Hook) -> Result<(), Failure> {
    let mut line = line(hook);
    line.push(b'\n');
    client::append(&options.file, &line, options.fsync, options.max_bytes)
}

/// Append every hook's line in one append and (with `fsync`) one sync: the
/// lines share their fate, so each hook gets the batch's result.
pub fn deliver_batch(options: &Options, hooks: &[Hook]) -> Vec<Result<(), Failure>> {
    let mut lines = Vec::new();
    for hook in hooks {
        lines.extend_from_slice(&line(hook));
        lines.push(b'\n');
    }
    let appended = client::append(&options.file, &lines, options.fsync, options.max_bytes);
    vec![appended; hooks.len()]
}

fn line(hook: &Hook) -> Vec<u8> {
    let headers: Vec<Value> =
        hook.headers.iter().map(|(name, value)| json!([name, String::from_utf8_lossy(value)])).collect();
    let mut record = json!({
        "id": hook.id,
        "seq": hook.seq,
        "source": hook.source,
        "tenant": hook.tenant,
        "received_at": hook.received_at,
        "content_type": hook.content_type,
        "sha256": hook.sha256,
        "dedupe_key": hook.dedupe_key,
        "idempotency_key": hook.idempotency_key,
        "replay_id": hook.replay_id,
        "headers": headers,
    });
    let (key, body) = match std::str::from_utf8(&hook.body) {
        Ok(text) => ("body", json!(text)),
        Err(_) => ("body_base64", json!(base64::engine::general_purpose::STANDARD.encode(&hook.body))),
    };
    record[key] = body;
    // A map of strings, numbers and nulls always serializes.
    serde_json::to_vec(&record).unwrap_or_default()
}
