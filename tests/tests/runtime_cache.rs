//! Components compile once: the `.cwasm` cache on disk serves later
//! runtimes, and a damaged cache entry is recompiled, never trusted.

use ankusa_harness::{Harness, OutcomeExt, TestHook};
use ankusa_tests::guest_wasm;

fn cached_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map(|entries| entries.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "cwasm"));
    files
}

#[tokio::test]
async fn a_compiled_component_is_cached_and_reused() {
    let cache = tempfile::tempdir().expect("temp dir");
    let first = Harness::with_cache_dir(cache.path()).expect("runtime");
    first
        .wasm(guest_wasm("http"))
        .options(serde_json::json!({"url": "https://a.example.com/"}))
        .load()
        .await
        .expect("loads");
    let files = cached_files(cache.path());
    assert_eq!(files.len(), 1, "one artifact per component: {files:?}");
    let sha = ankusa_tests::sha256_file(&guest_wasm("http"));
    assert!(files[0].file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&sha)), "keyed by sha256");

    let written = std::fs::metadata(&files[0]).and_then(|m| m.modified()).expect("artifact mtime");

    // A compile would replace the artifact (temporary file + rename); a
    // cache hit leaves it exactly as it was.
    let second = Harness::with_cache_dir(cache.path()).expect("runtime");
    let sink = second
        .wasm(guest_wasm("http"))
        .options(serde_json::json!({"url": "https://a.example.com/"}))
        .load()
        .await
        .expect("loads");
    assert!(sink.durable());
    let after = std::fs::metadata(&files[0]).and_then(|m| m.modified()).expect("artifact mtime");
    assert_eq!(written, after, "the second runtime loaded the artifact instead of compiling again");
    assert_eq!(cached_files(cache.path()).len(), 1);
}

#[tokio::test]
async fn a_damaged_cache_entry_is_recompiled() {
    let cache = tempfile::tempdir().expect("temp dir");
    Harness::with_cache_dir(cache.path()).expect("runtime").wasm(guest_wasm("log")).load().await.expect("loads");
    let files = cached_files(cache.path());
    assert_eq!(files.len(), 1);
    std::fs::write(&files[0], b"not a compiled component").expect("damage the entry");

    let sink = Harness::with_cache_dir(cache.path())
        .expect("runtime")
        .wasm(guest_wasm("log"))
        .load()
        .await
        .expect("recompiles");
    sink.deliver(TestHook::new(), 1).await.assert_delivered();
    let repaired = std::fs::read(&files[0]).expect("entry rewritten");
    assert_ne!(repaired, b"not a compiled component", "the entry was replaced by a fresh compile");
}
