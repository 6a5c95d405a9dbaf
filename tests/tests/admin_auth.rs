//! The admin API beyond loopback needs its bearer token; without one
//! configured, such a bind is refused. Logs in JSON are JSON. A node runs
//! only the roles it is given.

use std::process::Command;

use ankusa_tests::ankusa_bin;
use ankusa_tests::binary::{RunningNode, request, write_config};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_loopback_admin_requires_the_token() {
    let dir = tempfile::tempdir().expect("dir");
    let config = write_config(
        dir.path(),
        "admin:\n  token: ${ADMIN_TOKEN}\nsinks:\n  log: {component: log}\nsources:\n  demo: {sinks: [log]}\n",
    );
    let token = "t0ken-for-this-test";
    let node = RunningNode::start_on(&config, &dir.path().join("data"), &[("ADMIN_TOKEN", token)], "0.0.0.0:0").await;
    assert!(node.banner().contains("bearer token required"), "{}", node.banner());

    for path in ["/v1/config", "/metrics", "/v1/dlq", "/openapi.json"] {
        let (status, body) = node.admin("GET", path, None, None).await;
        assert_eq!((status, body["error"].as_str()), (401, Some("unauthorized")), "{path} without a token");
        let (status, _) = node.admin("GET", path, None, Some("wrong")).await;
        assert_eq!(status, 401, "{path} with a wrong token");
        let (status, _) = node.admin("GET", path, None, Some(token)).await;
        assert_eq!(status, 200, "{path} with the token");
    }
    let (status, _) =
        request(node.admin, "GET", "/v1/config", &[("authorization".into(), format!("Basic {token}"))], None).await;
    assert_eq!(status, 401, "only a bearer token");
    for path in ["/health", "/ready"] {
        assert_eq!(node.admin("GET", path, None, None).await.0, 200, "{path} is open to probes");
    }
    let (_, config) = node.admin("GET", "/v1/config", None, Some(token)).await;
    assert_eq!(config["admin"]["token"], "<redacted>");
    assert!(!config.to_string().contains(token));
}

#[test]
fn a_non_loopback_admin_without_a_token_is_refused() {
    let dir = tempfile::tempdir().expect("dir");
    let data = dir.path().join("data");
    let out = Command::new(ankusa_bin())
        .args(["run", "--admin", "0.0.0.0:0", "--ingest", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(78));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("admin.token") && stderr.contains("0.0.0.0:0"), "{stderr}");
}

/// Also: SIGTERM stops the node cleanly, its store closed at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_are_one_object_per_line() {
    let dir = tempfile::tempdir().expect("dir");
    let config = write_config(
        dir.path(),
        "log: {format: json, level: info}\nsinks:\n  log: {component: log}\nsources:\n  demo: {sinks: [log]}\n",
    );
    let node = RunningNode::start(&config, &dir.path().join("data"), &[]).await;
    assert_eq!(node.post_hook("demo", &[], "{\"hello\":1}").await.0, 201);
    let stopping = std::time::Instant::now();
    let (status, log) = node.stop();
    assert!(status.success(), "a clean stop");
    assert!(
        stopping.elapsed() < std::time::Duration::from_secs(3),
        "the store closes at once: {:?}",
        stopping.elapsed()
    );
    assert!(!log.contains("still in use"), "nothing holds the store at shutdown:\n{log}");
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!lines.is_empty(), "the delivery was logged");
    for line in lines {
        let event: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(event["level"].is_string() && event["fields"].is_object(), "{line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_the_dispatch_role_stores_but_does_not_deliver() {
    let dir = tempfile::tempdir().expect("dir");
    let data = dir.path().join("data");
    let ingest_only = write_config(
        dir.path(),
        "node: {roles: [ingest, admin]}\nsinks:\n  log: {component: log}\nsources:\n  demo: {sinks: [log], dedupe: {header: idempotency-key}}\n",
    );
    let node = RunningNode::start(&ingest_only, &data, &[]).await;
    assert!(node.banner().contains("roles: ingest, admin"), "{}", node.banner());
    assert_eq!(node.post_hook("demo", &[("idempotency-key", "k1")], "{}").await.0, 201);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let (_, usage) = node.admin("GET", "/v1/tenants/default/usage", None, None).await;
    assert_eq!(usage["pending"], 1, "stored, not delivered: {usage}");
    let (status, body) = node.admin("GET", "/v1/replays", None, None).await;
    assert_eq!((status, body["error"].as_str()), (409, Some("no_dispatch")));
    node.kill();

    // The same store under a node that dispatches: the row is delivered.
    let all_roles = write_config(
        dir.path(),
        "sinks:\n  log: {component: log}\nsources:\n  demo: {sinks: [log], dedupe: {header: idempotency-key}}\n",
    );
    let node = RunningNode::start(&all_roles, &data, &[]).await;
    ankusa_tests::binary::eventually("the stored row delivered", std::time::Duration::from_secs(5), async || {
        node.admin("GET", "/v1/tenants/default/usage", None, None).await.1["pending"] == 0
    })
    .await;
    assert_eq!(node.post_hook("demo", &[("idempotency-key", "k1")], "{}").await.1["duplicate"], true);
}
