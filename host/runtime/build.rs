//! Builds the guest workspace (`sinks/`: the SDK and every shipped sink) for
//! wasm32-wasip2, so a plain `cargo build` of the runtime needs nothing
//! else. The components land in `$OUT_DIR/sinks/<name>.wasm`; the runtime
//! embeds the shipped ones and tests find the rest through
//! `ANKUSA_SINKS_DIR`.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// (crate artifact name, name the host knows it by)
const GUESTS: &[(&str, &str)] = &[
    ("ankusa_sink_log", "log"),
    ("ankusa_sink_http", "http"),
    ("ankusa_sink_redis", "redis"),
    ("ankusa_sink_nats", "nats"),
    ("ankusa_sink_postgres", "postgres"),
    ("ankusa_sink_rabbitmq", "rabbitmq"),
    ("ankusa_sink_mqtt", "mqtt"),
    ("ankusa_sink_mysql", "mysql"),
    ("ankusa_sink_kafka", "kafka"),
    ("ankusa_sink_sqs", "sqs"),
    ("ankusa_sink_s3", "s3"),
    ("ankusa_sink_file", "file"),
    ("ankusa_sink_misbehave", "misbehave"),
    ("ankusa_sink_noop", "noop"),
    ("ankusa_sink_post", "post"),
    ("ankusa_transform_jsonfilter", "jsonfilter"),
    ("ankusa_transform_reshape", "reshape"),
    ("ankusa_transform_misbehave", "transform-misbehave"),
];

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let root = manifest_dir.ancestors().nth(2).expect("host/runtime/ lives inside the repository").to_path_buf();
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    for watched in ["sinks", "sdk/src", "sdk/Cargo.toml", "wit"] {
        println!("cargo:rerun-if-changed={}", root.join(watched).display());
    }

    let target_dir = out.join("guest-target");
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .args(["build", "--release", "--locked", "--target", "wasm32-wasip2", "--manifest-path"])
        .arg(root.join("sinks/Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir);
    // The outer build's flags and wrappers (clippy, coverage) are for the
    // host target; the guests build with their own profile.
    for var in [
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTC_WRAPPER",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
    ] {
        command.env_remove(var);
    }
    let status = command.status().expect("cannot run cargo to build the guest sinks");
    if !status.success() {
        panic!(
            "building the guest sinks failed ({status}). Is the wasm32-wasip2 target installed? \
             `rustup target add wasm32-wasip2`"
        );
    }

    let dest = out.join("sinks");
    std::fs::create_dir_all(&dest).expect("create $OUT_DIR/sinks");
    let built = target_dir.join("wasm32-wasip2/release");
    for (artifact, name) in GUESTS {
        copy(&built.join(format!("{artifact}.wasm")), &dest.join(format!("{name}.wasm")));
    }
    println!("cargo:rustc-env=ANKUSA_SINKS_DIR={}", dest.display());
}

fn copy(from: &Path, to: &Path) {
    std::fs::copy(from, to).unwrap_or_else(|e| panic!("copy {} to {}: {e}", from.display(), to.display()));
}
