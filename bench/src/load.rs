//! A load generator for the edge: closed-loop (N keep-alive connections,
//! each sending as soon as its last request was answered) or open-loop (a
//! fixed rate, each request scheduled in advance and its latency measured
//! from that scheduled time, so a slow server cannot hide queueing). Only
//! `201` counts as success; every ack's `id,sha256` is recorded so a
//! checker can verify the store holds exactly those bytes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::sync::Mutex;

#[derive(Clone, Debug)]
pub struct LoadConfig {
    pub addr: SocketAddr,
    pub path: String,
    pub connections: usize,
    /// Requests per second (open loop); `None`: closed loop.
    pub rate: Option<f64>,
    pub duration: Duration,
    pub body_bytes: usize,
}

/// One acknowledged request.
#[derive(Clone, Debug)]
pub struct Ack {
    pub id: String,
    pub sha256: String,
}

#[derive(Debug, Default)]
pub struct LoadReport {
    pub acks: Vec<Ack>,
    /// Answers other than 201, by status (0: transport errors).
    pub failures: Vec<(u16, u64)>,
    pub latencies: Vec<Duration>,
    pub elapsed: Duration,
}

impl LoadReport {
    pub fn acks_per_sec(&self) -> f64 {
        self.acks.len() as f64 / self.elapsed.as_secs_f64()
    }

    /// The `p`-th latency percentile in ms (latencies must be sorted).
    pub fn percentile_ms(&self, p: f64) -> f64 {
        if self.latencies.is_empty() {
            return 0.0;
        }
        let i = ((self.latencies.len() as f64 * p).ceil() as usize).clamp(1, self.latencies.len()) - 1;
        self.latencies[i].as_secs_f64() * 1e3
    }

    /// Two runs that went on at the same time, as one report.
    pub fn merge(self, other: LoadReport) -> LoadReport {
        let mut latencies = self.latencies;
        latencies.extend(other.latencies);
        latencies.sort_unstable();
        let mut acks = self.acks;
        acks.extend(other.acks);
        let mut failures = self.failures;
        failures.extend(other.failures);
        LoadReport { acks, failures, latencies, elapsed: self.elapsed.max(other.elapsed) }
    }

    /// Two runs one after the other, as one report.
    pub fn then(self, other: LoadReport) -> LoadReport {
        let elapsed = self.elapsed + other.elapsed;
        LoadReport { elapsed, ..self.merge(other) }
    }

    /// `<name>.acks_per_sec`, `.p50`, `.p99` and `.non_201` lines.
    pub fn print(&self, name: &str) {
        crate::report(&format!("{name}.acks_per_sec"), self.acks_per_sec(), "acks/s");
        crate::report(&format!("{name}.p50"), self.percentile_ms(0.50), "ms");
        crate::report(&format!("{name}.p99"), self.percentile_ms(0.99), "ms");
        let failed: u64 = self.failures.iter().map(|(_, n)| n).sum();
        crate::report(&format!("{name}.non_201"), failed as f64, "requests");
    }

    /// `id,sha256` lines of every ack.
    pub fn ack_lines(&self) -> String {
        self.acks.iter().map(|a| format!("{},{}\n", a.id, a.sha256)).collect()
    }
}

fn body(n: u64, size: usize) -> Bytes {
    let mut body = format!("{{\"n\":{n},\"pad\":\"").into_bytes();
    body.resize(size.saturating_sub(2).max(body.len()), b'x');
    body.extend_from_slice(b"\"}");
    Bytes::from(body)
}

/// The part of a `201` body the load generator keeps.
#[derive(serde::Deserialize)]
struct AckBody {
    id: String,
}

#[derive(Default)]
struct Shared {
    acks: Vec<Ack>,
    failures: std::collections::BTreeMap<u16, u64>,
    latencies: Vec<Duration>,
}

/// Run the load and collect what came back.
pub async fn run(config: LoadConfig) -> anyhow::Result<LoadReport> {
    let shared = Arc::new(Mutex::new(Shared::default()));
    let started = Instant::now();
    let end = started + config.duration;
    // Open loop: one schedule shared by every connection.
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = Vec::new();
    for connection in 0..config.connections {
        let config = config.clone();
        let shared = shared.clone();
        let next = next.clone();
        tasks.push(tokio::spawn(async move {
            let stream = tokio::net::TcpStream::connect(config.addr).await?;
            stream.set_nodelay(true)?;
            let (mut sender, conn) = http1::handshake::<_, Full<Bytes>>(TokioIo::new(stream)).await?;
            tokio::spawn(conn);
            let mut local = Shared::default();
            let mut n = connection as u64;
            loop {
                let scheduled = match config.rate {
                    Some(rate) => {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let at = started + Duration::from_secs_f64(i as f64 / rate);
                        if at >= end {
                            break;
                        }
                        tokio::time::sleep_until(at.into()).await;
                        at
                    }
                    None if Instant::now() >= end => break,
                    None => Instant::now(),
                };
                let payload = body(n, config.body_bytes);
                n += config.connections as u64;
                let sha = ankusa::digest::sha256_hex(&payload);
                let request = hyper::Request::post(&config.path)
                    .header("host", "bench")
                    .header("content-type", "application/json")
                    .body(Full::new(payload))?;
                match sender.send_request(request).await {
                    Ok(response) => {
                        let status = response.status().as_u16();
                        let bytes = response.into_body().collect().await?.to_bytes();
                        local.latencies.push(scheduled.elapsed());
                        if status == 201 {
                            let answer: AckBody = serde_json::from_slice(&bytes)?;
                            local.acks.push(Ack { id: answer.id, sha256: sha });
                        } else {
                            *local.failures.entry(status).or_default() += 1;
                        }
                    }
                    Err(_) => {
                        *local.failures.entry(0).or_default() += 1;
                        break;
                    }
                }
            }
            let mut all = shared.lock().await;
            all.acks.extend(local.acks);
            all.latencies.extend(local.latencies);
            for (status, count) in local.failures {
                *all.failures.entry(status).or_default() += count;
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let elapsed = started.elapsed();
    let shared = Arc::try_unwrap(shared).map_err(|_| anyhow::anyhow!("load tasks still running"))?.into_inner();
    let mut latencies = shared.latencies;
    latencies.sort_unstable();
    Ok(LoadReport { acks: shared.acks, failures: shared.failures.into_iter().collect(), latencies, elapsed })
}
