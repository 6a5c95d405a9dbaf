//! kill -9 of the real binary while deliveries are in flight: every hook it
//! acked is delivered (by the `demo` source's `log` sink) at least once,
//! counting the run that was killed and the run after it.

use std::collections::HashSet;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ankusa_tests::ankusa_bin;
use ankusa_tests::binary::collect_into;
use http_body_util::BodyExt;

/// The node's stderr, collected as it is written.
type Log = Arc<Mutex<String>>;

fn start(data: &std::path::Path, port: u16, log: &Log) -> Child {
    let mut child = Command::new(ankusa_bin())
        .args(["run", "--data-dir"])
        .arg(data)
        .args(["--ingest", &format!("127.0.0.1:{port}"), "--admin", "127.0.0.1:0"])
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ankusa run");
    // Both runs log into one text: a hook delivered by either counts.
    collect_into(child.stderr.take().expect("stderr"), log.clone());
    child
}

async fn wait_ready(port: u16) {
    let started = Instant::now();
    while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
        assert!(started.elapsed() < Duration::from_secs(30), "the node did not start listening");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Ids the log sink delivered, from its log lines (`hook <id> seq=...`).
fn delivered(log: &Log) -> HashSet<String> {
    let text = log.lock().expect("log").clone();
    text.lines()
        .filter_map(|line| line.split(" hook ").nth(1))
        .filter_map(|rest| rest.split(' ').next())
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acked_hook_is_delivered_after_a_sigkill() {
    let data = tempfile::tempdir().expect("dir");
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("probe");
        probe.local_addr().expect("addr").port()
    };
    let log = Log::default();
    let mut node = start(data.path(), port, &log);
    wait_ready(port).await;

    // Hooks go in from 16 clients at once; the node is killed mid-stream.
    let acked = Arc::new(Mutex::new(Vec::new()));
    let mut clients = Vec::new();
    for client in 0..16 {
        let acked = acked.clone();
        clients.push(tokio::spawn(async move {
            let http = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http::<String>();
            for n in 0..10 {
                let request = http::Request::post(format!("http://127.0.0.1:{port}/webhooks/demo"))
                    .body(format!("{{\"client\":{client},\"n\":{n}}}"))
                    .expect("request");
                let Ok(response) = http.request(request).await else { return };
                if response.status() != 201 {
                    continue;
                }
                let Ok(body) = response.into_body().collect().await else { return };
                let answer: serde_json::Value = serde_json::from_slice(&body.to_bytes()).expect("json");
                acked.lock().expect("acked").push(answer["id"].as_str().expect("id").to_string());
            }
        }));
    }
    let started = Instant::now();
    while acked.lock().expect("acked").len() < 60 && started.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    node.kill().expect("SIGKILL");
    node.wait().expect("reap");
    for client in clients {
        let _ = client.await;
    }
    let acked: Vec<String> = acked.lock().expect("acked").clone();
    let before_restart = delivered(&log);
    assert!(acked.len() >= 60, "the node acked {} hooks before the kill", acked.len());

    let mut node = start(data.path(), port, &log);
    wait_ready(port).await;
    let started = Instant::now();
    loop {
        let seen = delivered(&log);
        let missing: Vec<&String> = acked.iter().filter(|id| !seen.contains(*id)).collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{} acked hooks never delivered: {missing:?}",
            missing.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "kill -9 during delivery: {} acked, {} delivered before the kill, all {} delivered after the restart",
        acked.len(),
        acked.iter().filter(|id| before_restart.contains(*id)).count(),
        acked.len()
    );
    node.kill().expect("stop");
    node.wait().expect("reap");
}
