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

pub struct Cluster {
    pub servers: Vec<Server>,
    /// Everything the servers logged.
    pub log: Output,
    _dir: tempfile::TempDir,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("its address").port()
}

impl Cluster {
    /// `size` servers clustered with each other; returns once JetStream
    /// takes an R`size` stream.
    pub async fn start(size: usize) -> Cluster {
        let dir = tempfile::tempdir().expect("cluster dir");
        let servers = (0..size)
            .map(|i| Server {
                name: format!("n{i}"),
                port: free_port(),
                cluster_port: free_port(),
                dir: dir.path().join(format!("n{i}")),
                child: None,
            })
            .collect();
        let mut cluster = Cluster { servers, log: Output::default(), _dir: dir };
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
        let server = &mut self.servers[i];
        let mut command = Command::new("nats-server");
        command
            .args(["-a", "127.0.0.1", "-p", &server.port.to_string(), "-js", "-n", &server.name])
            .arg("-sd")
            .arg(&server.dir)
            .args(["--cluster_name", "ankusa-test"])
            .args(["--cluster", &format!("nats://127.0.0.1:{}", server.cluster_port)])
            .args(["--routes", &routes.join(",")])
            // Clients keep to the servers they were given: a node reaching
            // NATS through a fault proxy never learns a way around it.
            .arg("--no_advertise")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("nats-server starts (Debian package nats-server)");
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
