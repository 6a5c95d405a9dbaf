//! `ankusa sink inspect` and `ankusa sink test`: the same checks the plugin
//! harness makes, for a component written in any language.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;

use crate::authoring::wit;
use crate::runtime::{ComponentSource, EngineConfig, LoadError, Runtime, SinkLabel, SinkSpec, builtin};
use crate::sinktest::cases;

#[derive(Debug, clap::Args)]
pub struct SinkArgs {
    /// Cache compiled components here (a Python or JavaScript sink takes
    /// seconds to compile; the cache makes later runs instant).
    #[arg(long, global = true, env = "ANKUSA_COMPONENT_CACHE")]
    cache_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: SinkCommand,
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
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run JSON test cases against a component.
    Test {
        /// A `.wasm` component, or the name of a built-in sink.
        component: String,
        /// The cases file.
        cases: PathBuf,
        /// Print a JSON report.
        #[arg(long)]
        json: bool,
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
    let runtime =
        || Runtime::new(EngineConfig { max_instances: 16, ..EngineConfig::default() }, args.cache_dir.clone());
    match args.command {
        SinkCommand::Inspect { component, options, json } => inspect(&runtime()?, &component, options, json).await,
        SinkCommand::Test { component, cases, json } => test(&runtime()?, &component, &cases, json).await,
        SinkCommand::Wit { dir, force } => write_wit(&dir, force),
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
    runtime.inspect(&bytes).with_context(|| reference.to_string())?;
    let file = cases::read_case_file(cases_path)?;
    let component = ComponentSource::Bytes { origin: reference.to_string(), bytes: bytes.into() };
    let reports = cases::run_cases(runtime, &component, &file).await;
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
