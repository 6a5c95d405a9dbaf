//! The guest workspace's own unit tests (the SDK's and each sink's wire
//! code: SCRAM, CRC-32C, percent and AWS encodings, protocol framing),
//! built natively. `sinks/` is a workspace apart (its crates build for
//! wasm32-wasip2), so this repository's `cargo test --workspace` reaches
//! them only through this test.

use std::path::Path;
use std::process::Command;

#[test]
fn the_guest_crates_unit_tests_pass_natively() {
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args(["test", "--workspace", "--manifest-path"])
        .arg(checkout.join("sinks/Cargo.toml"))
        // It misbehaves through wasm32 intrinsics, and has no tests.
        .args(["--exclude", "ankusa-sink-misbehave"])
        .env("CARGO_TARGET_DIR", Path::new(env!("CARGO_TARGET_TMPDIR")).join("guest-native"))
        .output()
        .expect("cargo runs");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "guest unit tests:\n{stdout}\n{stderr}");
    let passed: usize = stdout
        .lines()
        .filter_map(|line| line.strip_prefix("test result: ok. "))
        .filter_map(|rest| rest.split(' ').next()?.parse::<usize>().ok())
        .sum();
    assert!(passed >= 15, "the guest crates' tests ran: {passed} passed\n{stdout}");
}
