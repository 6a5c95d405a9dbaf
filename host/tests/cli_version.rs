//! The binary's own smoke test. It also makes `cargo test` build the
//! `ankusa` binary that the end-to-end tests in `tests/` run.

use std::process::Command;

#[test]
fn version_names_the_package_and_the_wit_version() {
    let out = Command::new(env!("CARGO_BIN_EXE_ankusa")).arg("version").output().expect("run ankusa");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(env!("CARGO_PKG_VERSION")), "{text}");
    assert!(text.contains(&format!("ankusa:sink@{}", ankusa::runtime::WIT_VERSION)), "{text}");
}
