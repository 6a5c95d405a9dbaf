//! `archive` replay jobs through the binary: hooks kept by the archive are
//! redriven over a received_at window, filtered by source or tenant, each
//! once, and a redriven hook is not archived again.

use std::collections::HashSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ankusa_tests::binary::{RunningNode, eventually, write_config};
use ankusa_tests::receiver::{Receiver, Reply};
use serde_json::{Value, json};

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

async fn run_job(node: &RunningNode, body: Value) -> Value {
    let (status, job) = node.admin("POST", "/v1/replays", Some(body.clone()), None).await;
    assert_eq!(status, 201, "{body}: {job}");
    let id = job["id"].as_str().expect("id").to_string();
    let mut done = Value::Null;
    eventually("the archive job to finish", Duration::from_secs(10), async || {
        done = node.admin("GET", &format!("/v1/replays/{id}"), None, None).await.1;
        done["state"] == "done"
    })
    .await;
    done
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archived_hooks_are_redriven_over_a_window_once() {
    let receiver = Receiver::start(Reply::status(200)).await;
    let others = Receiver::start(Reply::status(200)).await;
    let dir = tempfile::tempdir().expect("dir");
    let config = write_config(
        dir.path(),
        &format!(
            "archive: {{enabled: true}}\nsinks:\n  orders: {{component: http, options: {{url: \"{}\"}}, allow: [\"{}\"]}}\n  others: {{component: http, options: {{url: \"{}\"}}, allow: [\"{}\"]}}\nsources:\n  orders: {{tenant: acme, sinks: [orders]}}\n  other: {{tenant: beta, sinks: [others]}}\n",
            receiver.url("/in"),
            receiver.origin(),
            others.url("/in"),
            others.origin()
        ),
    );
    let node = RunningNode::start(&config, &dir.path().join("data"), &[]).await;
    let since = now_ms();
    let mut bodies = HashSet::new();
    for n in 0..5 {
        let body = format!("{{\"order\":{n}}}");
        assert_eq!(node.post_hook("orders", &[], &body).await.0, 201);
        bodies.insert(body);
    }
    for n in 0..3 {
        assert_eq!(node.post_hook("other", &[], &format!("{{\"other\":{n}}}")).await.0, 201);
    }
    eventually("first deliveries", Duration::from_secs(5), async || {
        receiver.received().len() == 5 && others.received().len() == 3
    })
    .await;

    let job = run_job(&node, json!({"id": "by-source", "kind": "archive", "since": since, "source": "orders"})).await;
    assert_eq!(job["moved"], 5, "{job}");
    eventually("the redriven hooks delivered", Duration::from_secs(5), async || receiver.received().len() == 10).await;
    let again: Vec<_> = receiver.received()[5..].to_vec();
    assert!(again.iter().all(|r| r.header("x-ankusa-replay-id") == Some("by-source")));
    let redriven: HashSet<String> = again.iter().map(|r| String::from_utf8_lossy(&r.body).into_owned()).collect();
    assert_eq!(redriven, bodies, "the same bytes, each once");
    assert_eq!(others.received().len(), 3, "another source's hooks stay put");

    let job = run_job(&node, json!({"id": "by-tenant", "kind": "archive", "since": since, "tenants": ["beta"]})).await;
    assert_eq!(job["moved"], 3);
    eventually("beta's hooks redriven", Duration::from_secs(5), async || others.received().len() == 6).await;

    let later = run_job(&node, json!({"id": "later", "kind": "archive", "since": now_ms() + 60_000})).await;
    assert_eq!(later["moved"], 0, "nothing was received in that window");
    let (_, resumed) = node.admin("PATCH", "/v1/replays/by-source", Some(json!({"state": "running"})), None).await;
    assert_eq!((resumed["state"].as_str(), resumed["moved"].as_u64()), (Some("done"), Some(5)));

    // Redriven hooks are not archived again: the whole window is still 8.
    let all = run_job(&node, json!({"id": "all", "kind": "archive", "since": since})).await;
    assert_eq!(all["moved"], 8);
    eventually("everything once more", Duration::from_secs(5), async || {
        receiver.received().len() == 15 && others.received().len() == 9
    })
    .await;
    for (body, code) in [
        (json!({"kind": "archive", "error_class": "fault"}), "invalid_body"),
        (json!({"kind": "archive", "tenants": ["bad tenant"]}), "invalid_body"),
    ] {
        let (status, answer) = node.admin("POST", "/v1/replays", Some(body.clone()), None).await;
        assert_eq!((status, answer["error"].as_str()), (400, Some(code)), "{body}");
    }
}
