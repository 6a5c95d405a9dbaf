//! Every fuzz target (`fuzz/targets/`) over its checked-in corpus, every
//! input under `fuzz/regressions/` and a few thousand seeded mutations of
//! them, in the ordinary test build: the properties the fuzzers check hold
//! for today's code, and a defect a fuzzer once found stays fixed.
//!
//! `ANKUSA_FUZZ_SEED` and `ANKUSA_FUZZ_INPUTS` change the seeded inputs
//! (defaults 1 and 5000 a target); a failing seeded input is written under
//! `fuzz/artifacts/<target>/` to keep as a regression. Long runs with
//! coverage guidance: `fuzz/smoke` (libFuzzer, see the README).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use ankusa_fuzz_targets::{TARGETS, mutate};

/// Failures named (and seeded ones saved) per target: a defect that fails
/// thousands of inputs needs only a few to be shown.
const MAX_REPORTED: usize = 20;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

fn env_number(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(text) => text.parse().unwrap_or_else(|_| panic!("{name} must be a number, not {text:?}")),
        Err(_) => default,
    }
}

/// The files of a folder, by name, with their bytes (none if it is absent).
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<_> = entries
        .map(|entry| entry.expect("list a corpus folder").path())
        .filter(|path| path.is_file())
        .map(|path| {
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
            (path.display().to_string(), bytes)
        })
        .collect();
    files.sort();
    files
}

fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic without a message".into())
}

/// Run one target over its inputs; a failing input is named, and a failing
/// seeded one saved, so it can be replayed and kept.
fn replay(target: &str) {
    let run = TARGETS.iter().find(|t| t.name == target).expect("a known target").run;
    let fuzz = fuzz_dir();
    let corpus = files(&fuzz.join("corpus").join(target));
    let regressions = files(&fuzz.join("regressions").join(target));
    let (seed, count) = (env_number("ANKUSA_FUZZ_SEED", 1), env_number("ANKUSA_FUZZ_INPUTS", 5000));
    let bytes: Vec<Vec<u8>> = corpus.iter().chain(&regressions).map(|(_, b)| b.clone()).collect();
    let seeded = mutate::inputs(mutate::seed_for(seed, target), &bytes, count as usize);

    let mut failures = Vec::new();
    let mut check = |label: String, input: &[u8]| {
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| run(input))) {
            failures.push((label, input.to_vec(), panic_text(payload.as_ref())));
        }
    };
    for (name, input) in corpus.iter().chain(&regressions) {
        check(name.clone(), input);
    }
    for (n, input) in seeded.enumerate() {
        check(format!("seeded input {n} (ANKUSA_FUZZ_SEED={seed})"), &input);
    }
    eprintln!(
        "fuzz/{target}: {} corpus, {} regression and {count} seeded inputs (seed {seed}), {} failed",
        corpus.len(),
        regressions.len(),
        failures.len()
    );
    if failures.is_empty() {
        return;
    }
    let artifacts = fuzz.join("artifacts").join(target);
    let mut report = String::new();
    for (n, (label, input, message)) in failures.iter().enumerate().take(MAX_REPORTED) {
        let mut saved = String::new();
        if label.starts_with("seeded") {
            let path = artifacts.join(format!("seeded-{seed}-{n}"));
            if std::fs::create_dir_all(&artifacts).and_then(|()| std::fs::write(&path, input)).is_ok() {
                saved = format!(" (saved as {})", path.display());
            }
        }
        report.push_str(&format!("{label}{saved}: {message}\n"));
    }
    panic!("fuzz/{target}: {} inputs failed:\n{report}", failures.len());
}

macro_rules! targets {
    ($($name:ident),* $(,)?) => {
        $(#[test] fn $name() { replay(stringify!($name)); })*

        #[test]
        fn every_target_is_replayed_here() {
            let here = [$(stringify!($name)),*];
            for target in TARGETS {
                assert!(here.contains(&target.name), "fuzz target {} has no test here", target.name);
            }
        }
    };
}

targets!(
    admin_bodies,
    config,
    dedupe_key,
    dlq_cursor,
    http_framing,
    intake_frames,
    kafka_replies,
    mysql_replies,
    nats_replies,
    postgres_replies,
    rabbitmq_replies,
    redis_replies,
    stored_records,
    verify,
);

#[test]
fn every_fuzz_binary_calls_its_target() {
    // `cargo fuzz list` reads fuzz/Cargo.toml: each target there is a thin
    // wrapper over the function tested above.
    let manifest = std::fs::read_to_string(fuzz_dir().join("Cargo.toml")).expect("read fuzz/Cargo.toml");
    for target in TARGETS {
        let path = fuzz_dir().join("fuzz_targets").join(format!("{}.rs", target.name));
        let source = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        assert!(source.contains(&format!("ankusa_fuzz_targets::{}::run", target.name)), "{}", path.display());
        assert!(manifest.contains(&format!("name = \"{}\"", target.name)), "{} not in fuzz/Cargo.toml", target.name);
    }
}
