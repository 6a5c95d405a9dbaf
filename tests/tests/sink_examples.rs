//! The Python and JavaScript example sinks, built with their own toolchains
//! and run through their JSON cases in the real runtime.

use std::path::{Path, PathBuf};

use ankusa_harness::cases::{read_case_file, run_cases};
use ankusa_harness::{ComponentSource, Harness};
use ankusa_tests::examples;

fn scratch() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

fn harness() -> Harness {
    let cache = scratch().join("ankusa-component-cache");
    Harness::with_cache_dir(cache).expect("a sink runtime")
}

async fn passes_its_cases(wasm: PathBuf, cases: &Path, expected_cases: usize) {
    let file = read_case_file(cases).expect("a valid cases file");
    let harness = harness();
    // `sink inspect` shows the sink interface alone, not a toolchain's
    // own exports.
    let info = harness.runtime().inspect(&std::fs::read(&wasm).expect("the component")).expect("a sink");
    assert_eq!(info.exports, [format!("ankusa:sink/sink@{}", ankusa::authoring::wit::version())]);
    let reports = run_cases(harness.runtime(), &ComponentSource::Path(wasm), &file).await;
    assert_eq!(reports.len(), expected_cases);
    let failed: Vec<_> = reports.iter().filter(|r| !r.passed()).collect();
    assert!(failed.is_empty(), "failed cases: {failed:#?}");
}

fn example(dir: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../sinks/examples").join(dir)
}

#[tokio::test]
async fn the_python_example_passes_its_cases() {
    let wasm = tokio::task::spawn_blocking(|| examples::python_notify(&scratch())).await.expect("build task");
    passes_its_cases(wasm, &example("python-notify").join("cases.json"), 9).await;
}

#[tokio::test]
async fn the_javascript_example_passes_its_cases() {
    let wasm = tokio::task::spawn_blocking(|| examples::js_forward(&scratch())).await.expect("build task");
    passes_its_cases(wasm, &example("js-forward").join("cases.json"), 8).await;
}
