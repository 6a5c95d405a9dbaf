//! One hook as one JSON object: its identity, its forwarded headers, and
//! its body as text when it is UTF-8 (`body`), else as base64
//! (`body_base64`), so every byte survives.

use ankusa_sdk::Hook;
use base64::Engine;
use serde_json::{Map, Value, json};

pub fn line(hook: &Hook) -> Vec<u8> {
    let headers: Vec<Value> =
        hook.headers.iter().map(|(name, value)| json!([name, String::from_utf8_lossy(value)])).collect();
    let mut record = Map::new();
    record.insert("id".into(), json!(hook.id));
    record.insert("seq".into(), json!(hook.seq));
    record.insert("source".into(), json!(hook.source));
    record.insert("tenant".into(), json!(hook.tenant));
    record.insert("received_at".into(), json!(hook.received_at));
    record.insert("content_type".into(), json!(hook.content_type));
    record.insert("sha256".into(), json!(hook.sha256));
    record.insert("dedupe_key".into(), json!(hook.dedupe_key));
    record.insert("idempotency_key".into(), json!(hook.idempotency_key));
    record.insert("replay_id".into(), json!(hook.replay_id));
    record.insert("headers".into(), Value::Array(headers));
    match std::str::from_utf8(&hook.body) {
        Ok(text) => record.insert("body".into(), json!(text)),
        Err(_) => {
            record.insert("body_base64".into(), json!(base64::engine::general_purpose::STANDARD.encode(&hook.body)))
        }
    };
    // A map of strings, numbers and nulls always serializes.
    serde_json::to_vec(&Value::Object(record)).unwrap_or_default()
}
