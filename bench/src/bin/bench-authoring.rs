//! The `ankusa sink new` template in each language: its component's size,
//! the build, the first load (compiling the component to native code), a
//! load from the compiled-component cache, and a warm `deliver` (one log
//! line, no network) against the no-op sink's in the same run.
//!
//! `cargo run --release -p ankusa-bench --bin bench-authoring [-- rust c python js]`
//!
//! Python and JavaScript fetch their componentize tool into the tool cache
//! (`ANKUSA_TOOLS_DIR`, else `~/.cache/ankusa/tools`) on first use.

use std::path::Path;
use std::time::Instant;

use ankusa::authoring::build;
use ankusa::authoring::project::{Kind, Language, Project};
use ankusa::authoring::template;
use ankusa::authoring::tools::ToolCache;
use ankusa::runtime::builtin::artifact_dir;
use ankusa::runtime::{ComponentSource, EngineConfig, Outcome, Runtime, Sink, SinkLabel, SinkSpec};
use ankusa::sinktest::TestHook;
use ankusa_bench::{ratio, report};

/// The template's source file in `language`.
fn source_of(language: Language) -> &'static str {
    match language {
        Language::Rust => "src/lib.rs",
        Language::Python => "app.py",
        Language::Js => "sink.js",
        Language::C => "sink.c",
    }
}

async fn load(runtime: &Runtime, name: &str, wasm: &Path) -> anyhow::Result<(Sink, f64)> {
    let spec = SinkSpec::new(SinkLabel::new("bench", name), ComponentSource::Path(wasm.to_path_buf()));
    let started = Instant::now();
    let sink = runtime.load(spec).await?;
    Ok((sink, started.elapsed().as_secs_f64() * 1e3))
}

/// Microseconds per warm `deliver` of a 1 KiB hook.
async fn warm_call(sink: &Sink, calls: u32) -> anyhow::Result<f64> {
    let hook = TestHook::new().body(vec![b'x'; 1024]).build();
    for _ in 0..calls / 10 {
        sink.deliver(&hook, 1).await;
    }
    let started = Instant::now();
    for _ in 0..calls {
        if let Outcome::Failed(f) = sink.deliver(&hook, 1).await {
            anyhow::bail!("{} failed: {f}", sink.label().sink);
        }
    }
    Ok(started.elapsed().as_secs_f64() * 1e6 / f64::from(calls))
}

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    let languages: Vec<Language> = match std::env::args().skip(1).collect::<Vec<_>>() {
        given if given.is_empty() => Language::ALL.to_vec(),
        given => given.iter().map(|l| l.parse()).collect::<Result<_, _>>()?,
    };
    let work = tempfile::tempdir()?;
    let tools = ToolCache::new(None);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        let runtime = Runtime::new(EngineConfig::default(), None)?;
        let (noop, _) = load(&runtime, "noop", &artifact_dir().join("noop.wasm")).await?;
        let noop_us = warm_call(&noop, 50_000).await?;
        report("authoring.noop.warm_call", noop_us, "us");

        for language in languages {
            let dir = work.path().join(language.as_str());
            template::create(&dir, "bench", language, Kind::Sink)?;
            let project = Project::open(&dir)?;
            let name = format!("authoring.{language}");
            // The first build (tools from the cache, dependencies compiled),
            // then the one `sink dev` makes after an edit of the source.
            let first = build::build(&project, &tools, &|line| eprintln!("{line}"))?;
            report(&format!("{name}.first_build"), first.elapsed.as_secs_f64(), "s");
            let source = dir.join(source_of(language));
            let mut text = std::fs::read_to_string(&source)?;
            text.push('\n');
            std::fs::write(&source, text)?;
            let built = build::build(&project, &tools, &|line| eprintln!("{line}"))?;
            report(&format!("{name}.component_size"), built.bytes as f64 / 1024.0, "KiB");
            report(&format!("{name}.build_after_edit"), built.elapsed.as_secs_f64(), "s");

            let cache = work.path().join(format!("cache-{language}"));
            let cold = Runtime::new(EngineConfig::default(), Some(cache.clone()))?;
            let (_, cold_ms) = load(&cold, &name, &built.wasm).await?;
            report(&format!("{name}.first_load"), cold_ms, "ms");
            drop(cold);
            let cached = Runtime::new(EngineConfig::default(), Some(cache))?;
            let (sink, cached_ms) = load(&cached, &name, &built.wasm).await?;
            report(&format!("{name}.cached_load"), cached_ms, "ms");
            ratio(&format!("{name}.first_vs_cached_load"), cold_ms, cached_ms);

            let calls = if matches!(language, Language::Rust | Language::C) { 50_000 } else { 5_000 };
            let us = warm_call(&sink, calls).await?;
            report(&format!("{name}.warm_call"), us, "us");
            ratio(&format!("{name}.warm_call_vs_noop"), us, noop_us);
        }
        anyhow::Ok(())
    })
}
