//! The production destinations, each in the same run as its baseline:
//!
//! - the mysql sink into the machine's MariaDB and the kafka sink into a
//!   Tansu broker of its own, one hook per call, against the same protocol
//!   code compiled natively on plain sockets;
//! - the redis sink over TLS (run by the host, `ankusa:sink/tcp-client`)
//!   against the same sink in plain text, on one Redis listening both ways;
//! - the cost of a new connection with and without the TLS handshake, as
//!   the host makes it;
//! - the sqs and s3 sinks into moto (an AWS API of the bench's own), one
//!   hook per call, against a native hyper client sending the same signed
//!   requests (the same form, key and SigV4 code) to the same server.
//!
//! `cargo run --release -p ankusa-bench --bin bench-destinations`

use std::cell::Cell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ankusa::runtime::capability::connector::{EgressConnector, default_tls_config, secure};
use ankusa::runtime::egress::{EgressCounter, EgressPolicy, Host, Resolver};
use ankusa::runtime::tls::TlsSettings;
use ankusa::runtime::{ComponentSource, EngineConfig, Hook, Outcome, Runtime, Sink, SinkLabel, SinkSpec};
use ankusa::sinktest::TestHook;
use ankusa_bench::{ratio, report};
use ankusa_sdk::aws::{SignRequest, Signer, amz_date, payload_sha256};
use ankusa_sdk::http::Url;
use ankusa_tests::kafka::Tansu;
use ankusa_tests::moto::Moto;
use ankusa_tests::mysql;
use ankusa_tests::tls::{self, Pki};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

/// Connections (instances, native threads) at once.
const CONCURRENCY: usize = 8;
const BODY_BYTES: usize = 1024;

/// Hooks per round (`ANKUSA_BENCH_HOOKS`, default 4 000).
fn hooks_per_round() -> usize {
    std::env::var("ANKUSA_BENCH_HOOKS").ok().and_then(|v| v.parse().ok()).unwrap_or(4_000)
}

fn make_hooks(round: &str, n: usize) -> Vec<Hook> {
    (0..n)
        .map(|i| {
            let id = format!("{round}-{i}");
            TestHook::new().id(&id).seq(i as u64 + 1).idempotency_key(&id).body(vec![b'x'; BODY_BYTES]).build()
        })
        .collect()
}

fn to_guest(hook: &Hook) -> ankusa_sdk::Hook {
    ankusa_sdk::Hook {
        id: hook.id.clone(),
        seq: hook.seq,
        source: hook.source.clone(),
        tenant: hook.tenant.clone(),
        received_at: hook.received_at,
        content_type: hook.content_type.clone(),
        headers: hook.headers.clone(),
        body: hook.body.clone(),
        sha256: hook.sha256.clone(),
        dedupe_key: hook.dedupe_key.clone(),
        idempotency_key: hook.idempotency_key.clone(),
        replay_id: hook.replay_id.clone(),
    }
}

/// Deliver `hooks` through `sink` from [`CONCURRENCY`] tasks, one per
/// call; deliveries per second.
async fn wasm_round(sink: Arc<Sink>, hooks: Vec<Hook>) -> anyhow::Result<f64> {
    let share = hooks.len().div_ceil(CONCURRENCY);
    let total = hooks.len();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for part in hooks.chunks(share).map(<[Hook]>::to_vec) {
        let sink = sink.clone();
        tasks.push(tokio::spawn(async move {
            for hook in &part {
                if let Outcome::Failed(f) = sink.deliver(hook, 1).await {
                    anyhow::bail!("delivery failed: {f}");
                }
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(total as f64 / started.elapsed().as_secs_f64())
}

/// Deliver `hooks` natively from [`CONCURRENCY`] threads, each with its own
/// connection from `open`, one per `send`; deliveries per second.
fn native_round<C>(
    hooks: &[ankusa_sdk::Hook],
    open: impl Fn() -> anyhow::Result<C> + Sync,
    send: impl Fn(&mut C, &ankusa_sdk::Hook) -> anyhow::Result<()> + Sync,
) -> anyhow::Result<f64> {
    let share = hooks.len().div_ceil(CONCURRENCY);
    let started = Instant::now();
    std::thread::scope(|scope| {
        let threads: Vec<_> = hooks
            .chunks(share)
            .map(|part| {
                let (open, send) = (&open, &send);
                scope.spawn(move || {
                    let mut connection = open()?;
                    for hook in part {
                        send(&mut connection, hook)?;
                    }
                    anyhow::Ok(())
                })
            })
            .collect();
        for thread in threads {
            thread.join().map_err(|_| anyhow::anyhow!("a native thread panicked"))??;
        }
        anyhow::Ok(())
    })?;
    Ok(hooks.len() as f64 / started.elapsed().as_secs_f64())
}

async fn load(
    runtime: &Runtime,
    component: &str,
    options: Value,
    allow: &str,
    tls: Option<TlsSettings>,
) -> anyhow::Result<Arc<Sink>> {
    let mut spec = SinkSpec::new(SinkLabel::new("bench", component), ComponentSource::Builtin(component.into()));
    spec.options = options;
    spec.egress.allow = vec![allow.to_string()];
    spec.limits.concurrency = CONCURRENCY;
    spec.tls = tls;
    Ok(Arc::new(runtime.load(spec).await?))
}

/// A sink one hook per call against its code natively, under `name`.
async fn versus_native<C>(
    name: &str,
    sink: Arc<Sink>,
    open: impl Fn() -> anyhow::Result<C> + Sync,
    send: impl Fn(&mut C, &ankusa_sdk::Hook) -> anyhow::Result<()> + Sync,
) -> anyhow::Result<()> {
    let n = hooks_per_round();
    wasm_round(sink.clone(), make_hooks(&format!("{name}-warm"), CONCURRENCY * 10)).await?;
    let wasm = wasm_round(sink, make_hooks(name, n)).await?;
    let native_hooks: Vec<_> = make_hooks(&format!("{name}-native"), n).iter().map(to_guest).collect();
    let native = tokio::task::block_in_place(|| native_round(&native_hooks, open, send))?;
    report(&format!("destinations.{name}.wasm_one_per_call"), wasm, "deliveries/s");
    report(&format!("destinations.{name}.native_one_per_call"), native, "deliveries/s");
    ratio(&format!("destinations.{name}.wasm_vs_native"), wasm, native);
    Ok(())
}

/// Builds (and signs) the native client's request for a hook.
type BuildRequest = Arc<dyn Fn(&ankusa_sdk::Hook) -> anyhow::Result<http::Request<Full<Bytes>>> + Send + Sync>;

/// Send one request per hook from [`CONCURRENCY`] tasks of a native
/// keep-alive hyper client, each built by `build` (signing included);
/// deliveries per second.
async fn native_http_round(hooks: Vec<ankusa_sdk::Hook>, build: BuildRequest) -> anyhow::Result<f64> {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let share = hooks.len().div_ceil(CONCURRENCY);
    let total = hooks.len();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for part in hooks.chunks(share).map(<[ankusa_sdk::Hook]>::to_vec) {
        let (client, build) = (client.clone(), build.clone());
        tasks.push(tokio::spawn(async move {
            for hook in &part {
                let response = client.request(build(hook)?).await?;
                let status = response.status();
                let body = response.into_body().collect().await?.to_bytes();
                anyhow::ensure!(status.is_success(), "{status}: {}", String::from_utf8_lossy(&body));
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(total as f64 / started.elapsed().as_secs_f64())
}

/// `method` to `path` on `base`'s origin, signed now with the SDK's SigV4
/// signer as the sinks sign it, for a native client.
fn signed_request(
    signer: &Signer,
    method: &str,
    base: &Url,
    path: &str,
    extra_headers: &[(&str, &str)],
    body: Vec<u8>,
    payload: &str,
) -> anyhow::Result<http::Request<Full<Bytes>>> {
    // The SDK's clock is a WASI import; natively, the system's.
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs();
    let date = amz_date(now);
    let mut headers = vec![("host", base.authority.as_str()), ("x-amz-date", date.as_str())];
    headers.extend_from_slice(extra_headers);
    let signing = SignRequest { method, path, query: &[], headers: &headers, payload_sha256: payload };
    let signed = signer.sign(&signing).map_err(anyhow::Error::msg)?;
    let mut request = http::Request::builder().method(method).uri(format!("http://{}{path}", base.authority));
    for (name, value) in &headers[1..] {
        request = request.header(*name, *value);
    }
    Ok(request.header("authorization", signed.authorization).body(Full::new(Bytes::from(body)))?)
}

/// An AWS sink one hook per call against the same requests from a native
/// client, under `name`.
async fn aws_versus_native(name: &str, sink: Arc<Sink>, build: BuildRequest) -> anyhow::Result<()> {
    let n = hooks_per_round();
    wasm_round(sink.clone(), make_hooks(&format!("{name}-warm"), CONCURRENCY * 10)).await?;
    let wasm = wasm_round(sink, make_hooks(name, n)).await?;
    let native_hooks: Vec<_> = make_hooks(&format!("{name}-native"), n).iter().map(to_guest).collect();
    let native = native_http_round(native_hooks, build).await?;
    report(&format!("destinations.{name}.wasm_one_per_call"), wasm, "deliveries/s");
    report(&format!("destinations.{name}.native_hyper_client"), native, "deliveries/s");
    ratio(&format!("destinations.{name}.wasm_vs_native"), wasm, native);
    Ok(())
}

fn failed(error: impl std::fmt::Debug) -> anyhow::Error {
    anyhow::anyhow!("{error:?}")
}

/// Mean time of `n` new connections to `port`, with or without the TLS
/// handshake, as the host's `tcp-client` makes them.
async fn connect_cost(port: u16, tls: Option<&TlsSettings>, n: u32) -> anyhow::Result<Duration> {
    let sink_tls = TlsSettings::build(tls, default_tls_config()?)?;
    let policy = Arc::new(EgressPolicy::new(&[format!("tcp://127.0.0.1:{port}")], &[])?);
    let connector =
        EgressConnector::new(policy, Resolver::System, Arc::new(EgressCounter::default()), sink_tls.http.clone());
    let handshake = sink_tls.tcp.clone().map(tokio_rustls::TlsConnector::from);
    let host = Host::parse("127.0.0.1");
    let timeout = Duration::from_secs(5);
    let started = Instant::now();
    for _ in 0..n {
        let tcp = connector.connect_tcp(&host, port, timeout).await?;
        if let Some(handshake) = &handshake {
            let name = rustls::pki_types::ServerName::try_from("localhost")?;
            drop(secure(handshake, tcp, name, "bench", timeout).await?);
        }
    }
    Ok(started.elapsed() / n)
}

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        let runtime = Runtime::new(EngineConfig::default(), None)?;
        let only = std::env::var("ANKUSA_BENCH_ONLY").unwrap_or_default();
        let wanted = |name: &str| only.is_empty() || only.split(',').any(|o| o == name);

        if wanted("tls") {
            let pki = Pki::new();
            let (server, plain_port) = tls::redis_with_plain_port(&pki);
            let settings = pki.settings(&pki.ca, false);
            // The stream lives on the bench's own server, gone when it stops.
            let options = |port: u16| json!({"url": format!("redis://localhost:{port}"), "stream": "bench-tls"});
            let n = hooks_per_round();
            let mut rates = Vec::new();
            for (label, port, tls) in [("plain", plain_port, None), ("tls", server.port, Some(settings.clone()))] {
                let allow = format!("tcp://localhost:{port}");
                let mut spec = SinkSpec::new(SinkLabel::new("bench", label), ComponentSource::Builtin("redis".into()));
                spec.options = options(port);
                spec.egress.allow = vec![allow];
                spec.egress.allow_networks = vec!["127.0.0.0/8".into(), "::1/128".into()];
                spec.limits.concurrency = CONCURRENCY;
                spec.tls = tls;
                let sink = Arc::new(runtime.load(spec).await?);
                wasm_round(sink.clone(), make_hooks(&format!("tls-warm-{label}"), CONCURRENCY * 10)).await?;
                let rate = wasm_round(sink, make_hooks(&format!("tls-{label}"), n)).await?;
                report(&format!("destinations.redis_{label}.wasm_one_per_call"), rate, "deliveries/s");
                rates.push(rate);
            }
            ratio("destinations.redis_tls_vs_plain", rates[1], rates[0]);
            let plain = connect_cost(plain_port, None, 200).await?;
            let secured = connect_cost(server.port, Some(&settings), 200).await?;
            report("destinations.connect_plain", plain.as_secs_f64() * 1e6, "us");
            report("destinations.connect_with_tls_handshake", secured.as_secs_f64() * 1e6, "us");
            report("destinations.tls_handshake", (secured.saturating_sub(plain)).as_secs_f64() * 1e6, "us");
            drop(server);
        }

        if wanted("mysql") {
            use ankusa_sink_mysql::deliver;
            mysql::set_up(None);
            let table = mysql::Table::new("bench");
            let options = json!({"url": mysql::url(mysql::ADDR), "table": table.name});
            let sink = load(&runtime, "mysql", options.clone(), "tcp://127.0.0.1:3306", None).await?;
            let parsed = ankusa_sink_mysql::options::Options::parse(&options.to_string()).map_err(failed)?;
            let open = || deliver::open(&parsed).map_err(failed);
            let send = |prepared: &mut deliver::Prepared, hook: &ankusa_sdk::Hook| {
                deliver::exchange(prepared, hook).map_err(failed)
            };
            versus_native("mysql", sink, open, send).await?;
        }

        if wanted("kafka") {
            use ankusa_sink_kafka::{client::Producer, deliver};
            let home = std::env::var_os("HOME").map(std::path::PathBuf::from).unwrap_or_else(std::env::temp_dir);
            let broker = Tansu::start(&home.join(".cache/ankusa"));
            broker.create_topic("bench", 3);
            let options = json!({"brokers": [broker.addr()], "topic": "bench", "idempotent": false});
            let sink = load(&runtime, "kafka", options.clone(), &format!("tcp://{}", broker.addr()), None).await?;
            let parsed = ankusa_sink_kafka::options::Options::parse(&options.to_string()).map_err(failed)?;
            let open = || {
                let producer = Producer::open(&parsed.brokers, &parsed.topic, parsed.idempotent, parsed.timeout);
                producer.map(|p| (p, Cell::new(0))).map_err(failed)
            };
            let send = |(producer, turn): &mut (Producer, Cell<usize>), hook: &ankusa_sdk::Hook| {
                deliver::exchange(&parsed, turn, producer, hook).map(|_| ()).map_err(failed)
            };
            versus_native("kafka", sink, open, send).await?;
        }

        if wanted("sqs") || wanted("s3") {
            let home = std::env::var_os("HOME").map(std::path::PathBuf::from).unwrap_or_else(std::env::temp_dir);
            let moto = Moto::start(&home.join(".cache/ankusa"));
            let credentials = |target: &str, url: String| {
                json!({target: url, "access_key_id": "AKIDEXAMPLE", "secret_access_key": "secret"})
            };
            let load_aws = |component: &'static str, options: Value| {
                let mut spec = SinkSpec::new(SinkLabel::new("bench", component), ComponentSource::Builtin(component.into()));
                spec.options = options;
                spec.egress.allow = vec![moto.endpoint()];
                spec.egress.allow_networks = vec!["127.0.0.0/8".into()];
                spec.limits.concurrency = CONCURRENCY;
                runtime.load(spec)
            };
            if wanted("sqs") {
                let options = credentials("queue_url", moto.create_queue("bench").await);
                let sink = Arc::new(load_aws("sqs", options.clone()).await?);
                let parsed = ankusa_sink_sqs::options::Options::parse(&options.to_string()).map_err(failed)?;
                let build = move |hook: &ankusa_sdk::Hook| {
                    let form = ankusa_sink_sqs::send_message(&parsed, hook).map_err(failed)?;
                    let payload = payload_sha256(form.as_bytes());
                    let url = &parsed.queue_url;
                    let form_type = [("content-type", "application/x-www-form-urlencoded; charset=utf-8")];
                    signed_request(&parsed.signer, "POST", url, &url.path_and_query, &form_type, form.into_bytes(), &payload)
                };
                aws_versus_native("sqs", sink, Arc::new(build)).await?;
            }
            if wanted("s3") {
                let options = credentials("bucket_url", moto.create_bucket("bench").await);
                let sink = Arc::new(load_aws("s3", options.clone()).await?);
                let parsed = ankusa_sink_s3::options::Options::parse(&options.to_string()).map_err(failed)?;
                let build = move |hook: &ankusa_sdk::Hook| {
                    let path = ankusa_sink_s3::object_path(&parsed, hook);
                    let payload = payload_sha256(&hook.body);
                    let headers = ankusa_sink_s3::put_headers(hook, &payload);
                    signed_request(&parsed.signer, "PUT", &parsed.bucket_url, &path, &headers, hook.body.clone(), &payload)
                };
                aws_versus_native("s3", sink, Arc::new(build)).await?;
            }
        }
        anyhow::Ok(())
    })
}
