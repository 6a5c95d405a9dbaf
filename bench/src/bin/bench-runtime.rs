//! Sink runtime costs with a no-op sink: a warm call, a fresh instance, and
//! deliveries per second with concurrent callers.
//!
//! `cargo run --release -p ankusa-bench --bin bench-runtime`

use std::sync::Arc;
use std::time::Instant;

use ankusa::runtime::builtin::artifact_dir;
use ankusa::runtime::{ComponentSource, EngineConfig, Outcome, Runtime, Sink, SinkLabel, SinkSpec};
use ankusa::sinktest::TestHook;
use ankusa_bench::{ratio, report};

const WARM_CALLS: u32 = 200_000;
const FRESH_CALLS: u32 = 20_000;
const CONCURRENT_CALLS: u32 = 400_000;
const CALLERS: usize = 32;

async fn load(runtime: &Runtime, max_uses: u64, concurrency: usize) -> anyhow::Result<Sink> {
    let mut spec =
        SinkSpec::new(SinkLabel::new("bench", "noop"), ComponentSource::Path(artifact_dir().join("noop.wasm")));
    spec.limits.max_uses = max_uses;
    spec.limits.concurrency = concurrency;
    Ok(runtime.load(spec).await?)
}

async fn sequential(sink: &Sink, calls: u32) -> anyhow::Result<f64> {
    let hook = TestHook::new().body(vec![b'x'; 1024]).build();
    let started = Instant::now();
    for _ in 0..calls {
        if let Outcome::Failed(f) = sink.deliver(&hook, 1).await {
            anyhow::bail!("no-op delivery failed: {f}");
        }
    }
    Ok(started.elapsed().as_secs_f64() * 1e6 / f64::from(calls))
}

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        let runtime = Runtime::new(EngineConfig::default(), None)?;

        let warm = load(&runtime, u64::MAX, 1).await?;
        sequential(&warm, 10_000).await?; // warm up caches and the allocator
        let warm_us = sequential(&warm, WARM_CALLS).await?;
        report("runtime.warm_call", warm_us, "us");
        report("runtime.warm_calls_per_sec_one_caller", 1e6 / warm_us, "deliveries/s");

        let fresh = load(&runtime, 1, 1).await?;
        sequential(&fresh, 1_000).await?;
        let fresh_us = sequential(&fresh, FRESH_CALLS).await?;
        report("runtime.fresh_instance_and_call", fresh_us, "us");
        report("runtime.fresh_instance_only", fresh_us - warm_us, "us");
        ratio("runtime.fresh_vs_warm", fresh_us, warm_us);

        let shared = Arc::new(load(&runtime, u64::MAX, CALLERS).await?);
        let started = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..CALLERS {
            let sink = shared.clone();
            tasks.push(tokio::spawn(async move {
                let hook = TestHook::new().body(vec![b'x'; 1024]).build();
                for _ in 0..CONCURRENT_CALLS / CALLERS as u32 {
                    if let Outcome::Failed(f) = sink.deliver(&hook, 1).await {
                        return Err(anyhow::anyhow!("no-op delivery failed: {f}"));
                    }
                }
                Ok(())
            }));
        }
        for task in tasks {
            task.await??;
        }
        let per_sec = f64::from(CONCURRENT_CALLS) / started.elapsed().as_secs_f64();
        report(&format!("runtime.deliveries_per_sec_{CALLERS}_callers"), per_sec, "deliveries/s");
        anyhow::Ok(())
    })
}
