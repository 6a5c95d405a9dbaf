//! Builds the non-Rust example sinks (`sinks/examples/`) for tests.
//!
//! The toolchains come from the package registries into the test target
//! directory (componentize-py from PyPI, componentize-js from npm), once per
//! machine; a component is rebuilt only when its sources change. A lock file
//! serialises builds across test processes.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

pub const COMPONENTIZE_PY: &str = "componentize-py==0.25.1";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ is inside the repository").to_path_buf()
}

fn work_dir(scratch: &Path) -> PathBuf {
    let dir = scratch.join("ankusa-examples");
    fs::create_dir_all(&dir).expect("create the examples work dir");
    dir
}

/// Hold an exclusive lock on `dir/.lock` while building.
struct BuildLock(#[allow(dead_code)] File);

fn lock(dir: &Path) -> BuildLock {
    let file = File::create(dir.join(".lock")).expect("create the build lock");
    file.lock().expect("take the build lock");
    BuildLock(file)
}

fn run(command: &mut Command, what: &str) {
    let output = command.output().unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
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
fn build_once(scratch: &Path, name: &str, sources: &[PathBuf], build: impl FnOnce(&Path, &Path)) -> PathBuf {
    let dir = work_dir(scratch);
    let _lock = lock(&dir);
    let mut inputs = wit_files();
    inputs.extend_from_slice(sources);
    let out = dir.join(format!("{name}-{}.wasm", fingerprint(&inputs)));
    if !out.is_file() {
        build(&dir, &out);
    }
    out
}

/// `sinks/examples/python-notify` as a component, built under `scratch`
/// (a test's `CARGO_TARGET_TMPDIR`, kept between runs).
pub fn python_notify(scratch: &Path) -> PathBuf {
    let app = repo_root().join("sinks/examples/python-notify");
    build_once(scratch, "python-notify", &[app.join("app.py")], |dir, out| {
        let tools = dir.join("componentize-py");
        if !tools.join("componentize_py").is_dir() {
            run(
                Command::new("python3")
                    .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--ignore-installed"])
                    .arg("--target")
                    .arg(&tools)
                    .arg(COMPONENTIZE_PY),
                "pip install componentize-py",
            );
        }
        run(
            Command::new("python3")
                .env("PYTHONPATH", &tools)
                .args(["-c", "import sys, componentize_py; sys.argv[0] = 'componentize-py'; componentize_py.script()"])
                .arg("-d")
                .arg(repo_root().join("wit"))
                .args(["-w", "ankusa:sink/sink-world", "componentize", "-p"])
                .arg(&app)
                .args(["app", "-o"])
                .arg(out),
            "componentize-py",
        );
    })
}

/// `sinks/examples/js-forward` as a component, built under `scratch`.
pub fn js_forward(scratch: &Path) -> PathBuf {
    let app = repo_root().join("sinks/examples/js-forward");
    let sources = [app.join("forward.js"), app.join("package.json"), app.join("package-lock.json")];
    build_once(scratch, "js-forward", &sources, |dir, out| {
        // Install into the scratch dir, not the checkout.
        let tools = dir.join("componentize-js");
        fs::create_dir_all(&tools).expect("create the componentize-js dir");
        for file in ["package.json", "package-lock.json"] {
            fs::copy(app.join(file), tools.join(file)).expect("copy the npm manifest");
        }
        run(Command::new("npm").args(["ci", "--no-audit", "--no-fund", "--silent"]).current_dir(&tools), "npm ci");
        run(
            Command::new(tools.join("node_modules/.bin/componentize-js"))
                .arg("--wit")
                .arg(repo_root().join("wit"))
                .args(["--world-name", "sink-world", "-d", "fetch-event", "-o"])
                .arg(out)
                .arg(app.join("forward.js")),
            "componentize-js",
        );
    })
}
