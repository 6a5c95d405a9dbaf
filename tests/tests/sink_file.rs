//! The file sink against a real directory: one JSON line per hook, synced,
//! every body byte kept, and no way out of the directory it is given.

use std::path::Path;
use std::sync::Arc;

use ankusa_harness::{ErrorClass, Harness, OutcomeExt, SinkUnderTest, TestHook};
use base64::Engine;
use serde_json::{Value as Json, json};

async fn load(dir: &Path, options: Json) -> SinkUnderTest {
    Harness::shared().builtin("file").options(options).directory(dir).load().await.expect("the file sink loads")
}

fn lines(path: &Path) -> Vec<Json> {
    let text = std::fs::read_to_string(path).expect("the file exists");
    assert!(text.ends_with('\n'), "every line ends");
    text.lines().map(|line| serde_json::from_str(line).expect("each line is one JSON object")).collect()
}

#[tokio::test]
async fn appends_each_hook_as_one_json_line() {
    let dir = tempfile::tempdir().expect("dir");
    let sink = load(dir.path(), json!({})).await;
    assert!(sink.durable(), "each line is synced before it counts as delivered");

    let text = "{\"order\":\"ünïcode\"}\n\"quoted\"";
    let binary = vec![0x00, 0xff, 0xce, b'\n', 0x80];
    let hook = TestHook::new()
        .id("hook-a")
        .seq(7)
        .source("shop")
        .tenant("acme")
        .header("x-event", "created")
        .body(text)
        .dedupe_key(Some("evt_1"))
        .idempotency_key("hook-a:0");
    sink.deliver(hook, 1).await.assert_delivered();
    sink.deliver(TestHook::new().id("hook-b").body(binary.clone()).content_type(None), 1).await.assert_delivered();

    let lines = lines(&dir.path().join("hooks.jsonl"));
    assert_eq!(lines.len(), 2);
    let first = &lines[0];
    assert_eq!(first["id"], "hook-a");
    assert_eq!(first["seq"], 7);
    assert_eq!((&first["source"], &first["tenant"]), (&json!("shop"), &json!("acme")));
    assert_eq!(first["dedupe_key"], "evt_1");
    assert_eq!(first["idempotency_key"], "hook-a:0");
    assert_eq!(first["content_type"], "application/json");
    assert_eq!(first["replay_id"], Json::Null);
    assert_eq!(first["body"], text, "a UTF-8 body as text, line breaks escaped");
    assert!(first["headers"].as_array().expect("headers").contains(&json!(["x-event", "created"])));
    let second = &lines[1];
    assert_eq!(second["id"], "hook-b");
    assert_eq!(second["body"], Json::Null);
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(second["body_base64"].as_str().expect("a binary body in base64"))
        .expect("base64");
    assert_eq!(decoded, binary, "every byte kept");
    assert_eq!(second["content_type"], Json::Null);
}

#[tokio::test]
async fn a_rotated_file_is_followed_by_a_fresh_one() {
    let dir = tempfile::tempdir().expect("dir");
    std::fs::create_dir(dir.path().join("out")).expect("subdirectory");
    let sink = load(dir.path(), json!({"file": "out/events.jsonl"})).await;
    sink.deliver(TestHook::new().id("before"), 1).await.assert_delivered();
    let file = dir.path().join("out/events.jsonl");
    std::fs::rename(&file, dir.path().join("out/events.jsonl.1")).expect("rotate");
    sink.deliver(TestHook::new().id("after"), 1).await.assert_delivered();
    assert_eq!(lines(&file).iter().map(|l| l["id"].clone()).collect::<Vec<_>>(), [json!("after")]);
    assert_eq!(lines(&dir.path().join("out/events.jsonl.1"))[0]["id"], "before");
}

#[tokio::test]
async fn max_bytes_rotates_the_file_before_a_line_would_pass_it() {
    let dir = tempfile::tempdir().expect("dir");
    let sink = load(dir.path(), json!({"max_bytes": 2_000})).await;
    for n in 0..10 {
        let body = format!("{{\"n\":{n},\"pad\":\"{}\"}}", "x".repeat(300));
        sink.deliver(TestHook::new().id(format!("h{n}")).body(body), 1).await.assert_delivered();
    }
    let mut files: Vec<_> = std::fs::read_dir(dir.path()).expect("list").map(|e| e.expect("entry").path()).collect();
    files.sort();
    assert!(files.len() >= 3, "rotated at least twice: {files:?}");
    let mut ids = Vec::new();
    for file in &files {
        let name = file.file_name().and_then(|n| n.to_str()).expect("name");
        assert!(name.starts_with("hooks.jsonl"), "{name}");
        assert!(std::fs::metadata(file).expect("size").len() <= 2_000, "{name} within max_bytes");
        ids.extend(lines(file).iter().map(|l| l["id"].as_str().expect("id").to_string()));
    }
    ids.sort();
    let mut expected: Vec<String> = (0..10).map(|n| format!("h{n}")).collect();
    expected.sort();
    assert_eq!(ids, expected, "every line in exactly one file");
    let err = Harness::shared()
        .builtin("file")
        .options(json!({"max_bytes": 0}))
        .directory(dir.path())
        .load()
        .await
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("`max_bytes`"), "{err}");
}

#[tokio::test]
async fn concurrent_deliveries_never_mix_lines() {
    let dir = tempfile::tempdir().expect("dir");
    let sink = Harness::shared()
        .builtin("file")
        .directory(dir.path())
        .concurrency(8)
        .load()
        .await
        .expect("the file sink loads");
    let sink = Arc::new(sink);
    let mut tasks = Vec::new();
    for task in 0..8 {
        let sink = sink.clone();
        tasks.push(tokio::spawn(async move {
            for n in 0..25 {
                let body = format!("{{\"task\":{task},\"n\":{n},\"pad\":\"{}\"}}", "x".repeat(20_000));
                sink.deliver(TestHook::new().id(format!("{task}-{n}")).body(body), 1).await.assert_delivered();
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    let lines = lines(&dir.path().join("hooks.jsonl"));
    assert_eq!(lines.len(), 200, "each delivery one whole line");
    let mut ids: Vec<String> = lines.iter().map(|l| l["id"].as_str().expect("id").to_string()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 200);
}

#[tokio::test]
async fn without_fsync_the_sink_is_not_durable() {
    let dir = tempfile::tempdir().expect("dir");
    let sink = load(dir.path(), json!({"fsync": false})).await;
    assert!(!sink.durable());
    sink.deliver(TestHook::new(), 1).await.assert_delivered();
    assert_eq!(lines(&dir.path().join("hooks.jsonl")).len(), 1);
}

#[tokio::test]
async fn a_symlink_out_of_the_directory_is_refused_and_nothing_outside_is_written() {
    let dir = tempfile::tempdir().expect("dir");
    let outside = tempfile::tempdir().expect("another dir");
    let target = outside.path().join("secret.txt");
    std::fs::write(&target, "untouched").expect("write");
    std::os::unix::fs::symlink(&target, dir.path().join("escape.jsonl")).expect("symlink");
    let sink = load(dir.path(), json!({"file": "escape.jsonl"})).await;
    let outcome = sink.deliver(TestHook::new(), 1).await;
    let failure = outcome.assert_failed(ErrorClass::Permanent);
    assert!(failure.reason.contains("escape.jsonl") && failure.reason.contains("symbolic link"), "{}", failure.reason);
    assert_eq!(std::fs::read_to_string(&target).expect("read"), "untouched");
}

#[tokio::test]
async fn a_path_that_is_a_directory_is_permanent() {
    let dir = tempfile::tempdir().expect("dir");
    std::fs::create_dir(dir.path().join("hooks.jsonl")).expect("a directory in the way");
    let sink = load(dir.path(), json!({})).await;
    let outcome = sink.deliver(TestHook::new(), 1).await;
    let failure = outcome.assert_failed(ErrorClass::Permanent);
    assert!(failure.reason.contains("hooks.jsonl"), "{}", failure.reason);
}

#[tokio::test]
async fn a_sink_without_a_directory_has_no_filesystem() {
    let sink = Harness::shared().builtin("file").load().await.expect("loads");
    let outcome = sink.deliver(TestHook::new(), 1).await;
    let failure = outcome.assert_failed(ErrorClass::Permanent);
    assert!(failure.reason.contains("no directory"), "{}", failure.reason);
}

#[tokio::test]
async fn a_missing_directory_or_bad_options_refuse_the_load() {
    let dir = tempfile::tempdir().expect("dir");
    let missing = dir.path().join("not-there");
    let err = Harness::shared().builtin("file").directory(&missing).load().await.err().expect("refused").to_string();
    assert!(err.contains("not-there"), "{err}");
    let file = dir.path().join("plain-file");
    std::fs::write(&file, "").expect("write");
    let err = Harness::shared().builtin("file").directory(&file).load().await.err().expect("refused").to_string();
    assert!(err.contains("not a directory"), "{err}");
    for path in ["../escape.jsonl", "/etc/hooks.jsonl", "a//b", "./x", ""] {
        let refused =
            Harness::shared().builtin("file").options(json!({"file": path})).directory(dir.path()).load().await;
        let err = refused.err().expect("refused").to_string();
        assert!(err.contains("`file`"), "{path:?}: {err}");
    }
}
