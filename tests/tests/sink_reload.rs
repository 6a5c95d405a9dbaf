//! Hot reload under load: a sink's component file is replaced while hooks
//! stream in; after `POST /v1/sinks/reload` the new component delivers,
//! and no hook is lost or fails because of the swap.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ankusa_tests::binary::{RunningNode, eventually, write_config};
use ankusa_tests::guest_wasm;
use ankusa_tests::receiver::{Receiver, Reply};

const HOOKS: usize = 400;
const CLIENTS: usize = 8;

/// `component` with a custom section appended: the same behaviour under a
/// different sha256, as a rebuilt sink would have.
fn rebuilt(component: &[u8]) -> Vec<u8> {
    with_custom_section(component, b"version 2")
}

fn with_custom_section(component: &[u8], payload: &[u8]) -> Vec<u8> {
    let name = b"ankusa-reload-test";
    let mut section = vec![name.len() as u8];
    section.extend_from_slice(name);
    section.extend_from_slice(payload);
    let mut out = component.to_vec();
    out.push(0); // custom section id
    let mut size = section.len();
    loop {
        let byte = (size & 0x7f) as u8;
        size >>= 7;
        out.push(if size == 0 { byte } else { byte | 0x80 });
        if size == 0 {
            break;
        }
    }
    out.extend_from_slice(&section);
    out
}

/// A folder with `ankusa.yml`: source `load` delivering to sink `forward`,
/// the http sink copied to `forward.wasm` and posting to `receiver`.
/// (the folder, the component's path, its bytes)
fn forward_to(receiver: &Receiver) -> (tempfile::TempDir, std::path::PathBuf, Vec<u8>) {
    let dir = tempfile::tempdir().expect("dir");
    let component = dir.path().join("forward.wasm");
    let original = std::fs::read(guest_wasm("http")).expect("the http sink");
    std::fs::write(&component, &original).expect("copy");
    write_config(
        dir.path(),
        &format!(
            "sinks:\n  forward:\n    component: {}\n    options: {{url: \"{}\"}}\n    allow: [\"{}\"]\nsources:\n  load: {{sinks: [forward]}}\n",
            component.display(),
            receiver.url("/in"),
            receiver.origin()
        ),
    );
    (dir, component, original)
}

/// Compiled components the node keeps in `data`.
fn compiled_in(data: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(data.join("components"))
        .map(|entries| entries.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    names.retain(|n| n.ends_with(".cwasm"));
    names.sort();
    names
}

/// An hour of `sink dev` is many uploads: the node keeps the configured
/// component, the running upload and the one before it, not every build.
#[tokio::test]
async fn uploads_keep_the_running_and_the_previous_component_only() {
    let receiver = Receiver::start(Reply::status(200)).await;
    let (dir, _, original) = forward_to(&receiver);
    let data = dir.path().join("data");
    let node = RunningNode::start(&dir.path().join("ankusa.yml"), &data, &[]).await;
    let builds: Vec<Vec<u8>> =
        (0..5).map(|n| with_custom_section(&original, format!("build {n}").as_bytes())).collect();
    for build in &builds {
        let (status, answer) = node.upload_component("forward", build.clone()).await;
        assert_eq!(status, 200, "{answer}");
    }
    let kept = compiled_in(&data);
    let named = |bytes: &[u8]| kept.iter().any(|n| n.starts_with(&sha256(bytes)));
    assert!(named(&original), "the configured component stays: {kept:?}");
    assert!(named(&builds[4]) && named(&builds[3]), "the running upload and the previous one: {kept:?}");
    assert_eq!(kept.len(), 3, "older uploads are forgotten: {kept:?}");
    node.post_hook("load", &[], "{}").await;
    eventually("the running upload delivers", Duration::from_secs(10), async || !receiver.received().is_empty()).await;
}

fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// What `ankusa sink dev` does: a component uploaded for a configured sink
/// replaces it (one larger than axum's 2 MiB default too), a component that
/// does not load or an unknown sink is refused and changes nothing, and a
/// reload from the config's file brings the file's component back.
#[tokio::test]
async fn an_uploaded_component_replaces_the_sink_until_it_is_reloaded_from_its_file() {
    let receiver = Receiver::start(Reply::status(200)).await;
    let (dir, _, original) = forward_to(&receiver);
    let node = RunningNode::start(&dir.path().join("ankusa.yml"), &dir.path().join("data"), &[]).await;
    let loaded = async || node.admin("GET", "/v1/sinks", None, None).await.1[0]["sha256"].as_str().map(String::from);
    assert_eq!(loaded().await, Some(sha256(&original)));

    let (status, answer) = node.upload_component("nope", original.clone()).await;
    assert_eq!((status, answer["error"].as_str()), (404, Some("not_found")), "{answer}");
    let (status, answer) = node.upload_component("forward", b"not a component".to_vec()).await;
    assert_eq!((status, answer["error"].as_str()), (422, Some("component_refused")), "{answer}");
    assert_eq!(loaded().await, Some(sha256(&original)), "a refused upload changes nothing");

    let big = with_custom_section(&original, &vec![b'x'; 3 << 20]);
    let (status, answer) = node.upload_component("forward", big.clone()).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["swapped"][0]["to"].as_str(), Some(sha256(&big).as_str()), "{answer}");
    assert_eq!(loaded().await, Some(sha256(&big)));
    let (status, _) = node.post_hook("load", &[], "{\"n\": 1}").await;
    assert_eq!(status, 201);
    eventually("the uploaded component delivers", Duration::from_secs(10), async || !receiver.received().is_empty())
        .await;
    let (status, answer) = node.upload_component("forward", big.clone()).await;
    assert_eq!((status, answer["unchanged"].as_u64()), (200, Some(1)), "the same upload again: {answer}");

    let (_, report) = node.admin("POST", "/v1/sinks/reload", None, None).await;
    assert_eq!(report["swapped"].as_array().map(Vec::len), Some(1), "{report}");
    assert_eq!(loaded().await, Some(sha256(&original)), "the file's component is back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replacing_a_component_under_load_loses_nothing() {
    let receiver = Receiver::start(Reply::status(200).delay(Duration::from_millis(2))).await;
    let (dir, component, original) = forward_to(&receiver);
    let node = Arc::new(RunningNode::start(&dir.path().join("ankusa.yml"), &dir.path().join("data"), &[]).await);
    let (_, sinks) = node.admin("GET", "/v1/sinks", None, None).await;
    let old_sha = sinks[0]["sha256"].as_str().expect("sha").to_string();

    let sent = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    for client in 0..CLIENTS {
        let (node, sent) = (node.clone(), sent.clone());
        clients.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for n in 0..HOOKS / CLIENTS {
                let (status, body) = node.post_hook("load", &[], &format!("{{\"c\":{client},\"n\":{n}}}")).await;
                assert_eq!(status, 201, "{body}");
                ids.push(body["id"].as_str().expect("id").to_string());
                sent.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            ids
        }));
    }

    eventually("a quarter of the hooks in", Duration::from_secs(30), async || {
        sent.load(Ordering::Relaxed) >= HOOKS / 4
    })
    .await;
    let staged = dir.path().join("forward.wasm.new");
    std::fs::write(&staged, rebuilt(&original)).expect("write the new component");
    std::fs::rename(&staged, &component).expect("swap the file");
    let (status, report) = node.admin("POST", "/v1/sinks/reload", None, None).await;
    assert_eq!(status, 200, "{report}");
    let swapped = report["swapped"].as_array().expect("swapped");
    assert_eq!(swapped.len(), 1, "{report}");
    assert_eq!(swapped[0]["from"], old_sha.as_str());
    let new_sha = swapped[0]["to"].as_str().expect("new sha").to_string();
    assert_ne!(new_sha, old_sha);
    let in_flight_at_swap = sent.load(Ordering::Relaxed);
    assert!(in_flight_at_swap < HOOKS, "the swap happened under load ({in_flight_at_swap} of {HOOKS} sent)");

    let mut acked = HashSet::new();
    for client in clients {
        acked.extend(client.await.expect("client"));
    }
    assert_eq!(acked.len(), HOOKS);
    eventually("every hook delivered", Duration::from_secs(30), async || {
        let delivered: HashSet<String> =
            receiver.received().iter().filter_map(|r| r.header("x-ankusa-id").map(str::to_string)).collect();
        acked.is_subset(&delivered)
    })
    .await;
    // The receiver hears a hook before the node settles its row: every
    // row settled is when the counts below are final.
    eventually("every row settled", Duration::from_secs(10), async || {
        let (_, usage) = node.admin("GET", "/v1/tenants/default/usage", None, None).await;
        usage["pending"].as_i64() == Some(0) && usage["inflight"].as_i64() == Some(0)
    })
    .await;
    let (_, usage) = node.admin("GET", "/v1/tenants/default/usage", None, None).await;
    assert_eq!(usage["dead"].as_i64(), Some(0), "{usage}");
    let (_, metrics) = node.admin("GET", "/metrics", None, None).await;
    let metrics = metrics.as_str().expect("text").to_string();
    let attempts: Vec<&str> = metrics.lines().filter(|l| l.starts_with("ankusa_deliveries_total{")).collect();
    assert_eq!(
        attempts,
        [format!("ankusa_deliveries_total{{source=\"load\",sink=\"forward\",class=\"ok\"}} {HOOKS}")],
        "one attempt a hook, none failed"
    );
    let (_, sinks) = node.admin("GET", "/v1/sinks", None, None).await;
    assert_eq!(sinks[0]["sha256"], new_sha.as_str(), "the new component is the one loaded");

    // SIGHUP does the same as the API.
    let mut third = rebuilt(&original);
    third.extend_from_slice(&rebuilt(&[])[..]);
    std::fs::write(&staged, &third).expect("write a third version");
    std::fs::rename(&staged, &component).expect("swap the file");
    let hup = std::process::Command::new("kill").args(["-HUP", &node.pid().to_string()]).status().expect("kill -HUP");
    assert!(hup.success());
    eventually("SIGHUP to swap the component", Duration::from_secs(10), async || {
        let (_, sinks) = node.admin("GET", "/v1/sinks", None, None).await;
        sinks[0]["sha256"].as_str().is_some_and(|sha| sha != new_sha && sha != old_sha)
    })
    .await;
    let (status, _) = node.post_hook("load", &[], "{\"after\":\"sighup\"}").await;
    assert_eq!(status, 201);
    eventually("delivery by the third version", Duration::from_secs(5), async || receiver.received().len() > HOOKS)
        .await;
}
