//! The http sink against a local keep-alive receiver, compared with a native
//! hyper client sending the same requests with the same concurrency, in the
//! same run. The http sink sends by the one-call `ankusa:sink/http-client`;
//! beside it, the same sink as built against 0.1.0 (`tests/fixtures`), which
//! sends through `wasi:http`: the interface's before and after. And the
//! `post` test sink, the same request with nothing else, by each interface,
//! so the interface's own cost shows apart from the sink's. And the http
//! sink once more on hyper-util's pooled client behind the same egress
//! connector, against the host's own pool.
//!
//! `cargo run --release -p ankusa-bench --bin bench-http-sink`

use std::sync::Arc;
use std::time::{Duration, Instant};

use ankusa::runtime::builtin::artifact_dir;
use ankusa::runtime::http::{RecordedRequest, ReplyFuture, ScriptedReply, ScriptedUpstream, Upstream};
use ankusa::runtime::{ComponentSource, EngineConfig, Outcome, Runtime, Sink, SinkLabel, SinkSpec};
use ankusa::sinktest::TestHook;

/// Requests per round (`ANKUSA_BENCH_REQUESTS`, default 100 000).
fn requests() -> usize {
    std::env::var("ANKUSA_BENCH_REQUESTS").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000)
}

/// Answers `200` at once and keeps nothing.
struct InstantPeer;

impl ScriptedUpstream for InstantPeer {
    fn exchange(&self, _request: RecordedRequest) -> ReplyFuture {
        Box::pin(async {
            ScriptedReply::Respond {
                status: 200,
                headers: Vec::new(),
                body: Bytes::from_static(b"ok"),
                delay: Duration::ZERO,
            }
        })
    }
}
use ankusa_bench::{Receiver, cpu, ratio, report};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

const CONCURRENCY: usize = 32;
const BODY_BYTES: usize = 1024;
const ROUNDS: usize = 3;

/// What one round measured.
#[derive(Clone, Copy)]
struct Round {
    /// Requests per second.
    rate: f64,
    /// CPU of the whole process (client, runtime and receiver) per request, µs.
    cpu_us: f64,
}

impl Round {
    fn since(started: Instant, cpu_before: Duration) -> Round {
        let n = requests() as f64;
        Round { rate: n / started.elapsed().as_secs_f64(), cpu_us: (cpu() - cpu_before).as_secs_f64() * 1e6 / n }
    }

    /// The mean of several rounds.
    fn mean(rounds: &[Round]) -> Round {
        let n = rounds.len() as f64;
        Round {
            rate: rounds.iter().map(|r| r.rate).sum::<f64>() / n,
            cpu_us: rounds.iter().map(|r| r.cpu_us).sum::<f64>() / n,
        }
    }
}

async fn wasm_round(sink: Arc<Sink>) -> anyhow::Result<Round> {
    let (started, cpu_before) = (Instant::now(), cpu());
    let mut tasks = Vec::new();
    for _ in 0..CONCURRENCY {
        let sink = sink.clone();
        tasks.push(tokio::spawn(async move {
            let hook = TestHook::new().body(vec![b'x'; BODY_BYTES]).build();
            for _ in 0..requests() / CONCURRENCY {
                if let Outcome::Failed(f) = sink.deliver(&hook, 1).await {
                    anyhow::bail!("delivery failed: {f}");
                }
            }
            Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(Round::since(started, cpu_before))
}

async fn native_round(url: &str) -> anyhow::Result<Round> {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(CONCURRENCY)
        .pool_idle_timeout(Duration::from_secs(60))
        .build_http();
    let hook = TestHook::new().body(vec![b'x'; BODY_BYTES]).build();
    let (started, cpu_before) = (Instant::now(), cpu());
    let mut tasks = Vec::new();
    for _ in 0..CONCURRENCY {
        let (client, url, hook) = (client.clone(), url.to_string(), hook.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..requests() / CONCURRENCY {
                // The same request the http sink sends.
                let request = hyper::Request::post(&url)
                    .header("content-type", "application/json")
                    .header("content-length", hook.body.len())
                    .header("x-ankusa-id", &hook.id)
                    .header("x-ankusa-source", &hook.source)
                    .header("x-ankusa-tenant", &hook.tenant)
                    .header("x-ankusa-idempotency-key", &hook.idempotency_key)
                    .body(Full::new(Bytes::from(hook.body.clone())))?;
                let response = client.request(request).await?;
                let status = response.status();
                let _ = response.into_body().collect().await?;
                anyhow::ensure!(status.is_success(), "receiver answered {status}");
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(Round::since(started, cpu_before))
}

/// A sink of this benchmark, posting to the receiver with as many
/// deliveries in flight as there are callers.
fn spec(name: &str, component: ComponentSource, receiver: &Receiver) -> SinkSpec {
    spec_with(name, component, receiver, serde_json::json!({"url": receiver.url()}))
}

fn spec_with(name: &str, component: ComponentSource, receiver: &Receiver, options: serde_json::Value) -> SinkSpec {
    let mut spec = SinkSpec::new(SinkLabel::new("bench", name), component);
    spec.options = options;
    spec.egress.allow = vec![format!("http://{}", receiver.addr)];
    spec.limits.concurrency = CONCURRENCY;
    spec
}

/// A sink's round beside the native client's: its rate and CPU per
/// delivery, and both as ratios (CPU as native over wasm, which the
/// machine's other tenants disturb less than rates).
fn report_against(name: &str, round: Round, native: Round) {
    report(name, round.rate, "deliveries/s");
    report(&format!("{name}_cpu"), round.cpu_us, "us/delivery");
    ratio(&format!("{name}_vs_native"), round.rate, native.rate);
    ratio(&format!("{name}_vs_native_cpu"), native.cpu_us, round.cpu_us);
}

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    let receiver = Receiver::start()?;
    let url = receiver.url();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        let runtime = Runtime::new(EngineConfig::default(), None)?;
        let http = || ComponentSource::Builtin("http".into());
        let sink = Arc::new(runtime.load(spec("http", http(), &receiver)).await?);
        let post_wasm = || ComponentSource::Path(artifact_dir().join("post.wasm"));
        let post = Arc::new(runtime.load(spec("post", post_wasm(), &receiver)).await?);
        let options = serde_json::json!({"url": receiver.url(), "via": "wasi-http"});
        let post_wasi = Arc::new(runtime.load(spec_with("post-wasi", post_wasm(), &receiver, options)).await?);
        let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/wit-0.1.0/http.wasm");
        let http_010 = Arc::new(runtime.load(spec("http-0.1.0", ComponentSource::Path(fixture), &receiver)).await?);
        // The same http sink with hyper-util's pooled client behind the
        // egress connector instead of the host's own pool.
        let mut shared = spec("http-shared-client", http(), &receiver);
        shared.upstream = Upstream::NetworkSharedClient;
        let shared = Arc::new(runtime.load(shared).await?);

        // For profiling one side alone: ANKUSA_BENCH_ONLY=native, wasm or instant.
        let only = std::env::var("ANKUSA_BENCH_ONLY").unwrap_or_default();
        let (run_native, run_wasm) = (only.is_empty() || only == "native", only.is_empty() || only == "wasm");
        // Warm both paths (connections, instances) before measuring.
        let unmeasured = Round { rate: f64::NAN, cpu_us: f64::NAN };
        let (mut native, mut wasm, mut minimal) = (vec![unmeasured], vec![unmeasured], vec![unmeasured]);
        let (mut wasm_010, mut minimal_wasi, mut wasm_shared) = (vec![unmeasured], vec![unmeasured], vec![unmeasured]);
        if run_native {
            native_round(&url).await?;
            native = Vec::new();
        }
        if run_wasm {
            wasm_round(sink.clone()).await?;
            wasm = Vec::new();
            wasm_round(post.clone()).await?;
            minimal = Vec::new();
            wasm_round(http_010.clone()).await?;
            wasm_010 = Vec::new();
            wasm_round(post_wasi.clone()).await?;
            minimal_wasi = Vec::new();
            wasm_round(shared.clone()).await?;
            wasm_shared = Vec::new();
        }
        for _ in 0..ROUNDS {
            if run_native {
                native.push(native_round(&url).await?);
            }
            if run_wasm {
                wasm.push(wasm_round(sink.clone()).await?);
                minimal.push(wasm_round(post.clone()).await?);
                wasm_010.push(wasm_round(http_010.clone()).await?);
                minimal_wasi.push(wasm_round(post_wasi.clone()).await?);
                wasm_shared.push(wasm_round(shared.clone()).await?);
            }
        }
        let (native, wasm, minimal) = (Round::mean(&native), Round::mean(&wasm), Round::mean(&minimal));
        let (wasm_010, minimal_wasi) = (Round::mean(&wasm_010), Round::mean(&minimal_wasi));
        let wasm_shared = Round::mean(&wasm_shared);
        // The same sink against a peer that answers instantly in memory:
        // what the guest and the wasi:http layer cost without any network.
        let mut null = spec("http-null", http(), &receiver);
        null.upstream = Upstream::Scripted(Arc::new(InstantPeer));
        let null = Arc::new(runtime.load(null).await?);
        wasm_round(null.clone()).await?;
        let null = wasm_round(null).await?;
        report("http_sink.wasm_http_sink_instant_peer", null.rate, "deliveries/s");
        report("http_sink.wasm_http_sink_instant_peer_cpu", null.cpu_us, "us/delivery");
        report("http_sink.native_hyper_client", native.rate, "requests/s");
        report("http_sink.native_hyper_client_cpu", native.cpu_us, "us/request");
        // The http sink by the one-call client; before, the same sink built
        // against 0.1.0, through wasi:http; and the minimal post by each.
        report_against("http_sink.wasm_http_sink", wasm, native);
        report_against("http_sink.wasm_http_sink_0_1_0_wasi_http", wasm_010, native);
        // The host's pool against hyper-util's client, the same sink.
        report_against("http_sink.wasm_http_sink_hyper_util_client", wasm_shared, native);
        ratio("http_sink.own_pool_vs_hyper_util_client", wasm.rate, wasm_shared.rate);
        ratio("http_sink.own_pool_vs_hyper_util_client_cpu", wasm_shared.cpu_us, wasm.cpu_us);
        report_against("http_sink.wasm_minimal_post", minimal, native);
        report_against("http_sink.wasm_minimal_post_wasi_http", minimal_wasi, native);
        report(
            "http_sink.receiver_total",
            receiver.received.load(std::sync::atomic::Ordering::Relaxed) as f64,
            "requests",
        );
        anyhow::Ok(())
    })
}
