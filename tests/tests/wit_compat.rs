//! Components built against an earlier `ankusa:sink` 0.1 release still load
//! and deliver in this host (`tests/fixtures/wit-0.1.0/`, `wit-0.1.2/`),
//! and `wit/` changes only with a version bump.

use std::path::PathBuf;

use ankusa_harness::{Harness, OutcomeExt, TestHook};
use ankusa_tests::receiver::{Receiver, Reply};
use serde_json::json;

fn fixture(version: &str, name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(format!("wit-{version}"))
        .join(format!("{name}.wasm"))
}

#[tokio::test]
async fn a_0_1_0_component_loads_and_delivers() {
    let sink = Harness::shared().wasm(fixture("0.1.0", "noop")).load().await.expect("a 0.1.0 component loads");
    sink.deliver(TestHook::new(), 1).await.assert_delivered();
    assert!(!sink.batches(), "0.1.0 had no deliver-batch");
}

#[tokio::test]
async fn a_0_1_2_component_loads_and_delivers_in_a_host_with_transforms() {
    let sink = Harness::shared().wasm(fixture("0.1.2", "noop")).load().await.expect("a 0.1.2 component loads");
    sink.deliver(TestHook::new(), 1).await.assert_delivered();
    let bytes = std::fs::read(fixture("0.1.2", "noop")).expect("the fixture");
    let info = Harness::shared().runtime().inspect(&bytes).expect("inspect");
    assert_eq!(info.exports, ["ankusa:sink/sink@0.1.2"], "what the component itself exports");
}

#[tokio::test]
async fn a_0_1_0_http_sink_still_sends_through_wasi_http() {
    let receiver = Receiver::start(Reply::status(200)).await;
    let sink = Harness::shared()
        .wasm(fixture("0.1.0", "http"))
        .options(json!({"url": receiver.url("/in")}))
        .allow([format!("http://127.0.0.1:{}", receiver.addr.port())])
        .real_network()
        .real_clock()
        .load()
        .await
        .expect("the 0.1.0 http sink loads");
    sink.deliver(TestHook::new().body("hello"), 1).await.assert_delivered();
    let received = receiver.received();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].body.as_ref(), b"hello");
}

#[test]
fn the_inspected_world_names_the_version_this_host_speaks() {
    let bytes = std::fs::read(fixture("0.1.0", "noop")).expect("the fixture");
    let info = Harness::shared().runtime().inspect(&bytes).expect("inspect");
    assert_eq!(info.world, format!("ankusa:sink/sink-world@{}", ankusa::runtime::WIT_VERSION));
    assert_eq!(info.exports, ["ankusa:sink/sink@0.1.0"], "what the component itself exports");
}

#[test]
fn wit_changes_only_with_a_version_bump() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let wit = std::fs::read(root.join("wit/sink.wit")).expect("wit/sink.wit");
    let text = String::from_utf8_lossy(&wit);
    let version = text
        .lines()
        .find_map(|line| line.trim().strip_prefix("package ankusa:sink@")?.strip_suffix(';'))
        .expect("a `package ankusa:sink@x.y.z;` line");
    let digest = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&wit));
    let released = std::fs::read_to_string(root.join("tests/fixtures/wit-versions.txt")).expect("the versions");
    let known = released
        .lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| line.split_once(' ').filter(|(v, _)| *v == version).map(|(_, hash)| hash.trim().to_string()));
    match known {
        None => panic!(
            "wit/sink.wit is version {version}, not in tests/fixtures/wit-versions.txt: add `{version} {digest}`"
        ),
        Some(hash) => assert_eq!(
            hash, digest,
            "wit/sink.wit changed but is still {version}: bump the package version and add its line"
        ),
    }
    assert_eq!(version, ankusa::runtime::WIT_VERSION, "the host speaks the version of its wit/");
}
