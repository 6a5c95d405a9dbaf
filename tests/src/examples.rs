//! Builds the non-Rust example sinks (`sinks/examples/`) for tests, with
//! the same pinned toolchains `ankusa sink build` uses, fetched once per
//! machine into a tool cache under the tests' scratch folder (shared with
//! the authoring tests). A component is rebuilt only when its sources or
//! the WIT change; a lock file serialises builds across test processes.

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use ankusa::authoring::build::{js, python};
use ankusa::authoring::tools::ToolCache;
use sha2::{Digest, Sha256};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ is inside the repository").to_path_buf()
}

/// The tool cache the tests share: `scratch/ankusa-tools`.
pub fn tools(scratch: &Path) -> ToolCache {
    ToolCache::new(Some(scratch.join("ankusa-tools")))
}

fn fingerprint(files: &[PathBuf]) -> String {
    let mut hash = Sha256::new();
    for file in files {
        hash.update(file.to_string_lossy().as_bytes());
        hash.update(fs::read(file).unwrap_or_else(|e| panic!("read {}: {e}", file.display())));
    }
    hex::encode(&hash.finalize()[..12])
}

fn wit_files() -> Vec<PathBuf> {
    let wit = repo_root().join("wit");
    let mut files = vec![wit.join("sink.wit")];
    let mut deps: Vec<PathBuf> =
        fs::read_dir(wit.join("deps")).expect("wit/deps").map(|e| e.expect("entry").path()).collect();
    deps.sort();
    files.extend(deps);
    files
}

/// Build `name` into `scratch` unless a build of the same sources (and WIT)
/// is already there.
fn build_once(
    scratch: &Path,
    name: &str,
    sources: &[PathBuf],
    build: impl FnOnce(&ToolCache, &Path, &Path) -> Result<(), ankusa::authoring::build::BuildError>,
) -> PathBuf {
    let dir = scratch.join("ankusa-examples");
    fs::create_dir_all(&dir).expect("create the examples work dir");
    let lock = File::create(dir.join(".lock")).expect("create the build lock");
    lock.lock().expect("take the build lock");
    let mut inputs = wit_files();
    inputs.extend_from_slice(sources);
    let out = dir.join(format!("{name}-{}.wasm", fingerprint(&inputs)));
    if !out.is_file() {
        build(&tools(scratch), &repo_root().join("wit"), &out).unwrap_or_else(|e| panic!("building {name}: {e}"));
    }
    out
}

/// `sinks/examples/python-notify` as a component, built under `scratch`
/// (a test's `CARGO_TARGET_TMPDIR`, kept between runs).
pub fn python_notify(scratch: &Path) -> PathBuf {
    let app = repo_root().join("sinks/examples/python-notify");
    build_once(scratch, "python-notify", &[app.join("app.py")], |tools, wit, out| {
        python::componentize(tools, wit, "sink-world", &app, "app", out, &|line| eprintln!("{line}"))
    })
}

/// `sinks/examples/js-forward` as a component, built under `scratch`.
pub fn js_forward(scratch: &Path) -> PathBuf {
    let app = repo_root().join("sinks/examples/js-forward");
    build_once(scratch, "js-forward", &[app.join("forward.js")], |tools, wit, out| {
        js::componentize(tools, wit, "sink-world", &app.join("forward.js"), out, &|line| eprintln!("{line}"))
    })
}
