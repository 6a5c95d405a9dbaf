//! Transforms through the real binary: a filter that drops half of a
//! source's hooks for one sink while another sink gets them all, a
//! reshape whose output the receiver checks byte for byte, a chain of
//! two, `filtered` counted and shown on the hook's rows, the try-it route
//! and its console panel (Chromium); a transform that traps or loops is a
//! dead letter of its binding with the node alive; and a replay after the
//! transform changed delivers the new shape. Looping transforms on a
//! loaded machine cost their own bindings their CPU time, never a healthy
//! binding an attempt.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ankusa_tests::binary::{RunningNode, eventually, request, write_config};
use ankusa_tests::browser::Browser;
use ankusa_tests::guest_wasm;
use ankusa_tests::receiver::{Receiver, Reply};
use serde_json::{Value, json};

/// The bodies the receiver accepted at `path`, in the order received.
fn bodies(receiver: &Receiver, path: &str) -> Vec<String> {
    receiver
        .received()
        .into_iter()
        .filter(|r| r.path == path && (200..300).contains(&r.status))
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .collect()
}

async fn metrics(node: &RunningNode) -> String {
    let (status, text) = request(node.admin, "GET", "/metrics", &[], None).await;
    assert_eq!(status, 200);
    String::from_utf8_lossy(&text).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_and_a_chain_shape_what_each_sink_gets_and_filtered_hooks_are_counted() {
    // `/stuck` never accepts: a hook of `held` stays stored, so its
    // filtered row can be seen.
    let receiver = Receiver::judging(|_, r| Reply::status(if r.path == "/stuck" { 503 } else { 200 })).await;
    let dir = tempfile::tempdir().expect("dir");
    let config = write_config(
        dir.path(),
        &format!(
            "sinks:\n{all}{paid}{slim}{stuck}\
             transforms:\n  paid-only:\n    component: jsonfilter\n    options: {{keep: {{pointer: /paid, equals: true}}}}\n  \
             slim:\n    component: reshape\n    options: {{pick: [/n, /paid], set: [{{pointer: /via, value: ankusa}}], \
             set_headers: {{x-shape: slim}}}}\n\
             sources:\n  shop:\n    sinks:\n      - all\n      - {{sink: paid, transforms: [paid-only]}}\n      \
             - {{sink: slim, transforms: [paid-only, slim]}}\n  \
             held:\n    sinks: [stuck, {{sink: paid, transforms: [paid-only]}}]\n\
             dispatch:\n  retry: {{initial_ms: 60000, max_attempts: 100}}\n",
            all = receiver.http_sink("all", "/all"),
            paid = receiver.http_sink("paid", "/paid"),
            slim = receiver.http_sink("slim", "/slim"),
            stuck = receiver.http_sink("stuck", "/stuck"),
        ),
    );
    let node = RunningNode::start(&config, &dir.path().join("data"), &[]).await;

    const HOOKS: usize = 100;
    for n in 0..HOOKS {
        let body = json!({"n": n, "paid": n % 2 == 0, "extra": "x".repeat(n)}).to_string();
        let (status, answer) = node.post_hook("shop", &[("content-type", "application/json")], &body).await;
        assert_eq!(status, 201, "{answer}");
    }
    eventually("every sink to be done", Duration::from_secs(20), async || {
        bodies(&receiver, "/all").len() == HOOKS
            && bodies(&receiver, "/paid").len() == HOOKS / 2
            && bodies(&receiver, "/slim").len() == HOOKS / 2
    })
    .await;

    // `all` got every hook as sent; `paid` exactly the paid ones, as sent.
    let mut all: Vec<Value> =
        bodies(&receiver, "/all").iter().map(|b| serde_json::from_str(b).expect("json")).collect();
    all.sort_by_key(|v| v["n"].as_u64());
    assert_eq!(
        all.iter().map(|v| v["n"].as_u64().expect("n")).collect::<Vec<_>>(),
        (0..HOOKS as u64).collect::<Vec<_>>()
    );
    let mut paid: Vec<u64> = bodies(&receiver, "/paid")
        .iter()
        .map(|b| serde_json::from_str::<Value>(b).expect("json")["n"].as_u64().expect("n"))
        .collect();
    paid.sort_unstable();
    assert_eq!(paid, (0..HOOKS as u64).step_by(2).collect::<Vec<_>>());
    // `slim` went through both: only paid hooks, reshaped byte for byte.
    let mut slim = bodies(&receiver, "/slim");
    slim.sort_by_key(|b| serde_json::from_str::<Value>(b).expect("json")["n"].as_u64());
    let expected: Vec<String> =
        (0..HOOKS).step_by(2).map(|n| format!(r#"{{"n":{n},"paid":true,"via":"ankusa"}}"#)).collect();
    assert_eq!(slim, expected);
    let shaped = receiver.received().into_iter().filter(|r| r.path == "/slim").collect::<Vec<_>>();
    assert!(shaped.iter().all(|r| r.header("x-shape") == Some("slim")), "the chain's header reached the sink");

    // Counted per binding, in the metrics and the sinks view.
    let text = metrics(&node).await;
    for sink in ["paid", "slim"] {
        let line = format!("ankusa_filtered_total{{source=\"shop\",sink=\"{sink}\"}} {}", HOOKS / 2);
        assert!(text.contains(&line), "{line} in:\n{text}");
    }
    assert!(!text.contains("ankusa_filtered_total{source=\"shop\",sink=\"all\"}"), "a binding without transforms");
    let (_, sinks) = node.admin("GET", "/v1/sinks", None, None).await;
    let view = |name: &str| {
        sinks
            .as_array()
            .expect("list")
            .iter()
            .find(|s| s["source"] == "shop" && s["name"] == name)
            .cloned()
            .expect(name)
    };
    assert_eq!(view("slim")["filtered"], HOOKS / 2);
    assert_eq!(view("slim")["transforms"].as_array().map(|t| t.len()), Some(2));
    assert_eq!(view("all")["filtered"], 0);
    let (_, stats) = node.admin("GET", "/v1/stats", None, None).await;
    let binding = |name: &str| {
        let all = stats["bindings"].as_array().expect("bindings");
        all.iter().find(|b| b["source"] == "shop" && b["sink"] == name).cloned().expect(name)
    };
    assert_eq!((binding("all")["delivered"].as_u64(), binding("all")["filtered"].as_u64()), (Some(100), Some(0)));
    assert_eq!((binding("paid")["delivered"].as_u64(), binding("paid")["filtered"].as_u64()), (Some(50), Some(50)));
    assert_eq!(binding("slim")["failed"], json!({}), "{stats}");

    // A filtered row is shown as such while its hook is stored.
    let (status, held) = node.post_hook("held", &[], r#"{"paid": false}"#).await;
    assert_eq!(status, 201, "{held}");
    let seq = held["seq"].as_u64().expect("seq");
    eventually("the held hook's filtered row", Duration::from_secs(10), async || {
        let (_, hook) = node.admin("GET", &format!("/v1/hooks/{seq}"), None, None).await;
        hook["deliveries"][1]["state"] == "filtered"
    })
    .await;
    let (_, hook) = node.admin("GET", &format!("/v1/hooks/{seq}"), None, None).await;
    let filtered = &hook["deliveries"][1];
    assert_eq!(filtered["sink"], "paid", "{hook}");
    let reason = filtered["reason"].as_str().unwrap_or_default();
    assert!(reason.starts_with("transform `paid-only`: keep: /paid equals true"), "{hook}");
    assert!(filtered["filtered_at"].as_u64().is_some(), "{hook}");
    assert_ne!(hook["deliveries"][0]["state"], "filtered", "the other sink's row is its own");

    // The try-it route: a hook in, the verdict and the output out.
    let (status, tried) = node
        .admin("POST", "/v1/transforms/slim/try", Some(json!({"body": r#"{"n": 3, "paid": true, "x": 1}"#})), None)
        .await;
    assert_eq!(status, 200, "{tried}");
    assert_eq!(tried["verdict"], "deliver");
    assert_eq!(tried["hook"]["body"], r#"{"n":3,"paid":true,"via":"ankusa"}"#);
    assert!(tried["hook"]["headers"].as_array().expect("headers").contains(&json!(["x-shape", "slim"])), "{tried}");
    let (_, dropped) =
        node.admin("POST", "/v1/transforms/paid-only/try", Some(json!({"body": r#"{"paid": false}"#})), None).await;
    assert_eq!(dropped["verdict"], "drop", "{dropped}");
    assert_eq!(dropped["reason"], "keep: /paid equals true does not hold");
    let (status, _) = node.admin("POST", "/v1/transforms/nope/try", Some(json!({"body": "{}"})), None).await;
    assert_eq!(status, 404);
    let (_, listed) = node.admin("GET", "/v1/transforms", None, None).await;
    let paid_only =
        listed.as_array().expect("list").iter().find(|t| t["name"] == "paid-only").cloned().expect("listed");
    assert_eq!(paid_only["bindings"], json!(["held/paid", "shop/paid", "shop/slim"]));
    let after_try = metrics(&node).await;
    assert!(
        after_try.contains(&format!("ankusa_filtered_total{{source=\"shop\",sink=\"paid\"}} {}", HOOKS / 2)),
        "trying stores and counts nothing"
    );

    // The console: the overview counts filtered hooks, the panel tries one.
    let browser = Browser::start(1280, 900).await;
    browser.goto(&format!("http://{}/console/#/overview", node.admin)).await;
    browser.until("the overview", "document.querySelector('[data-stat=filtered] .value')").await;
    let shown = browser.text("[data-stat=filtered] .value").await;
    assert_eq!(shown.trim(), (HOOKS + 1).to_string(), "50 + 50 + the held hook's");
    browser.goto(&format!("http://{}/console/#/transforms", node.admin)).await;
    browser.until("the transforms page", "document.querySelector('#try-form select')").await;
    browser.choose("#try-form select", "slim").await;
    browser.type_into("#try-form textarea[name=body]", r#"{"n": 8, "paid": true, "secret": "s"}"#).await;
    browser.click("#try-form button[type=submit]").await;
    browser.until("the verdict", "document.querySelector('#try-body')").await;
    assert_eq!(browser.text("#try-verdict").await.trim(), "deliver");
    assert_eq!(browser.text("#try-body").await.trim(), r#"{"n":8,"paid":true,"via":"ankusa"}"#);
    browser.choose("#try-form select", "paid-only").await;
    browser.type_into("#try-form textarea[name=body]", r#"{"paid": false}"#).await;
    browser.click("#try-form button[type=submit]").await;
    browser.until("the drop", "document.querySelector('#try-reason')").await;
    assert!(browser.text("#try-reason").await.contains("does not hold"));
    browser.close().await;
    drop(node);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transform_that_traps_or_loops_is_a_dead_letter_and_a_replay_runs_the_changed_transform() {
    let accept = Arc::new(AtomicBool::new(true));
    let accepting = accept.clone();
    let receiver =
        Receiver::judging(move |_, _| Reply::status(if accepting.load(Ordering::SeqCst) { 200 } else { 503 })).await;
    let dir = tempfile::tempdir().expect("dir");
    let config = |via: &str| {
        write_config(
            dir.path(),
            &format!(
                "sinks:\n{out}\
                 transforms:\n  risky:\n    component: {risky}\n  \
                 shape:\n    component: reshape\n    options: {{set: [{{pointer: /via, value: {via}}}]}}\n\
                 sources:\n  shop:\n    sinks: [{{sink: out, transforms: [risky, shape]}}]\n\
                 dispatch:\n  attempt_timeout_ms: 500\n  retry: {{initial_ms: 20, max_attempts: 2, jitter: 0}}\n  \
                 breaker: {{failures: 1000}}\n",
                out = receiver.http_sink("out", "/in"),
                risky = guest_wasm("transform-misbehave").display(),
            ),
        )
    };
    let path = config("v1");
    let node = RunningNode::start(&path, &dir.path().join("data"), &[]).await;

    let (_, trap) = node.post_hook("shop", &[("x-misbehave", "trap")], r#"{"k":"trap"}"#).await;
    let (_, spin) = node.post_hook("shop", &[("x-misbehave", "loop")], r#"{"k":"loop"}"#).await;
    let (_, good) = node.post_hook("shop", &[], r#"{"k":"good"}"#).await;
    eventually("two dead letters", Duration::from_secs(20), async || {
        node.admin("GET", "/v1/dlq", None, None).await.1["entries"].as_array().is_some_and(|e| e.len() == 2)
    })
    .await;
    let (_, dlq) = node.admin("GET", "/v1/dlq", None, None).await;
    for (posted, class, says) in [(&trap, "fault", "transform `risky`: trap"), (&spin, "timeout", "transform `risky`")]
    {
        let entry = dlq["entries"].as_array().expect("entries").iter().find(|e| e["seq"] == posted["seq"]).cloned();
        let entry = entry.unwrap_or_else(|| panic!("{posted} in {dlq}"));
        assert_eq!(entry["error_class"], class, "{entry}");
        assert!(entry["reason"].as_str().is_some_and(|r| r.starts_with(says)), "{entry}");
    }
    let (status, health) = node.admin("GET", "/health", None, None).await;
    assert_eq!(status, 200, "the node is alive: {health}");
    eventually("the good hook", Duration::from_secs(10), async || bodies(&receiver, "/in").len() == 1).await;
    assert_eq!(bodies(&receiver, "/in"), [r#"{"k":"good","via":"v1"}"#]);
    assert!(good["seq"].as_u64().is_some());

    // A hook dead while the receiver refuses, then the transform changes.
    accept.store(false, Ordering::SeqCst);
    let (_, late) = node.post_hook("shop", &[], r#"{"k":"late"}"#).await;
    eventually("the late hook dead", Duration::from_secs(20), async || {
        let (_, dlq) = node.admin("GET", "/v1/dlq", None, None).await;
        dlq["entries"].as_array().is_some_and(|e| e.iter().any(|e| e["seq"] == late["seq"]))
    })
    .await;
    let refused = bodies_refused(&receiver);
    assert!(refused.iter().all(|b| b == r#"{"k":"late","via":"v1"}"#), "{refused:?}");

    // An upload swaps a transform in place (`sink dev`'s route): `risky`
    // runs the reshape component now, which traps on nothing.
    let reshape = std::fs::read(guest_wasm("reshape")).expect("reshape");
    let (status, report) = node.upload_component("risky", reshape).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["swapped"][0]["transform"], "risky", "{report}");
    assert_eq!(report["swapped"][0]["sink"], "out", "{report}");
    accept.store(true, Ordering::SeqCst);
    node.post_hook("shop", &[("x-misbehave", "trap")], r#"{"k":"swapped"}"#).await;
    eventually("the swapped transform's delivery", Duration::from_secs(10), async || {
        bodies(&receiver, "/in").contains(&r#"{"k":"swapped","via":"v1"}"#.to_string())
    })
    .await;
    accept.store(false, Ordering::SeqCst);
    let (status, _) = node.stop();
    assert!(status.success());
    config("v2");
    let node = RunningNode::start(&path, &dir.path().join("data"), &[]).await;
    accept.store(true, Ordering::SeqCst);
    let (status, job) = node
        .admin(
            "POST",
            "/v1/replays",
            Some(json!({"kind": "dlq", "rows": [{"seq": late["seq"], "sink_index": 0}]})),
            None,
        )
        .await;
    assert!(status == 201 || status == 200, "{job}");
    eventually("the replay delivered", Duration::from_secs(20), async || bodies(&receiver, "/in").len() == 3).await;
    assert_eq!(bodies(&receiver, "/in")[2], r#"{"k":"late","via":"v2"}"#, "the replay ran the transform as it is now");
}

fn bodies_refused(receiver: &Receiver) -> Vec<String> {
    receiver
        .received()
        .into_iter()
        .filter(|r| r.status == 503)
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .collect()
}

/// A batching sink (the postgres sink into the machine's PostgreSQL) gets
/// each batch's hooks after the chain ran on each: the filtered ones are
/// not in the batch, the others are reshaped, and batches still form.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batching_sink_gets_each_hook_of_a_batch_through_the_chain() {
    let table = ankusa_tests::postgres::Table::new("transformbatch");
    let dir = tempfile::tempdir().expect("dir");
    let config = write_config(
        dir.path(),
        &format!(
            "sinks:\n  archive:\n    component: postgres\n    options: {{url: \"postgres://postgres@127.0.0.1:5432/test\", \
             table: \"{table}\"}}\n    allow: [\"tcp://127.0.0.1:5432\"]\n    batch: {{max_hooks: 16, max_wait_ms: 50}}\n\
             transforms:\n  odd-only:\n    component: jsonfilter\n    options: {{drop: {{pointer: /even, equals: true}}}}\n  \
             slim:\n    component: reshape\n    options: {{pick: [/n]}}\n\
             sources:\n  shop:\n    sinks: [{{sink: archive, transforms: [odd-only, slim]}}]\n",
            table = table.name,
        ),
    );
    let node = RunningNode::start(&config, &dir.path().join("data"), &[]).await;
    const HOOKS: usize = 200;
    let node = &node;
    let posts = (0..HOOKS).map(|n| {
        let body = json!({"n": n, "even": n % 2 == 0, "pad": "x"}).to_string();
        async move { node.post_hook("shop", &[], &body).await.0 }
    });
    for status in futures_util::future::join_all(posts).await {
        assert_eq!(status, 201);
    }
    let stored = || {
        let sql = format!("SELECT convert_from(body, 'UTF8') FROM {} ORDER BY seq", table.name);
        if ankusa_tests::postgres::psql(&format!("SELECT to_regclass('{}') IS NOT NULL", table.name)).trim() != "t" {
            return Vec::new();
        }
        ankusa_tests::postgres::psql(&sql).lines().filter(|l| !l.is_empty()).map(str::to_string).collect::<Vec<_>>()
    };
    eventually("the odd hooks stored", Duration::from_secs(30), async || stored().len() == HOOKS / 2).await;
    let mut bodies: Vec<String> = stored();
    bodies.sort_by_key(|b| serde_json::from_str::<Value>(b).ok().and_then(|v| v["n"].as_u64()));
    let expected: Vec<String> = (1..HOOKS).step_by(2).map(|n| format!(r#"{{"n":{n}}}"#)).collect();
    assert_eq!(bodies, expected, "only the odd hooks, each reshaped");
    let text = metrics(node).await;
    assert!(text.contains(&format!("ankusa_filtered_total{{source=\"shop\",sink=\"archive\"}} {}", HOOKS / 2)));
    let calls = text
        .lines()
        .find_map(|l| l.strip_prefix("ankusa_delivery_batch_hooks_count "))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0);
    assert!(calls >= 1.0 && calls < (HOOKS / 2) as f64, "the kept hooks went in batches: {calls} calls");
}

/// A transform's component file that changes is loaded again on reload
/// (`POST /v1/sinks/reload`, or SIGHUP), as a sink's is; one that does
/// not load leaves the running one in place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_transform_file_is_reloaded_and_a_broken_one_is_not() {
    let receiver = Receiver::start(Reply::status(200)).await;
    let dir = tempfile::tempdir().expect("dir");
    let wasm = dir.path().join("t.wasm");
    std::fs::copy(guest_wasm("transform-misbehave"), &wasm).expect("copy");
    let config = write_config(
        dir.path(),
        &format!(
            "sinks:\n{out}transforms:\n  t:\n    component: \"{wasm}\"\n\
             sources:\n  shop:\n    sinks: [{{sink: out, transforms: [t]}}]\n",
            out = receiver.http_sink("out", "/in"),
            wasm = wasm.display(),
        ),
    );
    let node = RunningNode::start(&config, &dir.path().join("data"), &[]).await;
    let (_, unchanged) = node.admin("POST", "/v1/sinks/reload", Some(json!({})), None).await;
    assert_eq!(unchanged["swapped"], json!([]), "{unchanged}");

    // Not a transform: refused, the running one stays (it drops hooks
    // that ask it to).
    std::fs::copy(guest_wasm("noop"), &wasm).expect("overwrite");
    let (_, refused) = node.admin("POST", "/v1/sinks/reload", Some(json!({})), None).await;
    assert_eq!(refused["failed"][0]["transform"], "t", "{refused}");
    assert!(refused["failed"][0]["reason"].as_str().is_some_and(|r| r.contains("not a transform")), "{refused}");
    node.post_hook("shop", &[("x-misbehave", "drop")], r#"{"n":1}"#).await;
    eventually("the first hook filtered", Duration::from_secs(10), async || {
        metrics(&node).await.contains("ankusa_filtered_total{source=\"shop\",sink=\"out\"} 1")
    })
    .await;

    // Another transform (reshape, which drops nothing): swapped in.
    std::fs::copy(guest_wasm("reshape"), &wasm).expect("overwrite");
    let (_, swapped) = node.admin("POST", "/v1/sinks/reload", Some(json!({})), None).await;
    assert_eq!(swapped["swapped"][0]["transform"], "t", "{swapped}");
    assert_eq!(swapped["swapped"][0]["sink"], "out", "{swapped}");
    node.post_hook("shop", &[("x-misbehave", "drop")], r#"{"n":2}"#).await;
    eventually("the second hook delivered", Duration::from_secs(10), async || bodies(&receiver, "/in").len() == 1)
        .await;
    assert_eq!(bodies(&receiver, "/in"), [r#"{"n":2}"#]);
}

/// Without a queue (`wal.mode: none`) a binding's transforms run before
/// the direct publish: the sink gets the output, a dropped hook is
/// answered `201` and counted filtered, a transform that traps is a `503`
/// (the provider retries).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_mode_runs_each_bindings_transforms_before_its_sink() {
    let receiver = Receiver::start(Reply::status(200)).await;
    let dir = tempfile::tempdir().expect("dir");
    let config = write_config(
        dir.path(),
        &format!(
            "wal: {{mode: none}}\nsinks:\n{out}transforms:\n  risky:\n    component: \"{risky}\"\n  \
             slim:\n    component: reshape\n    options: {{pick: [/n]}}\n\
             sources:\n  shop:\n    sinks: [{{sink: out, transforms: [risky, slim]}}]\n",
            out = receiver.http_sink("out", "/in"),
            risky = guest_wasm("transform-misbehave").display(),
        ),
    );
    let node = RunningNode::start(&config, &dir.path().join("data"), &[]).await;
    let (status, answer) = node.post_hook("shop", &[], r#"{"n":1,"x":true}"#).await;
    assert_eq!(status, 201, "{answer}");
    assert_eq!(bodies(&receiver, "/in"), [r#"{"n":1}"#], "delivered while the request waited, reshaped");

    let (status, answer) = node.post_hook("shop", &[("x-misbehave", "drop")], r#"{"n":2}"#).await;
    assert_eq!(status, 201, "a dropped hook is confirmed: {answer}");
    assert_eq!(bodies(&receiver, "/in").len(), 1, "and not delivered");
    assert!(metrics(&node).await.contains("ankusa_filtered_total{source=\"shop\",sink=\"out\"} 1"));

    let (status, answer) = node.post_hook("shop", &[("x-misbehave", "trap")], r#"{"n":3}"#).await;
    assert_eq!(status, 503, "a trapping transform confirms nothing: {answer}");
    assert_eq!(bodies(&receiver, "/in").len(), 1);
    let (status, _) = node.admin("GET", "/health", None, None).await;
    assert_eq!(status, 200, "the node is alive");
}

/// Attempts of `source`'s binding that ended in `class`, from the metrics.
fn attempts(metrics: &str, source: &str, class: &str) -> u64 {
    let prefix = format!("ankusa_deliveries_total{{source=\"{source}\",sink=\"out\",class=\"{class}\"}} ");
    metrics.lines().find_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok()).unwrap_or(0)
}

/// Eight looping transforms beside two healthy bindings, on a machine
/// loaded by a spinning thread per core, every attempt bounded at 300 ms:
/// each looper is stopped (class `timeout`), again and again; no attempt
/// of a healthy binding times out and each healthy hook arrives once. A
/// guest is charged only for ticks it ran through, and a spinning one
/// yields behind every runnable task, so a healthy one neither waits long
/// nor is charged for waiting. (With the deadline in wall time and a plain
/// yield, a run of this probe timed out 168 healthy attempts.)
/// `ANKUSA_NOISY_RUNS` runs the probe that many times (1 by default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn looping_transforms_never_time_out_a_healthy_binding() {
    const NOISY: usize = 8;
    const CALM_HOOKS: usize = 200;
    let runs: usize = std::env::var("ANKUSA_NOISY_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    for run in 1..=runs {
        let receiver = Receiver::start(Reply::status(200)).await;
        let dir = tempfile::tempdir().expect("dir");
        let misbehave = guest_wasm("transform-misbehave");
        let mut sources = String::new();
        for n in 0..NOISY {
            sources += &format!("  noisy-{n}:\n    sinks: [{{sink: out, transforms: [looper]}}]\n");
        }
        for n in 0..2 {
            sources += &format!("  calm-{n}:\n    sinks: [{{sink: out, transforms: [tagger]}}]\n");
        }
        let config = write_config(
            dir.path(),
            &format!(
                "sinks:\n{out}transforms:\n  \
                 looper: {{component: {wasm}, options: {{mode: loop}}}}\n  \
                 tagger: {{component: {wasm}, options: {{mode: tag, tag: \"!\"}}}}\n\
                 sources:\n{sources}\
                 dispatch:\n  attempt_timeout_ms: 300\n  \
                 retry: {{initial_ms: 10, max_ms: 50, max_attempts: 100000, jitter: 0}}\n  \
                 breaker: {{failures: 1000000}}\n",
                out = receiver.http_sink("out", "/in"),
                wasm = misbehave.display(),
            ),
        );
        let node = RunningNode::start(&config, &dir.path().join("data"), &[]).await;
        // Load the machine: a thread spinning on every core, beside the node.
        let stop = Arc::new(AtomicBool::new(false));
        let cores = std::thread::available_parallelism().map_or(2, usize::from);
        let burners: Vec<_> = (0..cores)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                    }
                })
            })
            .collect();
        for n in 0..NOISY {
            assert_eq!(node.post_hook(&format!("noisy-{n}"), &[], r#"{"k":"spin"}"#).await.0, 201);
        }
        for i in 0..CALM_HOOKS {
            let (status, _) = node.post_hook(&format!("calm-{}", i % 2), &[], &format!(r#"{{"i":{i}}}"#)).await;
            assert_eq!(status, 201);
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
        eventually("every healthy hook delivered", Duration::from_secs(60), async || {
            bodies(&receiver, "/in").len() >= CALM_HOOKS
        })
        .await;
        stop.store(true, Ordering::Relaxed);
        for burner in burners {
            burner.join().expect("burner");
        }
        let text = metrics(&node).await;
        let noisy_timeouts: u64 = (0..NOISY).map(|n| attempts(&text, &format!("noisy-{n}"), "timeout")).sum();
        let calm_timeouts: u64 = (0..2).map(|n| attempts(&text, &format!("calm-{n}"), "timeout")).sum();
        let calm_ok: u64 = (0..2).map(|n| attempts(&text, &format!("calm-{n}"), "ok")).sum();
        let got = bodies(&receiver, "/in");
        let distinct: std::collections::HashSet<&String> = got.iter().collect();
        eprintln!(
            "noisy probe run {run}: {noisy_timeouts} looper timeouts, {calm_timeouts} healthy timeouts, \
             {calm_ok} healthy deliveries, {} received ({} distinct)",
            got.len(),
            distinct.len()
        );
        assert!(noisy_timeouts >= NOISY as u64, "every looper was stopped at least once:\n{text}");
        assert_eq!(calm_timeouts, 0, "run {run}: a healthy binding timed out:\n{text}");
        assert_eq!((got.len(), distinct.len()), (CALM_HOOKS, CALM_HOOKS), "each healthy hook once");
        assert!(got.iter().all(|b| b.ends_with('!')), "through the tagger");
        let (status, log) = node.stop();
        let tail: Vec<&str> = log.lines().rev().take(30).collect();
        assert!(status.success(), "run {run}: stopped with {status}:\n{}", tail.join("\n"));
    }
}
