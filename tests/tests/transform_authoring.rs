//! The transform authoring kit as an author uses it, through the real
//! binary: `ankusa sink new NAME --kind transform --lang L` → `sink build`
//! → `sink test` (cases that state each verdict and the output) → a node
//! runs the transform in a binding: a hook it drops is `filtered`, the
//! others reach the sink tagged, in every language.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use ankusa_tests::ankusa_bin;
use ankusa_tests::binary::{RunningNode, collect, eventually, request, write_config};
use ankusa_tests::receiver::{Receiver, Reply};

fn scratch() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

/// `ankusa ARGS` in `cwd` with the shared tool caches (as `sink_authoring`
/// has them): (exit code, stdout, stderr).
fn ankusa(cwd: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(ankusa_bin())
        .args(args)
        .current_dir(cwd)
        .env("ANKUSA_TOOLS_DIR", scratch().join("ankusa-tools"))
        .env("CARGO_TARGET_DIR", scratch().join("sink-projects-target"))
        .output()
        .expect("run ankusa");
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

/// `sink new --kind transform`, `sink build`, `sink test` in `lang`.
fn new_build_and_test(root: &Path, lang: &str) -> PathBuf {
    let (code, stdout, stderr) = ankusa(root, &["sink", "new", "tagger", "--kind", "transform", "--lang", lang]);
    assert_eq!(code, Some(0), "sink new --kind transform --lang {lang}: {stdout}\n{stderr}");
    assert!(stdout.contains(&format!("created tagger ({lang} transform")), "{stdout}");
    let project = root.join("tagger");
    let manifest = std::fs::read_to_string(project.join("ankusa-sink.yaml")).expect("manifest");
    assert!(manifest.contains("kind: transform"), "{manifest}");

    let (code, stdout, stderr) = ankusa(&project, &["sink", "build"]);
    assert_eq!(code, Some(0), "sink build ({lang}): {stdout}\n{stderr}");
    let version = ankusa::authoring::wit::version();
    assert!(stdout.contains(&format!("world:     ankusa:sink/transform-world@{version}")), "{stdout}");
    assert!(stdout.contains(&format!("  ankusa:sink/transform@{version}")), "{stdout}");
    assert!(!stdout.contains("http-client") && !stdout.contains("tcp-client"), "{lang}: no network: {stdout}");

    let (code, stdout, stderr) = ankusa(&project, &["sink", "test"]);
    assert_eq!(code, Some(0), "sink test ({lang}): {stdout}\n{stderr}");
    assert!(stdout.contains("4 passed, 0 failed"), "{lang}: {stdout}");
    project
}

/// A case the transform does not meet fails `sink test`, naming what.
fn a_wrong_expectation_fails(project: &Path, lang: &str) {
    let cases = project.join("cases.json");
    let text = std::fs::read_to_string(&cases).expect("cases");
    std::fs::write(&cases, text.replace("\"verdict\": \"drop\"", "\"verdict\": \"deliver\"")).expect("edit");
    let (code, stdout, _) = ankusa(project, &["sink", "test"]);
    assert_eq!(code, Some(1), "{lang}: {stdout}");
    assert!(stdout.contains("verdict: expected deliver, got drop"), "{lang}: {stdout}");
    std::fs::write(&cases, text).expect("restore");
}

/// A node whose `shop` source delivers to `receiver` through the project's
/// transform `tagger` (dropping pings); its folder lives as long as it.
async fn tagger_node(project: &Path, receiver: &Receiver) -> (tempfile::TempDir, RunningNode) {
    let dir = tempfile::tempdir().expect("dir");
    let config = write_config(
        dir.path(),
        &format!(
            "sinks:\n{sink}transforms:\n  tagger:\n    component: \"{wasm}\"\n    options: {{drop_when: ping}}\n\
             sources:\n  shop:\n    sinks: [{{sink: orders, transforms: [tagger]}}]\n",
            sink = receiver.http_sink("orders", "/hooks"),
            wasm = project.join("build/tagger.wasm").display(),
        ),
    );
    let node = RunningNode::start(&config, &dir.path().join("data"), &[]).await;
    (dir, node)
}

/// Through the project's transform in a node: a ping is filtered, an order
/// reaches the sink tagged with its body unchanged.
async fn filters_and_tags_in_a_node(project: &Path) {
    let receiver = Receiver::start(Reply::status(200)).await;
    let (_dir, node) = tagger_node(project, &receiver).await;
    for body in [r#"{"type": "ping"}"#, r#"{"type": "order.paid", "n": 1}"#] {
        let (status, answer) = node.post_hook("shop", &[], body).await;
        assert_eq!(status, 201, "{answer}");
    }
    eventually("the order delivered", Duration::from_secs(20), async || !receiver.received().is_empty()).await;
    eventually("the ping filtered", Duration::from_secs(10), async || {
        let (_, text) = request(node.admin, "GET", "/metrics", &[], None).await;
        String::from_utf8_lossy(&text).contains("ankusa_filtered_total{source=\"shop\",sink=\"orders\"} 1")
    })
    .await;
    let received = receiver.received();
    assert_eq!(received.len(), 1, "only the order: {received:?}");
    assert_eq!(received[0].body.as_ref(), br#"{"type": "order.paid", "n": 1}"#);
    assert_eq!(received[0].header("x-transform"), Some("tagger"), "the http sink forwards the transform's header");
}

async fn the_whole_path(lang: &str) {
    let root = tempfile::tempdir().expect("dir");
    let project = new_build_and_test(root.path(), lang);
    a_wrong_expectation_fails(&project, lang);
    filters_and_tags_in_a_node(&project).await;
}

#[tokio::test]
async fn a_python_transform_new_build_test_run() {
    the_whole_path("python").await;
}

#[tokio::test]
async fn a_c_transform_new_build_test_run() {
    the_whole_path("c").await;
}

#[tokio::test]
async fn a_rust_transform_new_build_test_run() {
    the_whole_path("rust").await;
}

#[tokio::test]
async fn a_js_transform_new_build_test_run() {
    the_whole_path("js").await;
}

/// The Rust transform's own harness test runs it in the host, outside
/// this repository's workspace.
#[test]
fn a_rust_transforms_harness_test_passes() {
    let root = tempfile::tempdir().expect("dir");
    let project = new_build_and_test(root.path(), "rust");
    // The lock this checkout builds with, so the build reuses what the
    // tests' own build compiled.
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    std::fs::copy(checkout.join("Cargo.lock"), project.join("harness/Cargo.lock")).expect("seed the lock");
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| scratch().join("harness-target"), PathBuf::from);
    let out = Command::new("cargo")
        .args(["test", "--manifest-path", "harness/Cargo.toml"])
        .current_dir(&project)
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .expect("cargo runs");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "harness tests: {stdout}\n{stderr}");
    assert!(stdout.contains("a_ping_is_dropped_and_anything_else_tagged ... ok"), "{stdout}");
}

/// `ankusa sink dev` on a transform: each good save is built, its cases
/// run, and the transform swapped into the running node's binding; a save
/// whose cases fail is kept out, the node keeping the last good one.
#[tokio::test]
async fn sink_dev_swaps_a_transform_into_a_running_node() {
    use std::process::Stdio;

    let root = tempfile::tempdir().expect("dir");
    let project = new_build_and_test(root.path(), "c");
    let receiver = Receiver::start(Reply::status(200)).await;
    let (_dir, node) = tagger_node(&project, &receiver).await;
    let admin = format!("http://{}", node.admin);
    let mut dev = Command::new(ankusa_bin())
        .args(["sink", "dev", "--admin-url", &admin, "--sink", "tagger", "--poll-ms", "100"])
        .current_dir(&project)
        .env("ANKUSA_TOOLS_DIR", scratch().join("ankusa-tools"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start sink dev");
    let out = collect(dev.stdout.take().expect("stdout"));
    let shown = || out.lock().expect("output").clone();
    let seen = |text: &str| shown().lines().filter(|l| l.contains(text)).count();
    let reason = async || {
        let (status, tried) =
            node.admin("POST", "/v1/transforms/tagger/try", Some(serde_json::json!({"body": "a ping"})), None).await;
        assert_eq!((status, tried["verdict"].as_str()), (200, Some("drop")), "{tried}");
        tried["reason"].as_str().unwrap_or_default().to_string()
    };
    eventually("the first cycle", Duration::from_secs(60), async || seen(" ✓ ") + seen(" ✗ ") >= 1).await;
    assert_eq!(seen("4 cases pass"), 1, "{}", shown());
    assert_eq!(reason().await, "the body holds ping");

    // An edit its cases pass: the reason changes in the node.
    let source = project.join("transform.c");
    let text = std::fs::read_to_string(&source).expect("transform.c");
    let edited = text.replace("\"the body holds %s\"", "\"dropped, as it holds %s\"");
    assert_ne!(edited, text, "the template has the line this test edits");
    std::fs::write(&source, &edited).expect("save");
    eventually("a reload", Duration::from_secs(60), async || seen("reloaded `tagger`") == 1).await;
    assert_eq!(reason().await, "dropped, as it holds ping", "{}", shown());
    let (status, answer) = node.post_hook("shop", &[], r#"{"type": "order.paid"}"#).await;
    assert_eq!(status, 201, "{answer}");
    eventually("the order delivered", Duration::from_secs(20), async || !receiver.received().is_empty()).await;
    assert_eq!(receiver.received()[0].header("x-transform"), Some("tagger"));

    // An edit that breaks a case: not swapped in.
    std::fs::write(&source, edited.replace("\"x-transform\"", "\"x-other\"")).expect("save");
    eventually("the failing cases", Duration::from_secs(60), async || seen("cases failed") == 1).await;
    assert!(shown().contains("the node keeps its component"), "{}", shown());
    assert_eq!(reason().await, "dropped, as it holds ping", "still the last good transform");
    let _ = dev.kill();
    let _ = dev.wait();
}
