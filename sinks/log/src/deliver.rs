//! Formats one delivery as a log line.

use ankusa_sdk::{Hook, log};

use crate::options::Options;

pub fn log_line(options: &Options, hook: &Hook, attempt: u32) {
    let mut line = format!(
        "hook {} seq={} source={} tenant={} bytes={} sha256={} attempt={}",
        hook.id,
        hook.seq,
        hook.source,
        hook.tenant,
        hook.body.len(),
        hook.sha256,
        attempt
    );
    if let Some(content_type) = &hook.content_type {
        line.push_str(&format!(" content_type={content_type}"));
    }
    if let Some(replay) = &hook.replay_id {
        line.push_str(&format!(" replay={replay}"));
    }
    if options.body_preview_bytes > 0 {
        let end = hook.body.len().min(options.body_preview_bytes);
        line.push_str(&format!(" body={}", hook.body[..end].escape_ascii()));
    }
    match options.level.as_str() {
        "trace" => log::trace(&line),
        "debug" => log::debug(&line),
        "warn" => log::warn(&line),
        "error" => log::error(&line),
        _ => log::info(&line),
    }
}
