//! Bad components and bad options are refused with errors that name the
//! file, the sink and the field — through the library and the binary.

use std::process::Command;

use ankusa_harness::{Harness, LoadError};
use ankusa_tests::{ankusa_bin, temp_file};
use serde_json::json;

/// A component that exports the sink interface at a future major version.
const NEXT_MAJOR: &str = r#"(component
  (core module $m (func (export "f")))
  (core instance $i (instantiate $m))
  (func $f (canon lift (core func $i "f")))
  (instance $sink (export "durable" (func $f)))
  (export "ankusa:sink/sink@1.0.0" (instance $sink))
)"#;

async fn load_error(origin: &str, bytes: &[u8]) -> String {
    match Harness::shared().bytes(origin, bytes.to_vec()).load().await {
        Ok(_) => panic!("{origin} should have been refused"),
        Err(e) => e.to_string(),
    }
}

#[tokio::test]
async fn a_non_component_file_is_refused() {
    let message = load_error("notes.txt", b"definitely not wasm").await;
    assert!(message.contains("notes.txt") && message.contains("not a WebAssembly component"), "{message}");
}

#[tokio::test]
async fn a_core_module_is_refused_with_a_hint() {
    let message = load_error("core.wasm", b"\0asm\x01\0\0\0").await;
    assert!(message.contains("core.wasm") && message.contains("core WebAssembly module"), "{message}");
}

#[tokio::test]
async fn a_component_of_another_world_is_refused() {
    let message = load_error("empty.wat", b"(component)").await;
    assert!(message.contains("empty.wat") && message.contains("does not export `ankusa:sink/sink@0.1.3`"), "{message}");
}

#[tokio::test]
async fn a_component_for_another_major_version_is_refused() {
    let message = load_error("next.wat", NEXT_MAJOR.as_bytes()).await;
    assert!(message.contains("ankusa:sink@1.0.0") && message.contains("0.1.3"), "{message}");
}

#[tokio::test]
async fn invalid_options_name_the_sink_and_the_field() {
    let cases = [
        (json!({"url": "ftp://example.com"}), "url"),
        (json!({}), "url"),
        (json!({"url": "https://a.example.com", "secret": []}), "secret"),
        (json!({"url": "https://a.example.com", "bogus": 1}), "bogus"),
        (json!({"url": "https://a.example.com", "connect_timeout_ms": "soon"}), "connect_timeout_ms"),
    ];
    for (options, field) in cases {
        let err = Harness::shared()
            .builtin("http")
            .label("stripe", "forward")
            .options(options.clone())
            .load()
            .await
            .err()
            .unwrap_or_else(|| panic!("{options} should be refused"));
        match &err {
            LoadError::Options { field: Some(f), .. } => assert_eq!(f, field, "{options}: {err}"),
            other => panic!("{options}: expected an options error naming `{field}`, got {other}"),
        }
        let message = err.to_string();
        assert!(message.contains("source `stripe`, sink `forward`"), "{message}");
    }
}

fn run(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(ankusa_bin()).args(args).output().expect("run ankusa");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

#[test]
fn the_binary_reports_bad_components_without_panicking() {
    let (_dir, junk) = temp_file("junk.wasm", b"\x00\x01\x02 not a component");
    let (_dir2, other) = temp_file("other.wat", b"(component)");
    for (path, expected) in [(&junk, "not a WebAssembly component"), (&other, "does not export")] {
        let path = path.to_str().expect("utf-8 temp path");
        for command in [vec!["sink", "inspect", path], vec!["sink", "test", path, "/nonexistent/cases.json"]] {
            let (ok, _, stderr) = run(&command);
            assert!(!ok, "{command:?} must fail");
            assert!(stderr.contains(path) && stderr.contains(expected), "{command:?}: {stderr}");
            assert!(!stderr.contains("panicked"), "{command:?}: {stderr}");
        }
    }
}

#[test]
fn the_binary_names_the_field_of_bad_options() {
    let (ok, _, stderr) = run(&["sink", "inspect", "http", "--options", r#"{"url": "mailto:x"}"#]);
    assert!(!ok);
    assert!(stderr.contains("`url`") && stderr.contains("http://"), "{stderr}");
    let (ok, _, stderr) = run(&["sink", "inspect", "http", "--options", "{not json"]);
    assert!(!ok);
    assert!(stderr.contains("--options is not valid JSON"), "{stderr}");
    let (ok, _, stderr) = run(&["sink", "inspect", "nosuchsink"]);
    assert!(!ok);
    assert!(stderr.contains("nosuchsink") && stderr.contains("built-in"), "{stderr}");
}
