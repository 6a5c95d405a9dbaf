//! `ankusa sink test` and `ankusa sink inspect`, run as a user would.

use std::path::PathBuf;
use std::process::Command;

use ankusa_tests::{ankusa_bin, guest_wasm, temp_file};

fn cases(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("cases").join(name)
}

fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(ankusa_bin()).args(args).output().expect("run ankusa");
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

#[test]
fn the_http_cases_pass() {
    let file = cases("http.json");
    let (code, stdout, stderr) = run(&["sink", "test", "http", file.to_str().expect("utf-8 path")]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("12 passed, 0 failed"), "{stdout}");
    assert!(!stdout.contains("FAIL"), "{stdout}");
}

#[test]
fn the_same_cases_pass_against_the_wasm_file() {
    let wasm = guest_wasm("http");
    let file = cases("http.json");
    let (code, stdout, _) = run(&["sink", "test", wasm.to_str().expect("utf-8"), file.to_str().expect("utf-8")]);
    assert_eq!(code, Some(0), "{stdout}");
}

/// Without `--cache-dir`, a compiled component is kept in the user's
/// cache, so the next `sink test` of it loads without compiling.
#[test]
fn compiled_components_are_cached_in_the_users_cache_by_default() {
    let home = tempfile::tempdir().expect("dir");
    let wasm = guest_wasm("http");
    let file = cases("http.json");
    let out = Command::new(ankusa_bin())
        .args(["sink", "test", wasm.to_str().expect("utf-8"), file.to_str().expect("utf-8")])
        .env("XDG_CACHE_HOME", home.path())
        .env_remove("ANKUSA_COMPONENT_CACHE")
        .output()
        .expect("run ankusa");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    let cached: Vec<_> = std::fs::read_dir(home.path().join("ankusa/components"))
        .expect("the cache folder")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "cwasm"))
        .collect();
    assert_eq!(cached.len(), 1, "one compiled component");
}

#[test]
fn a_wrong_expectation_fails_with_a_clear_diff() {
    let wrong = br#"{
      "options": {"url": "https://hooks.example.com/in"},
      "allow": ["https://hooks.example.com"],
      "cases": [
        {"name": "503 is not permanent", "http": [{"status": 503}], "expect": {"class": "permanent"}},
        {"name": "200 is fine", "http": [{"status": 200}], "expect": {"outcome": "ok"}},
        {"name": "wrong header", "http": [{"status": 200}],
         "expect": {"requests": [{"headers": {"x-ankusa-source": "stripe"}}]}}
      ]
    }"#;
    let (_dir, file) = temp_file("wrong.json", wrong);
    let (code, stdout, _) = run(&["sink", "test", "http", file.to_str().expect("utf-8")]);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(stdout.contains("FAIL   503 is not permanent"), "{stdout}");
    assert!(stdout.contains("class: expected permanent, got transient"), "{stdout}");
    assert!(stdout.contains("ok     200 is fine"), "{stdout}");
    assert!(stdout.contains(r#"requests[0].headers.x-ankusa-source: expected "stripe", got "test""#), "{stdout}");
    assert!(stdout.contains("1 passed, 2 failed"), "{stdout}");
}

#[test]
fn a_malformed_cases_file_is_a_clear_error() {
    let (_dir, file) = temp_file("bad.json", br#"{"cases": [{"name": "x", "expect": {"klass": "transient"}}]}"#);
    let (code, _, stderr) = run(&["sink", "test", "http", file.to_str().expect("utf-8")]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("bad.json") && stderr.contains("klass"), "{stderr}");
}

#[test]
fn inspect_shows_world_imports_and_durability() {
    let (code, stdout, stderr) =
        run(&["sink", "inspect", "http", "--options", r#"{"url": "https://a.example.com/x"}"#, "--json"]);
    assert_eq!(code, Some(0), "{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("JSON report");
    assert_eq!(report["durable"], true);
    assert_eq!(report["world"], "ankusa:sink/sink-world@0.1.3");
    let imports = report["imports"].as_array().expect("imports");
    assert!(imports.iter().any(|i| i == "ankusa:sink/http-client@0.1.3"), "one-call HTTP: {imports:?}");
    assert_eq!(report["exports"], serde_json::json!(["ankusa:sink/sink@0.1.3"]));

    let (code, stdout, stderr) = run(&[
        "sink",
        "inspect",
        "postgres",
        "--options",
        r#"{"url": "postgres://u@10.0.0.1/db", "table": "t"}"#,
        "--json",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("JSON report");
    assert_eq!(report["world"], "ankusa:sink/batch-sink-world@0.1.3");
    let mut exports: Vec<&str> =
        report["exports"].as_array().expect("exports").iter().filter_map(|e| e.as_str()).collect();
    exports.sort_unstable();
    assert_eq!(exports, ["ankusa:sink/batch@0.1.3", "ankusa:sink/sink@0.1.3"]);

    let (code, stdout, _) = run(&["sink", "inspect", "log"]);
    assert_eq!(code, Some(0));
    assert!(stdout.contains("durable:   false"), "{stdout}");
}

#[test]
fn sink_wit_writes_the_wit_the_host_loads_and_keeps_an_edited_copy() {
    let repo_wit = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../wit");
    let dir = tempfile::tempdir().expect("dir");
    let out = dir.path().join("wit");
    let target = out.to_str().expect("utf-8");
    let (code, stdout, stderr) = run(&["sink", "wit", target]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(stdout.starts_with("wrote ankusa:sink@0.1."), "{stdout}");
    let mut files = vec![PathBuf::from("sink.wit")];
    for entry in std::fs::read_dir(repo_wit.join("deps")).expect("wit/deps") {
        files.push(PathBuf::from("deps").join(entry.expect("entry").file_name()));
    }
    for file in &files {
        let want = std::fs::read(repo_wit.join(file)).expect("the repository's file");
        let got = std::fs::read(out.join(file)).unwrap_or_else(|e| panic!("{} not written: {e}", file.display()));
        assert!(want == got, "{} differs from the repository's", file.display());
    }

    let (code, stdout, _) = run(&["sink", "wit", target]);
    assert_eq!((code, stdout.contains("already holds")), (Some(0), true), "{stdout}");

    std::fs::write(out.join("sink.wit"), "package mine:own;\n").expect("edit");
    let (code, stdout, stderr) = run(&["sink", "wit", target]);
    assert_ne!(code, Some(0), "{stdout}");
    assert!(stderr.contains("sink.wit exists with other content") && stderr.contains("--force"), "{stderr}");
    assert_eq!(std::fs::read_to_string(out.join("sink.wit")).expect("read"), "package mine:own;\n", "left as it was");
    let (code, _, stderr) = run(&["sink", "wit", target, "--force"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        std::fs::read(out.join("sink.wit")).expect("read") == std::fs::read(repo_wit.join("sink.wit")).expect("read")
    );
}
