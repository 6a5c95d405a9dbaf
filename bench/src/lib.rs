//! Shared pieces of the benchmarks: the report format and a minimal
//! keep-alive HTTP receiver.
//!
//! Every benchmark prints `name: value unit` lines, and ratios against a
//! baseline measured in the same run, so figures from a noisy machine can
//! still be compared.

pub mod fill;
pub mod floor;
pub mod hostile;
pub mod load;
pub mod soak;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// User + system CPU of this process so far (every thread), at the
/// kernel's 10 ms tick: a run's CPU per operation is steadier than its
/// rate on a machine whose other tenants come and go.
pub fn cpu() -> std::time::Duration {
    std::time::Duration::from_millis(cpu_ticks("/proc/self/stat") * 10)
}

/// User + system CPU of process `pid` so far (every thread), at the
/// kernel's 10 ms tick.
pub fn cpu_of_process(pid: u32) -> std::time::Duration {
    std::time::Duration::from_millis(cpu_ticks(format!("/proc/{pid}/stat")) * 10)
}

/// User + system clock ticks of the `stat` file at `path` (0 if unreadable).
fn cpu_ticks(path: impl AsRef<std::path::Path>) -> u64 {
    let stat = std::fs::read_to_string(path).unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    fields.get(11).and_then(|u| u.parse::<u64>().ok()).unwrap_or(0)
        + fields.get(12).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0)
}

/// User + system CPU of this process's threads whose name starts with
/// `prefix` (a load generator on a runtime of its own), so a figure can
/// leave the client's share out.
pub fn cpu_of_threads(prefix: &str) -> std::time::Duration {
    let mut ticks = 0u64;
    for task in std::fs::read_dir("/proc/self/task").into_iter().flatten().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !comm.starts_with(prefix) {
            continue;
        }
        ticks += cpu_ticks(task.path().join("stat"));
    }
    std::time::Duration::from_millis(ticks * 10)
}

/// The `ankusa` binary a benchmark drives: `given`, else the one beside
/// this executable (a `cargo build --release --workspace --bins` puts
/// both there).
pub fn ankusa_bin(given: Option<std::path::PathBuf>) -> anyhow::Result<std::path::PathBuf> {
    let bin = match given {
        Some(bin) => bin,
        None => std::env::current_exe()?.with_file_name("ankusa"),
    };
    anyhow::ensure!(bin.is_file(), "{} is missing: build it with `cargo build --release -p ankusa`", bin.display());
    Ok(bin)
}

/// Start the release binary on `yaml`, with its config and data under
/// `dir` in folders named after `name`, listening on free loopback ports.
pub async fn start_node(
    bin: &std::path::Path,
    dir: &std::path::Path,
    name: &str,
    yaml: &str,
) -> ankusa_tests::binary::RunningNode {
    let config_dir = dir.join(format!("config-{name}"));
    std::fs::create_dir_all(&config_dir).expect("config dir");
    let config = ankusa_tests::binary::write_config(&config_dir, yaml);
    ankusa_tests::binary::RunningNode::start_bin(bin, &config, &dir.join(format!("data-{name}")), &[], "127.0.0.1:0")
        .await
}

/// Print one figure.
pub fn report(name: &str, value: f64, unit: &str) {
    println!("{name}: {value:.2} {unit}");
}

/// Print a ratio of two figures measured in this run.
pub fn ratio(name: &str, numerator: f64, denominator: f64) {
    println!("{name}: {:.3} ratio", numerator / denominator);
}

/// A receiver that reads each body and answers `200 ok`, on its own
/// single-threaded runtime so client and server do not share workers.
pub struct Receiver {
    pub addr: SocketAddr,
    pub received: Arc<AtomicU64>,
}

impl Receiver {
    pub fn start() -> anyhow::Result<Receiver> {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let received = Arc::new(AtomicU64::new(0));
        let counter = received.clone();
        std::thread::Builder::new().name("bench-receiver".into()).spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("receiver runtime");
            rt.block_on(async move {
                let listener = TcpListener::from_std(std_listener).expect("receiver listener");
                while let Ok((stream, _)) = listener.accept().await {
                    let _ = stream.set_nodelay(true);
                    let counter = counter.clone();
                    tokio::spawn(async move {
                        let service = service_fn(move |req: Request<Incoming>| {
                            let counter = counter.clone();
                            async move {
                                let _ = req.into_body().collect().await;
                                counter.fetch_add(1, Ordering::Relaxed);
                                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
                            }
                        });
                        let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
                    });
                }
            });
        })?;
        Ok(Receiver { addr, received })
    }

    /// Where the benchmarks post.
    pub fn url(&self) -> String {
        format!("http://{}/hooks", self.addr)
    }
}
