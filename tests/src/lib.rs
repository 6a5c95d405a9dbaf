//! Helpers shared by the end-to-end, fault and plugin tests: a real local
//! HTTP receiver, an independent Standard Webhooks verifier, and the paths
//! of the built binary and guest components.

pub mod binary;
pub mod book;
pub mod browser;
pub mod crash;
pub mod examples;
pub mod fault_proxy;
pub mod fleet;
pub mod kafka;
pub mod moto;
pub mod mqtt;
pub mod mysql;
pub mod nats;
pub mod nats_cluster;
pub mod nemesis;
pub mod postgres;
pub mod rabbitmq;
pub mod receiver;
pub mod redis;
pub mod relay;
pub mod server;
pub mod standard_webhooks;
pub mod tls;
pub mod tmpfs;

use std::path::PathBuf;

use ankusa_harness::{Harness, SinkUnderTest};

/// A guest component this build compiled (`log`, `http`, `misbehave`).
pub fn guest_wasm(name: &str) -> PathBuf {
    ankusa::runtime::builtin::artifact_dir().join(format!("{name}.wasm"))
}

/// The `ankusa` binary next to this test executable (built by
/// `cargo test --workspace`, which builds the host's binary for its own
/// integration tests).
pub fn ankusa_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>/deps");
    let bin = dir.join("ankusa");
    assert!(bin.is_file(), "{} is missing: run `cargo build -p ankusa` or `cargo test --workspace`", bin.display());
    bin
}

/// A directory with a file written into it, removed on drop.
pub fn temp_file(name: &str, contents: &[u8]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(name);
    std::fs::write(&path, contents).expect("write temp file");
    (dir, path)
}

/// The built-in http sink with `options`, on the real network and clocks,
/// allowed to reach `allow` (and the private `networks`).
pub async fn networked_http_sink(options: serde_json::Value, allow: &[String], networks: &[&str]) -> SinkUnderTest {
    networked_sink(HttpPath::OneCall, options, allow, networks).await
}

/// The two ways a sink makes HTTP requests through the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HttpPath {
    /// `ankusa:sink/http-client` (the shipped http sink).
    OneCall,
    /// `wasi:http/outgoing-handler` (the `post` test sink with
    /// `"via": "wasi-http"`).
    WasiHttp,
}

pub const HTTP_PATHS: [HttpPath; 2] = [HttpPath::OneCall, HttpPath::WasiHttp];

/// A sink that POSTs each hook to `options.url` by `path`, on the real
/// network, allowed `allow` and `networks`.
pub async fn networked_sink(
    path: HttpPath,
    mut options: serde_json::Value,
    allow: &[String],
    networks: &[&str],
) -> SinkUnderTest {
    let builder = match path {
        HttpPath::OneCall => Harness::shared().builtin("http"),
        HttpPath::WasiHttp => {
            options["via"] = "wasi-http".into();
            Harness::shared().wasm(guest_wasm("post"))
        }
    };
    builder
        .options(options)
        .allow(allow.iter().cloned())
        .allow_networks(networks.iter().copied())
        .real_network()
        .real_clock()
        .load()
        .await
        .expect("the http sink loads")
}

/// A name no other test (of this run or another) uses:
/// `<prefix><sep><pid><sep><nanos><sep><n><sep><what>`.
pub fn unique_name(prefix: &str, sep: &str, what: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or_default();
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}{sep}{}{sep}{nanos}{sep}{n}{sep}{what}", std::process::id())
}

/// Lower-case hex SHA-256 of a file.
pub fn sha256_file(path: &std::path::Path) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(std::fs::read(path).expect("read file")))
}

/// A `default`-tenant source with no verification, its sinks at indexes
/// 0, 1, ... in order.
pub fn plain_source(name: &str, sinks: Vec<std::sync::Arc<ankusa::runtime::Sink>>) -> ankusa::source::Source {
    ankusa::source::Source {
        name: name.into(),
        tenant: "default".into(),
        verifier: None,
        on_verify_failure: Default::default(),
        dedupe: None,
        sinks: sinks
            .into_iter()
            .enumerate()
            .map(|(i, sink)| ankusa::source::SinkBinding {
                index: i as u16,
                sink,
                ordering: None,
                transforms: Vec::new().into(),
            })
            .collect(),
        forward_headers: Default::default(),
    }
}

/// A shipped TCP sink (`redis`, `nats`, `postgres`) with `options`, allowed
/// to connect to `allow` (`tcp://ip:port` entries).
pub async fn tcp_sink<S: AsRef<str>>(name: &str, options: serde_json::Value, allow: &[S]) -> SinkUnderTest {
    Harness::shared()
        .builtin(name)
        .options(options)
        .allow(allow.iter().map(|a| a.as_ref().to_string()))
        .load()
        .await
        .unwrap_or_else(|e| panic!("the {name} sink loads: {e}"))
}

/// Assert that the shipped sink `name` is classed `denied` under each of
/// `allows`, none of which admits the server its `options` name.
pub async fn assert_denied(name: &str, options: serde_json::Value, allows: &[&[&str]]) {
    for allow in allows {
        let sink = tcp_sink(name, options.clone(), allow).await;
        let outcome = sink.deliver(ankusa_harness::TestHook::new(), 1).await;
        let denied =
            matches!(&outcome, ankusa_harness::Outcome::Failed(f) if f.class == ankusa_harness::ErrorClass::Denied);
        assert!(denied, "{name} under allow {allow:?}: {outcome:?}");
    }
}

/// Assert that the shipped TCP sink `name`, pointed by `options` at a server
/// that never answers, fails as transient soon after its `timeout_ms`
/// (300 ms here) rather than at the attempt's deadline.
pub async fn assert_gives_up_on_a_silent_server(
    name: &str,
    options: impl FnOnce(std::net::SocketAddr) -> serde_json::Value,
) {
    let (addr, _server) = relay::silent_server().await;
    let mut options = options(addr);
    options["timeout_ms"] = 300.into();
    let sink = tcp_sink(name, options, &[format!("tcp://{addr}")]).await;
    let started = std::time::Instant::now();
    let outcome = sink.deliver(ankusa_harness::TestHook::new(), 1).await;
    let transient = matches!(&outcome, ankusa_harness::Outcome::Failed(f)
        if f.class == ankusa_harness::ErrorClass::Transient && f.reason.contains("did not answer"));
    assert!(transient, "{name}: {outcome:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "{name} waited past its timeout");
}
