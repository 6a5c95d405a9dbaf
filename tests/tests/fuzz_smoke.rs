//! Every libFuzzer target (`fuzz/`) runs its checked-in corpus and 20 000
//! seeded inputs more with no crash: the targets build against today's
//! code, and every seed still passes. Longer runs:
//! `ANKUSA_FUZZ_RUNS=-1 fuzz/smoke 3600`.

use std::process::Command;

#[test]
fn every_fuzz_target_runs_clean_for_a_few_seconds() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let installed = Command::new("cargo").args(["fuzz", "--version"]).output().is_ok_and(|o| o.status.success());
    assert!(installed, "cargo-fuzz is missing: `cargo install cargo-fuzz --locked` (.ci/run installs it)");
    let status = Command::new(root.join("fuzz/smoke")).arg("5").status().expect("run fuzz/smoke");
    assert!(status.success(), "a fuzz target failed: see its input under fuzz/artifacts/");
}
