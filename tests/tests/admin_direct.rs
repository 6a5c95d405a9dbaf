//! Runtime sources under `wal.mode: none`: checked with `check_durable`
//! when written, kept (without a store) in a file that outlives restarts.

use std::time::Duration;

use ankusa_tests::binary::{RunningNode, eventually, write_config};
use ankusa_tests::receiver::{Receiver, Reply};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_sources_in_direct_mode_need_a_durable_sink_and_persist() {
    let receiver = Receiver::start(Reply::status(200)).await;
    let dir = tempfile::tempdir().expect("dir");
    let config = write_config(
        dir.path(),
        &format!(
            "wal: {{mode: none}}\nsinks:\n  hook: {{component: http, options: {{url: \"{}\"}}, allow: [\"{}\"]}}\n  log: {{component: log}}\nsources:\n  direct-in: {{sinks: [hook]}}\n",
            receiver.url("/in"),
            receiver.origin()
        ),
    );
    let data = dir.path().join("data");
    let node = RunningNode::start(&config, &data, &[]).await;

    let (status, refused) =
        node.admin("POST", "/v1/tenants/acme/sources", Some(json!({"name": "rt", "sinks": ["log"]})), None).await;
    assert_eq!((status, refused["error"].as_str()), (400, Some("invalid_source")), "{refused}");
    assert!(refused["message"].as_str().is_some_and(|m| m.contains("no durable sink")), "{refused}");
    let (status, created) =
        node.admin("POST", "/v1/tenants/acme/sources", Some(json!({"name": "rt", "sinks": ["hook"]})), None).await;
    assert_eq!(status, 201, "{created}");
    let (status, _) = node.post_hook("rt", &[], "{\"direct\":true}").await;
    assert_eq!(status, 201, "confirmed by the durable sink");
    eventually("the direct delivery", Duration::from_secs(5), async || receiver.received().len() == 1).await;
    let (status, body) = node.admin("GET", "/v1/dlq", None, None).await;
    assert_eq!((status, body["error"].as_str()), (409, Some("no_store")));
    node.kill();

    let node = RunningNode::start(&config, &data, &[]).await;
    assert!(node.banner().contains("1 created through the admin API"), "{}", node.banner());
    assert_eq!(node.admin("GET", "/v1/tenants/acme/sources/rt", None, None).await.0, 200);
    assert_eq!(node.admin("DELETE", "/v1/tenants/acme/sources/rt", None, None).await.0, 200);
    node.kill();

    let node = RunningNode::start(&config, &data, &[]).await;
    assert_eq!(node.admin("GET", "/v1/tenants/acme/sources/rt", None, None).await.0, 404, "its deletion persisted");
}
