//! The admin API beyond loopback needs its bearer token; without one
//! configured, such a bind is refused. Without a token, only requests
//! under a loopback name or an allowed host are answered (DNS rebinding),
//! and with or without one, a request from another origin changes
//! nothing. Logs in JSON are JSON. A node runs only the roles it is given.

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

/// A page whose name was rebound to 127.0.0.1 sends its own name in
/// `Host` (and its origin in `Origin`): a tokenless API refuses it before
/// it reads a hook or erases a tenant; loopback names and the allowed
/// hosts are answered; each refusal is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tokenless_admin_answers_only_loopback_names_and_its_own_origin() {
    let dir = tempfile::tempdir().expect("dir");
    let config = write_config(
        dir.path(),
        "node: {roles: [ingest, admin]}\nadmin: {allowed_hosts: [ankusa.internal]}\n\
         sinks:\n  log: {component: log}\nsources:\n  demo: {sinks: [log]}\n",
    );
    let node = RunningNode::start(&config, &dir.path().join("data"), &[]).await;
    let (status, _) = node.post_hook("demo", &[], r#"{"secret":"kept"}"#).await;
    assert_eq!(status, 201);
    let port = node.admin.port();
    let with = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<Vec<_>>();
    let evil_host = format!("evil.example:{port}");
    for (method, path) in
        [("GET", "/v1/hooks/1"), ("GET", "/v1/config"), ("DELETE", "/v1/tenants/default"), ("GET", "/console/")]
    {
        let (status, body) = request(node.admin, method, path, &with(&[("host", &evil_host)]), None).await;
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        assert_eq!((status, body["error"].as_str()), (403, Some("host_not_allowed")), "{method} {path}: {body}");
    }
    let foreign = [("host", format!("127.0.0.1:{port}")), ("origin", "http://evil.example".to_string())];
    let foreign: Vec<(String, String)> = foreign.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
    let (status, body) = request(node.admin, "DELETE", "/v1/tenants/default", &foreign, None).await;
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    assert_eq!((status, body["error"].as_str()), (403, Some("origin_not_allowed")), "{body}");
    let cross = with(&[("sec-fetch-site", "cross-site")]);
    let (status, _) = request(node.admin, "DELETE", "/v1/tenants/default", &cross, None).await;
    assert_eq!(status, 403, "a browser-marked cross-site request");
    // Nothing was erased, and the hook still reads.
    let (status, hook) = node.admin("GET", "/v1/hooks/1", None, None).await;
    assert_eq!(status, 200, "{hook}");
    assert!(hook.to_string().contains("kept"), "{hook}");

    for host in [format!("localhost:{port}"), format!("[::1]:{port}"), format!("ankusa.internal:{port}")] {
        let (status, _) = request(node.admin, "GET", "/v1/config", &with(&[("host", &host)]), None).await;
        assert_eq!(status, 200, "{host}");
    }
    let own = with(&[("origin", &format!("http://127.0.0.1:{port}")), ("sec-fetch-site", "same-origin")]);
    let (status, _) = request(node.admin, "POST", "/v1/sinks/reload", &own, Some("{}".into())).await;
    assert_eq!(status, 200, "the console's own origin");

    let (_, metrics) = node.admin("GET", "/metrics", None, None).await;
    let metrics = metrics.as_str().unwrap_or_default().to_string();
    for (reason, at_least) in [("host_not_allowed", 4.0), ("origin_not_allowed", 1.0), ("cross_site_request", 1.0)] {
        let counted = metrics
            .lines()
            .find_map(|l| l.strip_prefix(&format!("ankusa_admin_refused_total{{reason=\"{reason}\"}} ")))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0);
        assert!(counted >= at_least, "{reason}: {counted}\n{metrics}");
    }
}

/// With a token, a page of another origin cannot ride the console's
/// session: a request carrying the token from a foreign `Origin` is
/// refused. A short token is refused by the config check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_does_not_let_another_origin_change_anything() {
    let dir = tempfile::tempdir().expect("dir");
    let config = write_config(
        dir.path(),
        "admin:\n  token: ${ADMIN_TOKEN}\nsinks:\n  log: {component: log}\nsources:\n  demo: {sinks: [log]}\n",
    );
    let token = "t0ken-for-this-test";
    let node = RunningNode::start(&config, &dir.path().join("data"), &[("ADMIN_TOKEN", token)]).await;
    let headers = |origin: &str| {
        vec![("authorization".to_string(), format!("Bearer {token}")), ("origin".to_string(), origin.to_string())]
    };
    let (status, _) = request(node.admin, "DELETE", "/v1/tenants/default", &headers("http://evil.example"), None).await;
    assert_eq!(status, 403);
    let (status, _) =
        request(node.admin, "GET", "/v1/tenants", &headers(&format!("http://{}", node.admin)), None).await;
    assert_eq!(status, 200, "the API's own origin");
    // Any name is answered with the token (nothing to rebind to).
    let host =
        vec![("authorization".to_string(), format!("Bearer {token}")), ("host".to_string(), "ankusa.example".into())];
    assert_eq!(request(node.admin, "GET", "/v1/tenants", &host, None).await.0, 200);
    drop(node);

    // A guessable token and a secret of a megabyte (a file pasted whole)
    // are refused, each by its key.
    let secret = "s".repeat(1 << 20);
    let short = write_config(
        dir.path(),
        &format!(
            "admin: {{token: abc}}\nsinks:\n  log: {{component: log}}\n\
             sources:\n  demo: {{sinks: [log], verify: {{preset: github, secret: {secret}}}}}\n"
        ),
    );
    let out = Command::new(ankusa_bin()).args(["check-config", "--config"]).arg(&short).output().expect("check-config");
    let said = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("admin.token") && said.contains("at least 16"), "{said}");
    assert!(
        said.contains("sources.demo.verify.secret") && said.contains("at most 1024"),
        "{}",
        &said[..said.len().min(2000)]
    );
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
