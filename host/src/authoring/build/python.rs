//! Python: componentize-py, fetched from PyPI into the tool cache.

use std::path::Path;
use std::process::Command;

use super::{BuildError, Job};
use crate::authoring::tools::{self, COMPONENTIZE_PY, ToolCache};

const NO_PYTHON: &str = "install Python 3.9 or newer with pip (Debian: `apt install python3 python3-pip`)";
/// The module holding the `Sink` (or `Transform`) class.
const MODULE: &str = "app";

pub(super) fn build(job: &Job) -> Result<(), BuildError> {
    let world = job.project.kind().world();
    componentize(job.tools, &job.project.wit_dir(), world, &job.project.dir, MODULE, &job.out, job.progress)
}

/// The component of `module` (a `.py` file in `dir` with the class `world`
/// exports) built against `world` of the WIT in `wit`, written to `out`.
pub fn componentize(
    tools: &ToolCache,
    wit: &Path,
    world: &str,
    dir: &Path,
    module: &str,
    out: &Path,
    progress: &dyn Fn(&str),
) -> Result<(), BuildError> {
    tools::require_version("python3", (3, 9), NO_PYTHON)?;
    let ready = |dir: &Path| dir.join("componentize_py").is_dir();
    let spec = format!("{}=={}", COMPONENTIZE_PY.name, COMPONENTIZE_PY.version);
    let install = |dir: &Path| tools::pip_install(dir, &spec, NO_PYTHON);
    let tool = tools.ensure(COMPONENTIZE_PY, ready, install, progress)?;
    if !dir.join(format!("{module}.py")).is_file() {
        return Err(BuildError::Component(format!(
            "{} has no {module}.py (the module with the `Sink` or `Transform` class)",
            dir.display()
        )));
    }
    tools::run(
        Command::new("python3")
            .env("PYTHONPATH", &tool)
            .args(["-c", "import sys, componentize_py; sys.argv[0] = 'componentize-py'; componentize_py.script()"])
            .arg("-d")
            .arg(wit)
            .arg("-w")
            .arg(format!("ankusa:sink/{world}"))
            .args(["componentize", "-p"])
            .arg(dir)
            .args([module, "-o"])
            .arg(out),
        "componentize-py",
        NO_PYTHON,
    )?;
    Ok(())
}
