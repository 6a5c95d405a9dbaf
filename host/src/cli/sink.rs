//! `ankusa sink ...`: a sink author's commands. `inspect` and `test` make
//! the plugin harness's checks on a component written in any language;
//! `new`, `build`, `wit` and `dev` start, build and iterate on a project.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;

use crate::authoring::build::{self, Built};
use crate::authoring::project::{Kind, Language, Project};
use crate::authoring::tools::ToolCache;
use crate::authoring::{template, wit};

use crate::runtime::{ComponentInfo, ComponentSource, EngineConfig, LoadError, Runtime, SinkLabel, SinkSpec, builtin};
use crate::sinktest::cases;

use super::client::{AdminConnection, JSON_HELP};

#[derive(Debug, clap::Args)]
pub struct SinkArgs {
    #[command(subcommand)]
    command: SinkCommand,
}

/// Where compiled components are kept, for the commands that run one.
#[derive(Debug, Clone, clap::Args)]
pub struct ComponentCacheArgs {
    /// Keep compiled components here, by content hash, instead of
    /// ~/.cache/ankusa/components (a Python or JavaScript sink compiles for
    /// seconds; from the cache it loads at once).
    #[arg(long, env = "ANKUSA_COMPONENT_CACHE")]
    cache_dir: Option<PathBuf>,
}

impl ComponentCacheArgs {
    /// A runtime for one-off commands, compiling into the cache.
    fn runtime(&self) -> anyhow::Result<Runtime> {
        let dir = self.cache_dir.clone().unwrap_or_else(|| crate::authoring::tools::user_cache("components"));
        Ok(Runtime::new(EngineConfig { max_instances: 16, ..EngineConfig::default() }, Some(dir))?)
    }
}

#[derive(Debug, Subcommand)]
pub enum SinkCommand {
    /// Show a component's world, imports, exports and durability.
    Inspect {
        /// A `.wasm` component, or the name of a built-in sink.
        component: String,
        /// The sink's options (JSON), to validate them and ask for durability.
        #[arg(long)]
        options: Option<String>,
        #[arg(long, help = JSON_HELP)]
        json: bool,
        #[command(flatten)]
        cache: ComponentCacheArgs,
    },
    /// Run JSON test cases against a component (with neither given: the
    /// project here, its build/NAME.wasm against its cases.json).
    Test {
        /// A `.wasm` component, or the name of a built-in sink.
        #[arg(requires = "cases")]
        component: Option<String>,
        /// The cases file (its format: `docs/src/sinks/testing.md`).
        cases: Option<PathBuf>,
        #[arg(long, help = JSON_HELP)]
        json: bool,
        #[command(flatten)]
        cache: ComponentCacheArgs,
    },
    /// Start a sink project: a working sink that logs each hook and can
    /// POST it (or, with `--kind transform`, a transform that drops or
    /// tags each hook), its test cases, the WIT, a README.
    New {
        /// The sink's name (lower-case letters, digits, `-`, `_`).
        name: String,
        /// rust, python, js or c.
        #[arg(long)]
        lang: String,
        /// sink (the default) or transform.
        #[arg(long, default_value = "sink")]
        kind: String,
        /// The folder to create (default: ./NAME). It must not exist or be empty.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Build a project's component into build/NAME.wasm.
    Build {
        /// The project (default: the current folder).
        dir: Option<PathBuf>,
        /// Where fetched toolchains are kept (default: ~/.cache/ankusa/tools).
        #[arg(long, env = "ANKUSA_TOOLS_DIR")]
        tools_dir: Option<PathBuf>,
        #[command(flatten)]
        cache: ComponentCacheArgs,
    },
    /// Rebuild on every save, run cases.json, and on green swap the new
    /// component into a running node (one line per cycle).
    Dev {
        /// The project (default: the current folder).
        dir: Option<PathBuf>,
        #[command(flatten)]
        admin: AdminConnection,
        /// The sink of the node's config to replace (default: the project's name).
        #[arg(long)]
        sink: Option<String>,
        /// Where fetched toolchains are kept (default: ~/.cache/ankusa/tools).
        #[arg(long, env = "ANKUSA_TOOLS_DIR")]
        tools_dir: Option<PathBuf>,
        /// How often to look for changed files, in milliseconds.
        #[arg(long, default_value_t = 250)]
        poll_ms: u64,
        #[command(flatten)]
        cache: ComponentCacheArgs,
    },
    /// Write the WIT this binary loads (`sink.wit` and `deps/`) into DIR,
    /// for a project's componentize tool.
    Wit {
        /// The folder to write (created if missing).
        dir: PathBuf,
        /// Replace files that differ (an older WIT).
        #[arg(long)]
        force: bool,
    },
}

fn component_bytes(reference: &str) -> anyhow::Result<Vec<u8>> {
    match ComponentSource::parse(reference) {
        ComponentSource::Builtin(name) => builtin::builtin(&name).map(<[u8]>::to_vec).with_context(|| {
            let names: Vec<_> = builtin::names().collect();
            format!("`{name}` is neither a file path nor a built-in sink ({})", names.join(", "))
        }),
        ComponentSource::Path(path) => std::fs::read(&path).with_context(|| format!("cannot read {}", path.display())),
        ComponentSource::Bytes { bytes, .. } => Ok(bytes.to_vec()),
    }
}

pub async fn execute(args: SinkArgs) -> anyhow::Result<ExitCode> {
    // Only the commands that run a component need an engine.
    match args.command {
        SinkCommand::Inspect { component, options, json, cache } => {
            inspect(&cache.runtime()?, &component, options, json).await
        }
        SinkCommand::Test { component: Some(component), cases: Some(cases), json, cache } => {
            test(&cache.runtime()?, &component, &cases, json).await
        }
        SinkCommand::Test { json, cache, .. } => {
            let project = Project::open(&project_dir(None))?;
            test(&cache.runtime()?, &project.output().to_string_lossy(), &project.cases(), json).await
        }
        SinkCommand::Wit { dir, force } => write_wit(&dir, force),
        SinkCommand::New { name, lang, kind, dir } => new_project(&name, &lang, &kind, dir),
        SinkCommand::Build { dir, tools_dir, cache } => {
            build_project(&cache.runtime()?, &project_dir(dir), tools_dir).await
        }
        SinkCommand::Dev { dir, admin, sink, tools_dir, poll_ms, cache } => {
            let project = Project::open(&project_dir(dir))?;
            let options = super::sink_dev::DevOptions {
                sink: sink.unwrap_or_else(|| project.name().to_string()),
                tools: ToolCache::new(tools_dir),
                poll: std::time::Duration::from_millis(poll_ms.max(20)),
            };
            super::sink_dev::run(&cache.runtime()?, project, &admin, options).await
        }
    }
}

fn project_dir(dir: Option<PathBuf>) -> PathBuf {
    dir.unwrap_or_else(|| PathBuf::from("."))
}

fn new_project(name: &str, lang: &str, kind: &str, dir: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let language: Language = lang.parse()?;
    let kind: Kind = kind.parse()?;
    let dir = dir.unwrap_or_else(|| PathBuf::from(name));
    let written = template::create(&dir, name, language, kind)?;
    let what = match kind {
        Kind::Sink => language.to_string(),
        Kind::Transform => format!("{language} transform"),
    };
    println!("created {} ({what}, {} files, ankusa:sink@{})", dir.display(), written.len(), wit::version());
    println!("next:   cd {} && ankusa sink build && ankusa sink test", dir.display());
    Ok(ExitCode::SUCCESS)
}

async fn build_project(
    runtime: &Runtime,
    dir: &std::path::Path,
    tools_dir: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    let project = Project::open(dir)?;
    let tools = ToolCache::new(tools_dir);
    println!("building {} ({})", project.name(), project.language());
    let built = tokio::task::spawn_blocking(move || build::build(&project, &tools, &|line| println!("{line}")))
        .await
        .context("the build stopped")??;
    let bytes = std::fs::read(&built.wasm).with_context(|| format!("cannot read {}", built.wasm.display()))?;
    let info = runtime.inspect(&bytes).with_context(|| built.wasm.display().to_string())?;
    println!("{}", built_line(&built));
    print_summary(&info);
    Ok(ExitCode::SUCCESS)
}

/// `built build/x.wasm (64.2 KiB) in 3.1 s`
pub(super) fn built_line(built: &Built) -> String {
    format!(
        "built {} ({:.1} KiB) in {:.1} s",
        built.wasm.strip_prefix(".").unwrap_or(&built.wasm).display(),
        built.bytes as f64 / 1024.0,
        built.elapsed.as_secs_f64()
    )
}

fn print_summary(info: &ComponentInfo) {
    println!("sha256:    {}", info.sha256);
    println!("world:     {}", info.world);
    println!("exports:");
    for e in &info.exports {
        println!("  {e}");
    }
    println!("imports:");
    for i in &info.imports {
        println!("  {i}");
    }
}

async fn inspect(runtime: &Runtime, reference: &str, options: Option<String>, json: bool) -> anyhow::Result<ExitCode> {
    let bytes = component_bytes(reference)?;
    let info = runtime.inspect(&bytes).with_context(|| reference.to_string())?;
    let given = options.is_some();
    let options: serde_json::Value = match options {
        Some(text) => serde_json::from_str(&text).context("--options is not valid JSON")?,
        None => serde_json::json!({}),
    };
    let mut spec = SinkSpec::new(
        SinkLabel::new("inspect", reference),
        ComponentSource::Bytes { origin: reference.to_string(), bytes: bytes.into() },
    );
    spec.options = options;
    let durable = match runtime.load(spec).await {
        Ok(sink) => Ok(sink.durable()),
        Err(LoadError::Options { field, message, .. }) if !given => Err(format!(
            "unknown until --options are given (with none: {}{message})",
            field.map(|f| format!("`{f}`: ")).unwrap_or_default()
        )),
        Err(e) => return Err(e.into()),
    };
    if json {
        let durable = match &durable {
            Ok(d) => serde_json::Value::Bool(*d),
            Err(_) => serde_json::Value::Null,
        };
        let report = serde_json::json!({
            "component": reference, "sha256": info.sha256, "world": info.world,
            "imports": info.imports, "exports": info.exports, "durable": durable,
        });
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("component: {reference}");
        print_summary(&info);
        match durable {
            Ok(d) => println!("durable:   {d}"),
            Err(why) => println!("durable:   {why}"),
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn test(
    runtime: &Runtime,
    reference: &str,
    cases_path: &std::path::Path,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let bytes = component_bytes(reference)?;
    let info = runtime.inspect(&bytes).with_context(|| reference.to_string())?;
    let file = cases::read_case_file(cases_path)?;
    let component = ComponentSource::Bytes { origin: reference.to_string(), bytes: bytes.into() };
    let kind = match info.world.contains(&format!("/{}@", Kind::Transform.world())) {
        true => Kind::Transform,
        false => Kind::Sink,
    };
    let reports = kind.run_cases(runtime, &component, &file).await;
    let failed = reports.iter().filter(|r| !r.passed()).count();
    let passed = reports.len() - failed;
    if json {
        println!("{}", serde_json::to_string_pretty(&reports)?);
    } else {
        for report in &reports {
            if report.passed() {
                println!("ok     {}", report.name);
            } else {
                println!("FAIL   {}", report.name);
                for mismatch in &report.mismatches {
                    println!("         {mismatch}");
                }
            }
        }
        println!("{passed} passed, {failed} failed");
    }
    Ok(if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn write_wit(dir: &std::path::Path, force: bool) -> anyhow::Result<ExitCode> {
    let version = wit::version();
    let written = wit::write(dir, force)?;
    if written.is_empty() {
        println!("{} already holds ankusa:sink@{version}", dir.display());
    } else {
        println!("wrote ankusa:sink@{version} to {} ({} files)", dir.display(), written.len());
    }
    Ok(ExitCode::SUCCESS)
}
