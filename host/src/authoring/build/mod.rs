//! `ankusa sink build`: a project's component, made with its language's
//! toolchain at pinned versions, written to `build/<name>.wasm`.

mod c;
pub mod js;
pub mod python;
mod rust;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::project::{BUILD_DIR, Language, Project};
use super::tools::ToolCache;

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("{what} is missing: {hint}")]
    Missing { what: String, hint: &'static str },
    #[error("{what} {found} is too old ({needed} or newer is needed): {hint}")]
    TooOld { what: String, found: String, needed: String, hint: &'static str },
    #[error("{step} failed:\n{output}")]
    Failed { step: String, output: String },
    #[error("cannot {action} {}: {source}", path.display())]
    Io { action: &'static str, path: PathBuf, source: std::io::Error },
    #[error("{0}")]
    Component(String),
}

impl BuildError {
    pub fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> BuildError {
        let path = path.to_path_buf();
        move |source| BuildError::Io { action, path, source }
    }
}

/// A finished build.
#[derive(Debug, Clone)]
pub struct Built {
    pub wasm: PathBuf,
    pub bytes: u64,
    pub elapsed: Duration,
}

/// What a language's build is handed.
struct Job<'a> {
    project: &'a Project,
    /// The component to write (renamed over the output only when whole).
    out: PathBuf,
    /// `build/`, for intermediate files.
    scratch: PathBuf,
    tools: &'a ToolCache,
    progress: &'a dyn Fn(&str),
}

/// Build `project`. Lines worth showing while it runs (a first fetch of a
/// tool) go to `progress`; a failed build leaves the last output alone.
pub fn build(project: &Project, tools: &ToolCache, progress: &dyn Fn(&str)) -> Result<Built, BuildError> {
    let started = Instant::now();
    let scratch = project.dir.join(BUILD_DIR);
    std::fs::create_dir_all(&scratch).map_err(BuildError::io("create", &scratch))?;
    let out = scratch.join(format!(".{}.wasm.partial", project.name()));
    let job = Job { project, out: out.clone(), scratch, tools, progress };
    match project.language() {
        Language::Rust => rust::build(&job)?,
        Language::Python => python::build(&job)?,
        Language::Js => js::build(&job)?,
        Language::C => c::build(&job)?,
    }
    let wasm = project.output();
    std::fs::rename(&out, &wasm).map_err(BuildError::io("move into place", &wasm))?;
    let bytes = std::fs::metadata(&wasm).map_err(BuildError::io("read", &wasm))?.len();
    Ok(Built { wasm, bytes, elapsed: started.elapsed() })
}
