//! The real `ankusa run`, started from a config file on free ports, with
//! its banner and logs collected, and a small HTTP client for its ingest
//! and admin ports.

use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use serde_json::Value;

use crate::ankusa_bin;

/// Text a child process wrote, collected as it is written.
pub type Output = Arc<Mutex<String>>;

/// Collect what `from` yields, on a thread of its own.
pub fn collect(from: impl Read + Send + 'static) -> Output {
    let output = Output::default();
    collect_into(from, output.clone());
    output
}

/// Append what `from` yields to `output` (several processes may share one).
pub fn collect_into(mut from: impl Read + Send + 'static, output: Output) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 {
                break;
            }
            output.lock().expect("output").push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
}

pub struct RunningNode {
    child: Child,
    pub ingest: SocketAddr,
    pub admin: SocketAddr,
    pub data: PathBuf,
    pub config: PathBuf,
    stdout: Output,
    stderr: Output,
}

impl RunningNode {
    /// Start `ankusa run --config <config> --data-dir <data>` with the
    /// ingest and admin ports chosen by the system; waits for `ready`.
    pub async fn start(config: &Path, data: &Path, env: &[(&str, &str)]) -> RunningNode {
        RunningNode::start_on(config, data, env, "127.0.0.1:0").await
    }

    /// [`RunningNode::start`] with the admin API on `admin_listen`.
    pub async fn start_on(config: &Path, data: &Path, env: &[(&str, &str)], admin_listen: &str) -> RunningNode {
        RunningNode::start_bin(&ankusa_bin(), config, data, env, admin_listen).await
    }

    /// [`RunningNode::start_on`] with the binary at `bin` (a benchmark's
    /// release build).
    pub async fn start_bin(
        bin: &Path,
        config: &Path,
        data: &Path,
        env: &[(&str, &str)],
        admin_listen: &str,
    ) -> RunningNode {
        RunningNode::try_start_bin(bin, config, data, env, admin_listen)
            .await
            .unwrap_or_else(|exited| panic!("{exited}"))
    }

    /// [`RunningNode::start_bin`], telling a node that exits before it is
    /// ready (with what it printed) instead of failing the test.
    pub async fn try_start_bin(
        bin: &Path,
        config: &Path,
        data: &Path,
        env: &[(&str, &str)],
        admin_listen: &str,
    ) -> Result<RunningNode, String> {
        let mut command = Command::new(bin);
        command
            .arg("run")
            .arg("--config")
            .arg(config)
            .arg("--data-dir")
            .arg(data)
            .args(["--ingest", "127.0.0.1:0", "--admin", admin_listen])
            .env("NO_COLOR", "1")
            .env_remove("ANKUSA_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().expect("start ankusa run");
        let stdout = collect(child.stdout.take().expect("stdout"));
        let stderr = collect(child.stderr.take().expect("stderr"));
        let started = Instant::now();
        loop {
            let text = stdout.lock().expect("stdout").clone();
            if text.contains("ready;") {
                let ingest = banner_addr(&text, "ingest: http://");
                let admin = banner_addr(&text, "admin: http://");
                return Ok(RunningNode {
                    child,
                    ingest,
                    admin,
                    data: data.to_path_buf(),
                    config: config.to_path_buf(),
                    stdout,
                    stderr,
                });
            }
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!(
                    "ankusa run exited with {status} before it was ready\nstdout:\n{text}\nstderr:\n{}",
                    stderr.lock().expect("stderr")
                ));
            }
            assert!(started.elapsed() < Duration::from_secs(120), "the node did not get ready:\n{text}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn banner(&self) -> String {
        self.stdout.lock().expect("stdout").clone()
    }

    pub fn log(&self) -> String {
        self.stderr.lock().expect("stderr").clone()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Send `signal` (`STOP`, `CONT`, ...) to the process.
    pub fn signal(&self, signal: &str) {
        let sent = Command::new("kill").arg(format!("-{signal}")).arg(self.child.id().to_string()).status();
        assert!(sent.is_ok_and(|s| s.success()), "kill -{signal} {}", self.child.id());
    }

    /// Its exit status, once it exits by itself within `within`.
    pub async fn exited_within(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if started.elapsed() >= within {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILL, and wait for the process to be gone.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, and wait for a clean stop: its status and everything it
    /// logged.
    pub fn stop(mut self) -> (std::process::ExitStatus, String) {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let status = self.child.wait().expect("wait for ankusa");
        // The reader thread sees the end of the pipe just after the exit.
        std::thread::sleep(Duration::from_millis(200));
        (status, self.log())
    }

    /// A request to the admin API; the body parsed as JSON when it is.
    pub async fn admin(&self, method: &str, path: &str, body: Option<Value>, token: Option<&str>) -> (u16, Value) {
        let mut headers = Vec::new();
        if let Some(token) = token {
            headers.push(("authorization".to_string(), format!("Bearer {token}")));
        }
        let (status, bytes) = request(self.admin, method, path, &headers, body.map(|b| b.to_string())).await;
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into())),
        )
    }

    /// POST a hook to `/webhooks/{source}`.
    /// `PUT /v1/sinks/{name}/component` with `component` (what `ankusa
    /// sink dev` does): (status, answer).
    pub async fn upload_component(&self, name: &str, component: Vec<u8>) -> (u16, Value) {
        use http_body_util::Full;
        let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http::<Full<bytes::Bytes>>();
        let request = http::Request::put(format!("http://{}/v1/sinks/{name}/component", self.admin))
            .header("content-type", "application/wasm")
            .body(Full::new(bytes::Bytes::from(component)))
            .expect("request");
        let response = client.request(request).await.expect("sent");
        let status = response.status().as_u16();
        let bytes = response.into_body().collect().await.expect("body").to_bytes();
        (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    pub async fn post_hook(&self, source: &str, headers: &[(&str, &str)], body: &str) -> (u16, Value) {
        let headers: Vec<(String, String)> = headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let (status, bytes) =
            request(self.ingest, "POST", &format!("/webhooks/{source}"), &headers, Some(body.to_string())).await;
        (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }
}

impl Drop for RunningNode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn banner_addr(text: &str, prefix: &str) -> SocketAddr {
    // A human banner line starts with the prefix; a JSON one holds it in
    // its message.
    let line = text
        .lines()
        .find_map(|l| l.find(prefix).map(|at| &l[at + prefix.len()..]))
        .unwrap_or_else(|| panic!("no `{prefix}` in:\n{text}"));
    line.split(|c: char| c.is_whitespace() || c == '"' || c == ';')
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("bad address in {line}"))
}

/// One HTTP/1.1 request; (status, body).
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: Option<String>,
) -> (u16, Vec<u8>) {
    let client =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http::<String>();
    let mut builder = http::Request::builder().method(method).uri(format!("http://{addr}{path}"));
    if body.is_some() {
        builder = builder.header("content-type", "application/json");
    }
    for (k, v) in headers {
        builder = builder.header(k.as_str(), v.as_str());
    }
    let request = builder.body(body.unwrap_or_default()).expect("request");
    // A node that never answers fails the test here, not at CI's timeout.
    let exchange = async {
        let response = client.request(request).await.expect("request sent");
        let status = response.status().as_u16();
        (status, response.into_body().collect().await.expect("body").to_bytes().to_vec())
    };
    tokio::time::timeout(Duration::from_secs(60), exchange)
        .await
        .unwrap_or_else(|_| panic!("{method} http://{addr}{path}: no answer within 60 s"))
}

/// A config file in `dir`, for `RunningNode::start` or `check-config`.
pub fn write_config(dir: &Path, yaml: &str) -> PathBuf {
    let path = dir.join("ankusa.yml");
    std::fs::write(&path, yaml).expect("write config");
    path
}

/// Poll `done` until it holds or `within` passes.
pub async fn eventually(what: &str, within: Duration, mut done: impl AsyncFnMut() -> bool) {
    let started = Instant::now();
    while !done().await {
        assert!(started.elapsed() < within, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
