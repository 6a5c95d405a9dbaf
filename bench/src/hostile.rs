//! Hostile clients for `bench-hostile`: connections that sit idle or send
//! half a request head and wait (slowloris), reopened whenever the node
//! closes them, and flooders sending request heads far past the limits.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Raise this process's open-file limit to at least `wanted` (within the
/// hard limit): the bench holds every hostile connection itself.
pub fn raise_fd_limit(wanted: u64) -> std::io::Result<()> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if limit.rlim_cur >= wanted {
        return Ok(());
    }
    limit.rlim_cur = wanted.min(limit.rlim_max);
    // SAFETY: as above.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if limit.rlim_cur < wanted {
        return Err(std::io::Error::other(format!(
            "the open-file limit is {} (hard), {wanted} wanted: raise it with `ulimit -n`",
            limit.rlim_max
        )));
    }
    Ok(())
}

/// The real binary on the demo source, its log sink quiet.
pub struct Node {
    child: Child,
    pub ingest: SocketAddr,
}

impl Node {
    pub fn start(bin: &Path, dir: &Path) -> anyhow::Result<Node> {
        let ingest = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        let config = dir.join("ankusa.yml");
        std::fs::write(
            &config,
            "log: {format: human, level: warn}\nrate_limits: {default: {rate: 1000000, burst: 1000000}}\n\
             sinks: {log: {component: log}}\nsources: {demo: {sinks: [log]}}\n",
        )?;
        let mut child = Command::new(bin)
            .arg("run")
            .arg("--config")
            .arg(&config)
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(["--ingest", &ingest.to_string(), "--admin", "127.0.0.1:0"])
            .env_remove("ANKUSA_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let stdout = child.stdout.take().ok_or_else(|| anyhow::anyhow!("no stdout"))?;
        let mut lines = BufReader::new(stdout).lines();
        loop {
            match lines.next() {
                Some(Ok(line)) if line.starts_with("ready;") => break,
                Some(Ok(_)) => {}
                _ => anyhow::bail!("ankusa run exited before it was ready: {:?}", child.wait()),
            }
        }
        // Keep reading so the node never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Ok(Node { child, ingest })
    }

    /// The node's peak resident memory so far (`VmHWM`), MiB.
    pub fn peak_rss_mib(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap_or_default();
        let kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0.0);
        kib / 1024.0
    }

    pub fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Connections held open against the node.
pub struct Idle {
    /// Connections open right now.
    pub open: Arc<AtomicU64>,
    /// Times the node closed one (each is reopened).
    pub closed: Arc<AtomicU64>,
    /// Connects that failed.
    pub refused: Arc<AtomicU64>,
}

impl Idle {
    /// Wait until `count` are open (or `limit` passes); how many are.
    pub async fn wait_open(&self, count: usize, limit: Duration) -> u64 {
        let started = Instant::now();
        while self.open.load(Ordering::Relaxed) < count as u64 && started.elapsed() < limit {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.open.load(Ordering::Relaxed)
    }
}

/// `count` connections, every other one sending half a request head and
/// nothing more; each reopened when the node closes it, until `stop`.
pub fn hold_idle(addr: SocketAddr, count: usize, stop: Arc<AtomicBool>) -> Idle {
    let idle = Idle { open: Arc::default(), closed: Arc::default(), refused: Arc::default() };
    for n in 0..count {
        let (open, closed, refused, stop) =
            (idle.open.clone(), idle.closed.clone(), idle.refused.clone(), stop.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let Ok(mut stream) = TcpStream::connect(addr).await else {
                    refused.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                if n % 2 == 1 {
                    let _ = stream.write_all(b"POST /webhooks/demo HTTP/1.1\r\nhost: slow\r\nx-wait: ").await;
                }
                open.fetch_add(1, Ordering::Relaxed);
                let mut buf = [0u8; 1024];
                let ended = tokio::select! {
                    _ = stream.read(&mut buf) => true,
                    () = wait_for(&stop) => false,
                };
                open.fetch_sub(1, Ordering::Relaxed);
                if ended {
                    closed.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    idle
}

async fn wait_for(stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Flooders: request heads of 4 000 headers (about 400 KiB), over and
/// over, each on a new connection.
pub struct Flood {
    /// Heads sent, and how the node answered them.
    sent: Arc<AtomicU64>,
    answered_431: Arc<AtomicU64>,
    answered_other: Arc<AtomicU64>,
    closed: Arc<AtomicU64>,
}

impl Flood {
    pub fn start(addr: SocketAddr, flooders: usize, stop: Arc<AtomicBool>) -> Flood {
        let flood = Flood {
            sent: Arc::default(),
            answered_431: Arc::default(),
            answered_other: Arc::default(),
            closed: Arc::default(),
        };
        let mut head = b"POST /webhooks/demo HTTP/1.1\r\nhost: flood\r\n".to_vec();
        for n in 0..4000 {
            head.extend_from_slice(format!("x-flood-{n}: {}\r\n", "f".repeat(80)).as_bytes());
        }
        head.extend_from_slice(b"content-length: 2\r\n\r\n{}");
        let head = Arc::new(head);
        for _ in 0..flooders {
            let (head, stop) = (head.clone(), stop.clone());
            let (sent, a431, other, closed) =
                (flood.sent.clone(), flood.answered_431.clone(), flood.answered_other.clone(), flood.closed.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let Ok(mut stream) = TcpStream::connect(addr).await else {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    };
                    sent.fetch_add(1, Ordering::Relaxed);
                    let _ = stream.write_all(&head).await;
                    let mut answer = [0u8; 64];
                    match stream.read(&mut answer).await {
                        Ok(n) if answer[..n].starts_with(b"HTTP/1.1 431") => a431.fetch_add(1, Ordering::Relaxed),
                        Ok(n) if n > 0 => other.fetch_add(1, Ordering::Relaxed),
                        _ => closed.fetch_add(1, Ordering::Relaxed),
                    };
                }
            });
        }
        flood
    }

    pub fn report(&self) {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed) as f64;
        crate::report("hostile.flood_heads_sent", get(&self.sent), "requests");
        crate::report("hostile.flood_answered_431", get(&self.answered_431), "requests");
        crate::report("hostile.flood_answered_other", get(&self.answered_other), "requests");
        crate::report("hostile.flood_closed_unanswered", get(&self.closed), "requests");
    }
}
