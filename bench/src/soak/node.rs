//! The node under test: the real `ankusa` binary, started on fixed ports
//! (so clients reconnect to the same address after a restart) and killed
//! with SIGKILL.

use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::Mode;
use super::recorder::Recorder;

/// The main source, whose every ack is checked.
pub const SOURCE: &str = "soak";
pub const TENANT: &str = "main";
/// A second tenant's source, erased now and then while the node runs.
pub const SCRATCH_SOURCE: &str = "scratch";
pub const SCRATCH_TENANT: &str = "scratch";

/// Deliveries at once; a kill can leave at most this many delivered but
/// not recorded as delivered, so each kill adds at most this many
/// duplicates.
pub const CONCURRENCY: usize = 16;

/// The configuration: quick retries and a short breaker so a round's
/// failures play out within it, a small intake segment so `dual` mode
/// checkpoints every few hundred hooks, no rate limit in the way.
pub fn config(mode: Mode, recorder: &Recorder) -> String {
    let wal = match mode {
        Mode::Disk => "wal: {mode: disk}".to_string(),
        Mode::Dual => "wal: {mode: dual, intake_segment_bytes: 65536}".to_string(),
    };
    format!(
        "log: {{format: human, level: warn}}
{wal}
dispatch:
  concurrency: {CONCURRENCY}
  sink_concurrency: {CONCURRENCY}
  attempt_timeout_ms: 1000
  retry: {{initial_ms: 20, factor: 2.0, max_ms: 400, max_attempts: 8, jitter: 0.2}}
  breaker: {{failures: 50, open_ms: 100, max_open_ms: 400}}
rate_limits:
  default: {{rate: 1000000, burst: 1000000}}
sinks:
  recorder:
    component: http
    options: {{url: \"{url}\"}}
    allow: [\"{origin}\"]
    allow_networks: [\"127.0.0.0/8\"]
sources:
  {SOURCE}: {{tenant: {TENANT}, sinks: [recorder]}}
  {SCRATCH_SOURCE}: {{tenant: {SCRATCH_TENANT}, sinks: [recorder]}}
",
        url = recorder.url(),
        origin = recorder.origin(),
    )
}

/// A free loopback port (closed again at once; nothing else here binds).
pub fn free_port() -> std::io::Result<SocketAddr> {
    std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()
}

pub struct Node {
    child: Child,
    stderr: Arc<Mutex<String>>,
}

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("cannot start {bin}: {source}")]
    Spawn { bin: PathBuf, source: std::io::Error },
    #[error("the node exited with {status} before it was ready:\n{stderr}")]
    Exited { status: std::process::ExitStatus, stderr: String },
    #[error("the node was not ready within {0:?}:\n{1}")]
    NotReady(Duration, String),
}

impl Node {
    /// Start `ankusa run` and wait for its `ready` line.
    pub fn start(
        bin: &Path,
        config: &Path,
        data: &Path,
        ingest: SocketAddr,
        admin: SocketAddr,
    ) -> Result<Node, NodeError> {
        let mut child = Command::new(bin)
            .arg("run")
            .arg("--config")
            .arg(config)
            .arg("--data-dir")
            .arg(data)
            .args(["--ingest", &ingest.to_string(), "--admin", &admin.to_string()])
            .env("NO_COLOR", "1")
            .env_remove("ANKUSA_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| NodeError::Spawn { bin: bin.to_path_buf(), source })?;
        let stdout = collect(child.stdout.take());
        let stderr = collect(child.stderr.take());
        let started = Instant::now();
        let limit = Duration::from_secs(120);
        loop {
            if stdout.lock().map(|s| s.contains("ready;")).unwrap_or(false) {
                return Ok(Node { child, stderr });
            }
            let text = || stderr.lock().map(|s| s.clone()).unwrap_or_default();
            if let Ok(Some(status)) = child.try_wait() {
                // Let the reader threads take the last lines.
                std::thread::sleep(Duration::from_millis(100));
                return Err(NodeError::Exited { status, stderr: text() });
            }
            if started.elapsed() > limit {
                let _ = child.kill();
                let _ = child.wait();
                return Err(NodeError::NotReady(limit, text()));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGKILL: no shutdown path runs.
    pub fn kill(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.stderr.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

/// What a child writes, collected on a thread of its own.
fn collect(from: Option<impl Read + Send + 'static>) -> Arc<Mutex<String>> {
    let text = Arc::new(Mutex::new(String::new()));
    if let Some(mut from) = from {
        let text = text.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = from.read(&mut buf) {
                if n == 0 {
                    break;
                }
                if let Ok(mut text) = text.lock() {
                    text.push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            }
        });
    }
    text
}
