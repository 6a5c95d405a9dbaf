//! Rust: cargo for `wasm32-wasip2`, which writes a component directly.

use std::path::PathBuf;
use std::process::Command;

use super::{BuildError, Job};
use crate::authoring::tools;

const TARGET: &str = "wasm32-wasip2";
const NO_CARGO: &str = "install Rust (https://rustup.rs), then `rustup target add wasm32-wasip2`";
const NO_TARGET: &str = "run `rustup target add wasm32-wasip2`";

pub(super) fn build(job: &Job) -> Result<(), BuildError> {
    let dir = &job.project.dir;
    require_target(dir)?;
    let manifest = dir.join("Cargo.toml");
    // cargo renders the compiler's diagnostics on stderr; stdout carries
    // the JSON messages that name the artifact, never shown.
    let output = tools::run_machine_readable(
        Command::new("cargo")
            .current_dir(dir)
            .args(["build", "--release", "--target", TARGET, "--message-format=json-render-diagnostics"])
            .arg("--manifest-path")
            .arg(&manifest)
            // A build started from inside another cargo build (a test) must
            // not inherit flags meant for that one.
            .env_remove("CARGO_BUILD_TARGET")
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_ENCODED_RUSTFLAGS"),
        "cargo build",
        NO_CARGO,
    )?;
    let artifact = cdylib_artifact(&String::from_utf8_lossy(&output.stdout)).ok_or_else(|| BuildError::Failed {
        step: "cargo build".into(),
        output: format!("{} builds no `cdylib` .wasm (is `crate-type = [\"cdylib\"]` set?)", manifest.display()),
    })?;
    std::fs::copy(&artifact, &job.out).map_err(BuildError::io("copy", &artifact))?;
    Ok(())
}

/// The toolchain cargo would use here must have the target's standard library.
fn require_target(dir: &std::path::Path) -> Result<(), BuildError> {
    let output = tools::run(Command::new("rustc").current_dir(dir).args(["--print", "sysroot"]), "rustc", NO_CARGO)?;
    let sysroot = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    if sysroot.join("lib/rustlib").join(TARGET).is_dir() {
        Ok(())
    } else {
        Err(BuildError::Missing { what: format!("the {TARGET} target"), hint: NO_TARGET })
    }
}

/// The `.wasm` of the last cdylib among cargo's JSON messages.
fn cdylib_artifact(messages: &str) -> Option<PathBuf> {
    messages
        .lines()
        .rev()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact")
        .filter(|m| m["target"]["kind"].as_array().is_some_and(|k| k.iter().any(|k| k == "cdylib")))
        .filter_map(|m| {
            m["filenames"]
                .as_array()?
                .iter()
                .filter_map(|f| f.as_str())
                .find(|f| f.ends_with(".wasm"))
                .map(PathBuf::from)
        })
        .next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cdylib_is_found_among_cargos_messages() {
        let messages = r#"{"reason":"compiler-artifact","target":{"kind":["lib"]},"filenames":["/t/libserde.rlib"]}
{"reason":"compiler-artifact","target":{"kind":["cdylib"]},"filenames":["/t/wasm32-wasip2/release/orders.wasm"]}
{"reason":"build-finished","success":true}"#;
        assert_eq!(cdylib_artifact(messages), Some(PathBuf::from("/t/wasm32-wasip2/release/orders.wasm")));
        assert_eq!(cdylib_artifact(r#"{"reason":"build-finished"}"#), None);
    }
}
