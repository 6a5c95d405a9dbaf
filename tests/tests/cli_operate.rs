//! `ankusa dlq|replay|tenant` against a running node, and `store stats`
//! on its store once it has stopped.

use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ankusa_tests::ankusa_bin;
use ankusa_tests::binary::{RunningNode, eventually, write_config};
use ankusa_tests::receiver::{Receiver, Reply};
use serde_json::Value;

fn cli(node: &RunningNode, args: &[&str]) -> Output {
    Command::new(ankusa_bin())
        .args(args)
        .env("ANKUSA_ADMIN_URL", format!("http://{}", node.admin))
        .env("NO_COLOR", "1")
        .output()
        .expect("run the cli")
}

fn json_of(out: &Output) -> Value {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_operates_a_running_node() {
    let accept = Arc::new(AtomicBool::new(false));
    let flag = accept.clone();
    let receiver =
        Receiver::scripted(move |_| Reply::status(if flag.load(Ordering::SeqCst) { 200 } else { 410 })).await;
    let dir = tempfile::tempdir().expect("dir");
    let config = write_config(
        dir.path(),
        &format!(
            "sinks:\n  hook: {{component: http, options: {{url: \"{}\"}}, allow: [\"{}\"]}}\nsources:\n  orders: {{tenant: acme, sinks: [hook]}}\n",
            receiver.url("/in"),
            receiver.origin()
        ),
    );
    let data = dir.path().join("data");
    let node = RunningNode::start(&config, &data, &[]).await;
    for n in 0..5 {
        assert_eq!(node.post_hook("orders", &[], &format!("{{\"n\":{n}}}")).await.0, 201);
    }
    eventually("5 dead rows", Duration::from_secs(15), async || {
        node.admin("GET", "/v1/tenants/acme/usage", None, None).await.1["dead"] == 5
    })
    .await;

    let text = cli(&node, &["dlq", "list", "--limit", "2", "--all"]);
    assert!(text.status.success());
    assert_eq!(String::from_utf8_lossy(&text.stdout).lines().count(), 5, "every row, across pages");
    assert!(String::from_utf8_lossy(&text.stderr).contains("5 row(s)"));
    let page = json_of(&cli(&node, &["dlq", "list", "--json", "--error-class", "permanent", "--tenant", "acme"]));
    assert_eq!(page["entries"].as_array().map(Vec::len), Some(5));

    accept.store(true, Ordering::SeqCst);
    let job = json_of(&cli(&node, &["replay", "start", "--id", "cli-1", "--wait", "--json"]));
    assert_eq!((job["state"].as_str(), job["moved"].as_u64()), (Some("done"), Some(5)), "{job}");
    let status = cli(&node, &["replay", "status"]);
    assert!(String::from_utf8_lossy(&status.stdout).contains("cli-1"));
    let missing = cli(&node, &["replay", "pause", "nope"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("404 not_found"), "{missing:?}");

    let usage = json_of(&cli(&node, &["tenant", "usage", "acme", "--json"]));
    assert_eq!(usage["tenant"], "acme");
    let unconfirmed = cli(&node, &["tenant", "erase", "acme"]);
    assert_eq!(unconfirmed.status.code(), Some(2), "erase needs --yes");
    let erased = json_of(&cli(&node, &["tenant", "erase", "acme", "--yes", "--wait", "--json"]));
    assert_eq!(erased["phase"], "done", "{erased}");

    let busy =
        Command::new(ankusa_bin()).args(["store", "stats", "--store"]).arg(data.join("store")).output().expect("run");
    assert!(!busy.status.success(), "a running node's store is locked");
    assert!(String::from_utf8_lossy(&busy.stderr).contains("still running"), "{busy:?}");
    let (status, _) = node.stop();
    assert!(status.success());
    let stats = Command::new(ankusa_bin())
        .args(["store", "stats", "--json", "--store"])
        .arg(data.join("store"))
        .output()
        .expect("run");
    let stats = json_of(&stats);
    assert_eq!(stats["next_seq"], 6, "{stats}");
    assert_eq!(stats["rows"]["dead"], 0);
    assert_eq!(stats["replay_jobs"], 1);
}
