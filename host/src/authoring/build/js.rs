//! JavaScript: componentize-js, fetched from npm (at the versions of its
//! lock file in `sdk/templates/tools/`) into the tool cache.

use std::path::Path;
use std::process::Command;

use super::{BuildError, Job};
use crate::authoring::files::TEMPLATES;
use crate::authoring::project::Kind;
use crate::authoring::tools::{self, COMPONENTIZE_JS, ToolCache};

const NO_NODE: &str = "install Node.js 18 or newer with npm (Debian: `apt install nodejs npm`)";
const TOOL_FILES: &str = "tools/componentize-js/";

pub(super) fn build(job: &Job) -> Result<(), BuildError> {
    // The module exporting `sink` (or `transform`), named for it.
    let kind = job.project.kind();
    let entry = job.project.dir.join(format!("{kind}.js"));
    if !entry.is_file() {
        return Err(BuildError::Component(format!(
            "{} has no {kind}.js (the module exporting `{kind}`)",
            job.project.dir.display()
        )));
    }
    componentize(job.tools, &job.project.wit_dir(), kind.world(), &entry, &job.out, job.progress)
}

/// The componentize-js features a world's component goes without: a
/// handler of incoming requests never, and a transform `fetch` too (it
/// may not reach the network).
fn disabled(world: &str) -> &'static [&'static str] {
    match world == Kind::Transform.world() {
        true => &["fetch-event", "http"],
        false => &["fetch-event"],
    }
}

/// The component of the module `entry` (exporting what `world` exports)
/// built against `world` of the WIT in `wit`, written to `out`.
pub fn componentize(
    tools: &ToolCache,
    wit: &Path,
    world: &str,
    entry: &Path,
    out: &Path,
    progress: &dyn Fn(&str),
) -> Result<(), BuildError> {
    tools::require_version("node", (18, 0), NO_NODE)?;
    let ready = |dir: &Path| bin(dir).is_file();
    let install = |dir: &Path| {
        for (path, text) in TEMPLATES {
            if let Some(name) = path.strip_prefix(TOOL_FILES) {
                let file = dir.join(name);
                std::fs::write(&file, text).map_err(BuildError::io("write", &file))?;
            }
        }
        tools::run(
            Command::new("npm").args(["ci", "--no-audit", "--no-fund", "--silent"]).current_dir(dir),
            "npm ci",
            NO_NODE,
        )
        .map(drop)
    };
    let tool = tools.ensure(COMPONENTIZE_JS, ready, install, progress)?;
    tools::run(
        Command::new(bin(&tool))
            .arg("--wit")
            .arg(wit)
            .args(["--world-name", world])
            .args(disabled(world).iter().flat_map(|feature| ["-d", feature]))
            .arg("-o")
            .arg(out)
            .arg(entry),
        "componentize-js",
        NO_NODE,
    )?;
    Ok(())
}

fn bin(tool: &Path) -> std::path::PathBuf {
    tool.join("node_modules/.bin/componentize-js")
}
