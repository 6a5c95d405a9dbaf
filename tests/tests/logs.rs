//! What an operator reads at `info`: a refused webhook, a delivery that
//! will be retried, a hook that died and a replay job each give exactly one
//! line, naming the sink, in the human format and in JSON (banner
//! included).

use std::time::Duration;

use ankusa_tests::binary::{RunningNode, eventually, write_config};
use ankusa_tests::receiver::{Receiver, Reply};
use serde_json::{Value, json};

fn config(receiver: &Receiver, format: &str) -> String {
    format!(
        r#"
log: {{format: {format}, level: info}}
dispatch:
  retry: {{initial_ms: 50, max_ms: 200}}
sinks:
  hook:
    component: http
    options: {{url: "{url}"}}
    allow: ["{origin}"]
sources:
  orders:
    sinks: [hook]
  signed:
    sinks: [hook]
    verify: {{preset: github, secret: "s3cret-value"}}
"#,
        url = receiver.url("/in"),
        origin = receiver.origin(),
    )
}

/// Whether a human log line names the sink `hook`.
fn names_hook(line: &str) -> bool {
    line.contains("sink=hook") || line.contains("sink=\"hook\"")
}

/// The lines of `log` that carry `message`.
fn lines_with<'a>(log: &'a str, message: &str) -> Vec<&'a str> {
    log.lines().filter(|l| l.contains(message)).collect()
}

/// Drive the four events through a node logging in `format`; its log.
async fn four_events(format: &str) -> (String, String, String) {
    // The first delivery is refused with 503 (retried), the third with 410
    // (dead at once); the rest succeed.
    let receiver = Receiver::scripted(|n| {
        Reply::status(match n {
            0 => 503,
            2 => 410,
            _ => 200,
        })
    })
    .await;
    let dir = tempfile::tempdir().expect("dir");
    let path = write_config(dir.path(), &config(&receiver, format));
    let node = RunningNode::start(&path, &dir.path().join("data"), &[]).await;

    let (status, _) = node.post_hook("signed", &[("x-hub-signature-256", "sha256=00")], "{}").await;
    assert_eq!(status, 401);
    let (status, _) = node.post_hook("orders", &[], r#"{"first":true}"#).await;
    assert_eq!(status, 201);
    eventually("a retried delivery", Duration::from_secs(15), async || receiver.received().len() == 2).await;
    let (status, dead) = node.post_hook("orders", &[], r#"{"second":true}"#).await;
    assert_eq!(status, 201);
    let dead_id = dead["id"].as_str().expect("id").to_string();
    eventually("one dead letter", Duration::from_secs(15), async || {
        node.admin("GET", "/v1/dlq", None, None).await.1["entries"].as_array().is_some_and(|e| e.len() == 1)
    })
    .await;
    let body = json!({"id": "again", "kind": "dlq", "sink": "hook"});
    assert_eq!(node.admin("POST", "/v1/replays", Some(body), None).await.0, 201);
    eventually("the replay to finish", Duration::from_secs(15), async || {
        node.admin("GET", "/v1/replays/again", None, None).await.1["state"] == "done"
    })
    .await;
    eventually("the revived hook delivered", Duration::from_secs(15), async || receiver.received().len() == 4).await;
    eventually("the replay's end logged", Duration::from_secs(5), async || node.log().contains("replay job finished"))
        .await;
    let (banner, log) = (node.banner(), node.log());
    node.kill();
    (banner, log, dead_id)
}

fn check_human(log: &str, dead_id: &str) {
    let refused = lines_with(log, "webhook refused");
    assert_eq!(refused.len(), 1, "one line for one refusal:\n{log}");
    assert!(refused[0].contains("INFO") && refused[0].contains("signed") && refused[0].contains("invalid_signature"));
    let retried = lines_with(log, "it will be retried");
    assert_eq!(retried.len(), 1, "one line for one retry:\n{log}");
    assert!(retried[0].contains("INFO") && names_hook(retried[0]), "{}", retried[0]);
    assert!(retried[0].contains("503") && retried[0].contains("seq=1"), "the reason and the hook: {}", retried[0]);
    let dead = lines_with(log, "hook dead-lettered");
    assert_eq!(dead.len(), 1, "one line for one dead letter:\n{log}");
    assert!(names_hook(dead[0]), "{}", dead[0]);
    for expected in ["INFO", "orders", dead_id, "410", "attempts=1"] {
        assert!(dead[0].contains(expected), "`{expected}` in {}", dead[0]);
    }
    for message in ["replay job started", "replay job finished"] {
        let lines = lines_with(log, message);
        assert_eq!(lines.len(), 1, "one `{message}` line:\n{log}");
        assert!(lines[0].contains("INFO") && names_hook(lines[0]), "{}", lines[0]);
    }
    assert!(!log.contains("attempt failed"), "per-attempt lines stay at debug:\n{log}");
}

fn check_json(banner: &str, log: &str, dead_id: &str) {
    for line in banner.lines() {
        let event: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("a banner line is JSON ({e}): {line}"));
        assert_eq!(event["target"], "ankusa::banner");
        assert!(event["fields"]["message"].is_string());
    }
    let events: Vec<Value> = log
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("a log line is JSON ({e}): {line}")))
        .collect();
    let with = |message: &str| -> Vec<&Value> {
        events.iter().filter(|e| e["fields"]["message"].as_str().is_some_and(|m| m.starts_with(message))).collect()
    };
    let refused = with("webhook refused");
    assert_eq!(refused.len(), 1, "{log}");
    assert_eq!(
        (&refused[0]["fields"]["source"], &refused[0]["fields"]["reason"]),
        (&json!("signed"), &json!("invalid_signature"))
    );
    let retried = with("delivery failed; it will be retried");
    assert_eq!(retried.len(), 1, "{log}");
    assert_eq!(retried[0]["fields"]["sink"], "hook");
    assert_eq!(retried[0]["fields"]["seq"], 1);
    let reason = retried[0]["fields"]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("503"), "the sink's reason: {}", retried[0]);
    let dead = with("hook dead-lettered");
    assert_eq!(dead.len(), 1, "{log}");
    let fields = &dead[0]["fields"];
    assert_eq!(
        (&fields["sink"], &fields["source"], &fields["id"]),
        (&json!("hook"), &json!("orders"), &json!(dead_id))
    );
    assert_eq!(dead[0]["level"], "INFO");
    assert!(fields["reason"].as_str().is_some_and(|r| r.contains("410")), "{fields}");
    for message in ["replay job started", "replay job finished"] {
        let lines = with(message);
        assert_eq!(lines.len(), 1, "{message}: {log}");
        assert_eq!((&lines[0]["level"], &lines[0]["fields"]["sink"]), (&json!("INFO"), &json!("hook")));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_event_is_one_info_line_naming_the_sink_in_both_formats() {
    let (_, human, dead_id) = four_events("human").await;
    check_human(&human, &dead_id);
    let (banner, json_log, dead_id) = four_events("json").await;
    check_json(&banner, &json_log, &dead_id);
}
