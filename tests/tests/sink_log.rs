//! The log sink: one labelled line per delivery, never durable.

use ankusa_harness::{Harness, LogLevel, OutcomeExt, TestHook};
use serde_json::json;

#[tokio::test]
async fn logs_one_line_per_delivery() {
    let sink = Harness::shared()
        .builtin("log")
        .options(json!({"level": "warn", "body_preview_bytes": 8}))
        .load()
        .await
        .expect("loads");
    assert!(!sink.durable());
    sink.deliver(TestHook::new().id("hook-1").body("0123456789"), 3).await.assert_delivered();
    let logs = sink.logs();
    assert_eq!(logs.len(), 1);
    assert_eq!(logs[0].level, LogLevel::Warn);
    let line = &logs[0].message;
    assert!(line.contains("hook hook-1") && line.contains("attempt=3") && line.contains("body=01234567"), "{line}");
    assert!(line.ends_with("body=01234567"), "the preview is cut at 8 bytes: {line}");
    assert!(sink.requests().is_empty());
}

#[tokio::test]
async fn rejects_an_unknown_level() {
    let err = Harness::shared().builtin("log").options(json!({"level": "loud"})).load().await.err().expect("refused");
    assert!(err.to_string().contains("`level`"), "{err}");
}
