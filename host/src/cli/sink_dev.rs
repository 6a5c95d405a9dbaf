//! `ankusa sink dev`: on every save, build the project, run its cases, and
//! only when both pass swap the component into a running node through its
//! admin API. A failed build or case leaves the node on its last good
//! component. One line per cycle.

use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use crate::authoring::build;
use crate::authoring::project::Project;
use crate::authoring::tools::ToolCache;
use crate::authoring::watch;
use crate::runtime::{ComponentSource, Runtime};
use crate::sinktest::cases;

use super::client::{AdminClient, AdminConnection};

pub struct DevOptions {
    /// The sink of the node's config to replace.
    pub sink: String,
    pub tools: ToolCache,
    pub poll: Duration,
}

pub async fn run(
    runtime: &Runtime,
    project: Project,
    admin: &AdminConnection,
    options: DevOptions,
) -> anyhow::Result<ExitCode> {
    let client = AdminClient::new(admin)?;
    // Refuse a wrong node, token or sink name now rather than after a build.
    client.get("/v1/sinks").await?;
    println!(
        "watching {} · on each save: build, {} cases, then reload `{}` on {} (Ctrl-C stops)",
        project.dir.display(),
        project.cases().display(),
        options.sink,
        admin.url
    );
    let mut seen = None;
    // The sources the node's component was last built from: a save that
    // leaves them as they were builds nothing and uploads nothing.
    let mut reloaded_from: Option<String> = None;
    loop {
        let now = watch::fingerprint(&project.dir);
        if seen != Some(now) {
            seen = Some(now);
            let sources = watch::contents(&project.dir);
            if reloaded_from.as_ref() == Some(&sources) {
                println!("{} = sources unchanged since the last reload; nothing to do", clock());
            } else {
                let (line, reloaded) = cycle(runtime, &project, &client, &options).await;
                println!("{line}");
                if reloaded {
                    reloaded_from = Some(sources);
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(options.poll) => {}
            _ = tokio::signal::ctrl_c() => return Ok(ExitCode::SUCCESS),
        }
    }
}

/// One build, test and reload: the line to print (with the compiler's or
/// the cases' details under it when something failed), and whether the
/// node took the component.
async fn cycle(runtime: &Runtime, project: &Project, client: &AdminClient, options: &DevOptions) -> (String, bool) {
    match build_test_reload(runtime, project, client, options).await {
        Ok(line) => (line, true),
        Err(line) => (line, false),
    }
}

async fn build_test_reload(
    runtime: &Runtime,
    project: &Project,
    client: &AdminClient,
    options: &DevOptions,
) -> Result<String, String> {
    let started = Instant::now();
    let stamp = clock();
    let job = (project.clone(), options.tools.clone());
    let built = tokio::task::spawn_blocking(move || build::build(&job.0, &job.1, &|line| println!("{line}"))).await;
    let built = match built {
        Ok(Ok(built)) => built,
        Ok(Err(e)) => {
            return Err(format!("{stamp} ✗ build failed; the node keeps its component\n{}", indent(&e.to_string())));
        }
        Err(e) => return Err(format!("{stamp} ✗ the build stopped: {e}")),
    };
    let size = format!("{:.1} KiB", built.bytes as f64 / 1024.0);
    let bytes = match std::fs::read(&built.wasm) {
        Ok(bytes) => bytes,
        Err(e) => return Err(format!("{stamp} ✗ cannot read {}: {e}", built.wasm.display())),
    };
    let file = match cases::read_case_file(&project.cases()) {
        Ok(file) => file,
        Err(e) => return Err(format!("{stamp} ✗ built {size}; {e}; not reloaded")),
    };
    let component = ComponentSource::Bytes { origin: built.wasm.display().to_string(), bytes: bytes.clone().into() };
    let reports = project.kind().run_cases(runtime, &component, &file).await;
    let failed: Vec<_> = reports.iter().filter(|r| !r.passed()).collect();
    if !failed.is_empty() {
        let details: Vec<String> =
            failed.iter().flat_map(|r| r.mismatches.iter().map(move |m| format!("{}: {m}", r.name))).collect();
        return Err(format!(
            "{stamp} ✗ built {size}; {} of {} cases failed; the node keeps its component\n{}",
            failed.len(),
            reports.len(),
            indent(&details.join("\n"))
        ));
    }
    let path = format!("/v1/sinks/{}/component", options.sink);
    let answer = match client.call_with_bytes("PUT", &path, "application/wasm", bytes).await {
        Ok(answer) => answer,
        Err(e) => {
            return Err(format!("{stamp} ✗ built {size}; {} cases pass; the node refused it: {e:#}", reports.len()));
        }
    };
    let swapped = answer["swapped"].as_array().map_or(0, Vec::len);
    let outcome = match (swapped, answer["unchanged"].as_u64().unwrap_or(0)) {
        (0, 0) => format!("no source delivers to `{}`", options.sink),
        (0, _) => format!("`{}` unchanged", options.sink),
        (n, _) => {
            let sha = answer["swapped"][0]["to"].as_str().unwrap_or_default();
            format!("reloaded `{}` in {n} source(s) ({})", options.sink, &sha[..sha.len().min(12)])
        }
    };
    Ok(format!(
        "{stamp} ✓ built {size}; {} cases pass; {outcome} in {:.1} s",
        reports.len(),
        started.elapsed().as_secs_f64()
    ))
}

fn indent(text: &str) -> String {
    text.lines().map(|line| format!("    {line}")).collect::<Vec<_>>().join("\n")
}

/// The time of day (UTC) a cycle started, `hh:mm:ss`.
fn clock() -> String {
    let secs = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    format!("{:02}:{:02}:{:02}", secs / 3600 % 24, secs / 60 % 60, secs % 60)
}
