//! Erasing a tenant with pending, inflight, dead and quarantined data,
//! through the real binary: its new hooks are refused while it runs, a
//! kill -9 in the middle resumes at the next start, and afterwards nothing
//! of it remains while the other tenant is untouched.

use std::time::Duration;

use ankusa_tests::binary::{RunningNode, eventually, write_config};
use ankusa_tests::receiver::{Receiver, Reply};
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

const SECRET: &str = "erase-test-secret";

fn github_signature(body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).expect("key");
    mac.update(body.as_bytes());
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

async fn usage(node: &RunningNode, tenant: &str) -> Value {
    node.admin("GET", &format!("/v1/tenants/{tenant}/usage"), None, None).await.1
}

async fn erase_phase(node: &RunningNode, tenant: &str) -> String {
    node.admin("GET", &format!("/v1/tenants/{tenant}"), None, None).await.1["phase"].as_str().unwrap_or("").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erase_removes_everything_of_a_tenant_and_survives_a_kill() {
    // Deliveries to `hang` never finish while the node lives.
    let hang = Receiver::start(Reply::status(200).delay(Duration::from_secs(120))).await;
    let refuse = Receiver::start(Reply::status(410)).await;
    let dir = tempfile::tempdir().expect("dir");
    let config = write_config(
        dir.path(),
        &format!(
            r#"
dispatch:
  attempt_timeout_ms: 8000
archive: {{enabled: true}}
sinks:
  hang: {{component: http, options: {{url: "{hang_url}"}}, allow: ["{hang_origin}"]}}
  refuse: {{component: http, options: {{url: "{refuse_url}"}}, allow: ["{refuse_origin}"]}}
  log: {{component: log}}
sources:
  kept:
    tenant: kept
    sinks: [log]
    dedupe: {{header: idempotency-key}}
"#,
            hang_url = hang.url("/in"),
            hang_origin = hang.origin(),
            refuse_url = refuse.url("/in"),
            refuse_origin = refuse.origin(),
        ),
    );
    let data = dir.path().join("data");
    let node = RunningNode::start(&config, &data, &[]).await;

    // The doomed tenant's sources, minted through the API.
    for (name, body) in [
        ("doomed-hang", json!({"name": "doomed-hang", "sinks": ["hang"]})),
        ("doomed-dead", json!({"name": "doomed-dead", "sinks": ["refuse"]})),
        (
            "doomed-signed",
            json!({"name": "doomed-signed", "sinks": ["log"], "on_verify_failure": "quarantine",
                   "verify": {"preset": "github", "secret": SECRET}, "dedupe": {"header": "idempotency-key"}}),
        ),
    ] {
        let (status, answer) = node.admin("POST", "/v1/tenants/doomed/sources", Some(body), None).await;
        assert_eq!(status, 201, "{name}: {answer}");
    }
    for n in 0..20 {
        assert_eq!(node.post_hook("doomed-hang", &[], &format!("{{\"n\":{n}}}")).await.0, 201);
    }
    for n in 0..3 {
        assert_eq!(node.post_hook("doomed-dead", &[], &format!("{{\"dead\":{n}}}")).await.0, 201);
    }
    assert_eq!(node.post_hook("doomed-signed", &[("x-hub-signature-256", "sha256=00")], "{}").await.0, 202);
    for n in 0..2 {
        let body = format!("{{\"signed\":{n}}}");
        let key = format!("doomed-key-{n}");
        let headers = [("x-hub-signature-256", github_signature(&body)), ("idempotency-key", key)];
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        assert_eq!(node.post_hook("doomed-signed", &headers, &body).await.0, 201);
    }
    for n in 0..5 {
        let key = format!("kept-{n}");
        assert_eq!(node.post_hook("kept", &[("idempotency-key", &key)], "{}").await.0, 201);
    }
    eventually("doomed's rows in every state", Duration::from_secs(15), async || {
        let u = usage(&node, "doomed").await;
        u["dead"] == 3 && u["inflight"].as_i64().is_some_and(|n| n > 0) && u["dedupe_keys"] == 2
    })
    .await;
    let kept_before = usage(&node, "kept").await;
    assert_eq!(kept_before["dedupe_keys"], 5);

    let (status, erase) = node.admin("DELETE", "/v1/tenants/doomed", None, None).await;
    assert_eq!(status, 202, "{erase}");
    let (status, refused) = node.post_hook("doomed-dead", &[], "{\"late\":true}").await;
    assert_eq!((status, refused["error"].as_str()), (409, Some("tenant_erasing")));
    assert_eq!(node.post_hook("kept", &[("idempotency-key", "kept-late")], "{}").await.0, 201, "others go on");
    let new_source =
        node.admin("POST", "/v1/tenants/doomed/sources", Some(json!({"name": "x", "sinks": ["log"]})), None).await;
    assert_eq!((new_source.0, new_source.1["error"].as_str()), (409, Some("tenant_erasing")));

    // Its inflight rows wait for their deliveries, which hang: the erase
    // is mid-way when the node is killed.
    eventually("the erase to wait on inflight rows", Duration::from_secs(15), async || {
        erase_phase(&node, "doomed").await == "inflight"
    })
    .await;
    node.kill();

    let node = RunningNode::start(&config, &data, &[]).await;
    assert!(node.banner().contains("1 tenant erase(s) resumed"), "{}", node.banner());
    eventually("the resumed erase to finish", Duration::from_secs(30), async || {
        erase_phase(&node, "doomed").await == "done"
    })
    .await;

    let after = usage(&node, "doomed").await;
    for kind in ["pending", "scheduled", "inflight", "dead", "bytes", "dedupe_keys", "sources"] {
        assert_eq!(after[kind], 0, "doomed's {kind} after the erase: {after}");
    }
    assert_eq!(after["erasing"], false);
    let (_, dlq) = node.admin("GET", "/v1/dlq?tenant=doomed", None, None).await;
    assert_eq!(dlq["entries"].as_array().map(Vec::len), Some(0));
    let (_, dlq) = node.admin("GET", "/v1/dlq", None, None).await;
    assert_eq!(dlq["entries"].as_array().map(Vec::len), Some(0), "it held the node's only dead rows");
    let (_, pen) = node.admin("GET", "/v1/quarantine?tenant=doomed", None, None).await;
    assert_eq!(pen["entries"].as_array().map(Vec::len), Some(0));
    let (_, sources) = node.admin("GET", "/v1/tenants/doomed/sources", None, None).await;
    assert_eq!(sources, json!([]));
    assert_eq!(node.post_hook("doomed-dead", &[], "{}").await.0, 404, "its sources are gone");
    let (_, record) = node.admin("GET", "/v1/tenants/doomed", None, None).await;
    assert_eq!(record["removed"]["dead"], 3, "{record}");
    assert_eq!(record["removed"]["quarantined"], 1);
    assert_eq!(record["removed"]["archived"], 25, "every hook it committed was archived");
    assert_eq!(record["removed"]["sources"], 3);
    assert_eq!(record["removed"]["dedupe_keys"], 2);
    assert_eq!(
        record["removed"]["pending"].as_u64().unwrap_or(0) + record["removed"]["inflight"].as_u64().unwrap_or(0),
        20
    );

    let kept = usage(&node, "kept").await;
    assert_eq!(kept["dedupe_keys"], 6, "the other tenant's keys are untouched: {kept}");
    assert_eq!(node.post_hook("kept", &[("idempotency-key", "kept-0")], "{}").await.1["duplicate"], true);
}
