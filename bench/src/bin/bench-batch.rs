//! Batched delivery into the machine's PostgreSQL, Redis, NATS JetStream
//! and RabbitMQ, in the same run: each shipped sink one hook per call
//! (`deliver`), the same sink a batch per call (`deliver-batch`), and the
//! same protocol code compiled natively writing the same batches on plain
//! sockets (the baseline the sandbox is measured against). The mqtt sink,
//! which publishes one hook per call, against its own code natively doing
//! the same into the machine's Mosquitto. Every side runs the same number
//! of connections at once.
//!
//! `cargo run --release -p ankusa-bench --bin bench-batch`

use std::sync::Arc;
use std::time::{Duration, Instant};

use ankusa::runtime::{ComponentSource, EngineConfig, Hook, Outcome, Runtime, Sink, SinkLabel, SinkSpec};
use ankusa::sinktest::TestHook;
use ankusa_bench::{ratio, report};
use ankusa_tests::{mqtt, nats, postgres, rabbitmq, redis};
use serde_json::{Value, json};

/// Connections (instances, native threads) at once.
const CONCURRENCY: usize = 8;
/// Hooks per batch.
const BATCH: usize = 100;
const BODY_BYTES: usize = 1024;

/// Hooks per round delivered a batch at a time (`ANKUSA_BENCH_HOOKS`,
/// default 40 000); one at a time, a tenth of that.
fn batched_hooks() -> usize {
    std::env::var("ANKUSA_BENCH_HOOKS").ok().and_then(|v| v.parse().ok()).unwrap_or(40_000)
}

/// `n` hooks with ids no other round uses (the postgres sink is idempotent
/// on the id: a repeated id would cost less).
fn make_hooks(round: &str, n: usize) -> Vec<Hook> {
    (0..n)
        .map(|i| {
            let id = format!("{round}-{i}");
            TestHook::new().id(&id).seq(i as u64 + 1).idempotency_key(&id).body(vec![b'x'; BODY_BYTES]).build()
        })
        .collect()
}

/// Deliver `hooks` through `sink` from [`CONCURRENCY`] tasks, `per_call`
/// hooks per call; deliveries per second.
async fn wasm_round(sink: Arc<Sink>, hooks: Vec<Hook>, per_call: usize) -> anyhow::Result<f64> {
    let share = hooks.len().div_ceil(CONCURRENCY);
    let started = Instant::now();
    let mut tasks = Vec::new();
    let total = hooks.len();
    for part in hooks.chunks(share).map(<[Hook]>::to_vec) {
        let sink = sink.clone();
        tasks.push(tokio::spawn(async move {
            for call in part.chunks(per_call) {
                let outcomes = if per_call == 1 {
                    vec![sink.deliver(&call[0], 1).await]
                } else {
                    let attempts = vec![1; call.len()];
                    sink.deliver_batch_within(call, &attempts, Duration::from_secs(30)).await
                };
                if let Some(Outcome::Failed(f)) = outcomes.iter().find(|o| **o != Outcome::Delivered) {
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

/// A hook as the sinks' own code takes it (compiled natively here).
type GuestHook = ankusa_sdk::Hook;

fn to_guest(hook: &Hook) -> GuestHook {
    GuestHook {
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

/// Deliver `hooks` natively from [`CONCURRENCY`] threads, each with its own
/// connection from `open`, [`BATCH`] hooks per `send`; deliveries per second.
fn native_round<C>(
    hooks: &[GuestHook],
    open: impl Fn() -> anyhow::Result<C> + Sync,
    send: impl Fn(&mut C, &[GuestHook]) -> anyhow::Result<()> + Sync,
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
                    for call in part.chunks(BATCH) {
                        send(&mut connection, call)?;
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

/// Every answer of a native batch must be a success.
fn all_ok<R, E: std::fmt::Debug>(
    replies: Result<Vec<Result<R, E>>, E>,
    sent: usize,
    ok: impl Fn(R) -> bool,
) -> anyhow::Result<()> {
    let replies = replies.map_err(|e| anyhow::anyhow!("native batch failed: {e:?}"))?;
    anyhow::ensure!(replies.len() == sent, "native batch answered {} of {sent}", replies.len());
    for reply in replies {
        let reply = reply.map_err(|e| anyhow::anyhow!("native delivery failed: {e:?}"))?;
        anyhow::ensure!(ok(reply), "native delivery refused");
    }
    Ok(())
}

/// Options the sink's own parser refused.
fn refused(error: ankusa_sdk::ConfigError) -> anyhow::Error {
    anyhow::anyhow!("options: {}", error.message)
}

async fn load(runtime: &Runtime, component: &str, options: Value, allow: &str) -> anyhow::Result<Arc<Sink>> {
    let mut spec = SinkSpec::new(SinkLabel::new("bench", component), ComponentSource::Builtin(component.into()));
    spec.options = options;
    spec.egress.allow = vec![allow.to_string()];
    spec.limits.concurrency = CONCURRENCY;
    spec.limits.batch.max_hooks = BATCH;
    Ok(Arc::new(runtime.load(spec).await?))
}

/// One destination's three rounds, reported under `name`.
async fn measure<C>(
    name: &str,
    sink: Arc<Sink>,
    open: impl Fn() -> anyhow::Result<C> + Sync,
    send: impl Fn(&mut C, &[GuestHook]) -> anyhow::Result<()> + Sync,
) -> anyhow::Result<()> {
    let n = batched_hooks();
    anyhow::ensure!(sink.batch().is_some(), "the {name} sink does not export deliver-batch");
    // Warm instances and connections.
    wasm_round(sink.clone(), make_hooks(&format!("{name}-warm"), CONCURRENCY * BATCH), BATCH).await?;
    let single = wasm_round(sink.clone(), make_hooks(&format!("{name}-single"), n / 10), 1).await?;
    let batched = wasm_round(sink.clone(), make_hooks(&format!("{name}-batch"), n), BATCH).await?;
    let native_hooks: Vec<GuestHook> = make_hooks(&format!("{name}-native"), n).iter().map(to_guest).collect();
    let native = tokio::task::block_in_place(|| native_round(&native_hooks, &open, &send))?;
    report(&format!("batch.{name}.wasm_one_per_call"), single, "deliveries/s");
    report(&format!("batch.{name}.wasm_batch_{BATCH}"), batched, "deliveries/s");
    report(&format!("batch.{name}.native_batch_{BATCH}"), native, "deliveries/s");
    ratio(&format!("batch.{name}.batch_vs_one_per_call"), batched, single);
    ratio(&format!("batch.{name}.wasm_batch_vs_native_batch"), batched, native);
    Ok(())
}

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        let runtime = Runtime::new(EngineConfig::default(), None)?;
        let only = std::env::var("ANKUSA_BENCH_ONLY").unwrap_or_default();
        let wanted = |name: &str| only.is_empty() || only.split(',').any(|o| o == name);

        if wanted("postgres") {
            use ankusa_sink_postgres::{client, deliver};
            let table = postgres::Table::new("bench");
            let options = json!({"url": format!("postgres://postgres@{}/test", postgres::ADDR), "table": table.name});
            let sink = load(&runtime, "postgres", options.clone(), "tcp://127.0.0.1:5432").await?;
            let parsed = ankusa_sink_postgres::options::Options::parse(&options.to_string()).map_err(refused)?;
            let insert = deliver::insert_statement(&parsed.table);
            let open = || {
                let login = client::Login {
                    user: &parsed.user,
                    password: parsed.password.as_deref(),
                    database: &parsed.database,
                    nonce: "benchnonce0123456789".into(),
                };
                client::Connection::open(&parsed.addr, &login, parsed.timeout).map_err(|e| anyhow::anyhow!("{e:?}"))
            };
            let send = |connection: &mut client::Connection, hooks: &[GuestHook]| {
                all_ok(deliver::exchange_batch(&parsed.table, &insert, connection, hooks), hooks.len(), |()| true)
            };
            measure("postgres", sink, open, send).await?;
        }

        if wanted("redis") {
            use ankusa_sink_redis::client::Reply;
            use ankusa_sink_redis::{client, deliver};
            let stream = redis::Scratch::new("bench");
            let options = json!({"url": format!("redis://{}", redis::ADDR), "stream": stream.key});
            let sink = load(&runtime, "redis", options.clone(), "tcp://127.0.0.1:6379").await?;
            let parsed = ankusa_sink_redis::options::Options::parse(&options.to_string()).map_err(refused)?;
            let open = || client::open(&parsed).map_err(|e| anyhow::anyhow!("{e:?}"));
            let send = |connection: &mut client::Connection, hooks: &[GuestHook]| {
                all_ok(deliver::exchange_batch(&parsed, connection, hooks), hooks.len(), |r| {
                    matches!(r, Reply::Bulk(Some(_)))
                })
            };
            measure("redis", sink, open, send).await?;
        }

        if wanted("nats") {
            use ankusa_sink_nats::{client, deliver};
            // On disk, as a production stream would be.
            let stream = nats::Stream::create("bench", json!({"storage": "file"}));
            let options = json!({"url": format!("nats://{}", nats::ADDR), "subject": stream.subject});
            let sink = load(&runtime, "nats", options.clone(), "tcp://127.0.0.1:4222").await?;
            let parsed = ankusa_sink_nats::options::Options::parse(&options.to_string()).map_err(refused)?;
            let next_inbox = std::sync::atomic::AtomicU64::new(1);
            let open = || {
                let token = next_inbox.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                client::Connection::open(&parsed.addr, &parsed.credentials, token, parsed.ack_timeout)
                    .map_err(|e| anyhow::anyhow!("{e:?}"))
            };
            let send = |connection: &mut client::Connection, hooks: &[GuestHook]| {
                all_ok(deliver::exchange_batch(&parsed, connection, hooks), hooks.len(), |reply| {
                    deliver::acknowledged(&parsed.subject, reply).is_ok()
                })
            };
            measure("nats", sink, open, send).await?;
        }

        if wanted("rabbitmq") {
            use ankusa_sink_rabbitmq::client::Confirm;
            use ankusa_sink_rabbitmq::{client, deliver};
            let queue = rabbitmq::Scratch::queue("bench", &[]).await;
            let options = json!({"url": "amqp://guest:guest@127.0.0.1:5672/%2f", "routing_key": queue.queue});
            let sink = load(&runtime, "rabbitmq", options.clone(), "tcp://127.0.0.1:5672").await?;
            let parsed = ankusa_sink_rabbitmq::options::Options::parse(&options.to_string()).map_err(refused)?;
            let open = || client::Connection::open(&parsed).map_err(|e| anyhow::anyhow!("{e:?}"));
            let send = |connection: &mut client::Connection, hooks: &[GuestHook]| {
                all_ok(deliver::exchange_batch(&parsed, connection, hooks), hooks.len(), |c| c == Confirm::Routed)
            };
            measure("rabbitmq", sink, open, send).await?;
            queue.delete().await;
        }

        if wanted("mqtt") {
            use ankusa_sink_mqtt::client;
            let topic = mqtt::topic("bench");
            let options = json!({"url": format!("mqtt://{}", mqtt::ADDR), "topic": topic});
            let sink = load(&runtime, "mqtt", options.clone(), "tcp://127.0.0.1:1883").await?;
            let parsed = ankusa_sink_mqtt::options::Options::parse(&options.to_string()).map_err(refused)?;
            let open = || client::Connection::open(&parsed).map_err(|e| anyhow::anyhow!("{e:?}"));
            let send = |connection: &mut client::Connection, hooks: &[GuestHook]| {
                for hook in hooks {
                    connection.publish(&parsed.topic, &hook.body, false).map_err(|e| anyhow::anyhow!("{e:?}"))?;
                }
                Ok(())
            };
            let n = batched_hooks() / 4;
            wasm_round(sink.clone(), make_hooks("mqtt-warm", CONCURRENCY * 10), 1).await?;
            let wasm = wasm_round(sink, make_hooks("mqtt", n), 1).await?;
            let native_hooks: Vec<GuestHook> = make_hooks("mqtt-native", n).iter().map(to_guest).collect();
            let native = tokio::task::block_in_place(|| native_round(&native_hooks, open, send))?;
            report("batch.mqtt.wasm_one_per_call", wasm, "deliveries/s");
            report("batch.mqtt.native_one_per_call", native, "deliveries/s");
            ratio("batch.mqtt.wasm_vs_native", wasm, native);
        }
        anyhow::Ok(())
    })
}
