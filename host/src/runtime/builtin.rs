//! Sinks shipped inside the binary.
//!
//! `host/build.rs` builds the guest workspace (`sinks/`) for wasm32-wasip2 and
//! leaves every component in one directory; the shipped ones are embedded
//! here and selected by name in configuration.

use std::path::Path;

pub const LOG: &[u8] = include_bytes!(concat!(env!("ANKUSA_SINKS_DIR"), "/log.wasm"));
pub const HTTP: &[u8] = include_bytes!(concat!(env!("ANKUSA_SINKS_DIR"), "/http.wasm"));
pub const REDIS: &[u8] = include_bytes!(concat!(env!("ANKUSA_SINKS_DIR"), "/redis.wasm"));
pub const NATS: &[u8] = include_bytes!(concat!(env!("ANKUSA_SINKS_DIR"), "/nats.wasm"));
pub const POSTGRES: &[u8] = include_bytes!(concat!(env!("ANKUSA_SINKS_DIR"), "/postgres.wasm"));
pub const RABBITMQ: &[u8] = include_bytes!(concat!(env!("ANKUSA_SINKS_DIR"), "/rabbitmq.wasm"));
pub const MQTT: &[u8] = include_bytes!(concat!(env!("ANKUSA_SINKS_DIR"), "/mqtt.wasm"));
pub const MYSQL: &[u8] = include_bytes!(concat!(env!("ANKUSA_SINKS_DIR"), "/mysql.wasm"));
pub const KAFKA: &[u8] = include_bytes!(concat!(env!("ANKUSA_SINKS_DIR"), "/kafka.wasm"));
pub const SQS: &[u8] = include_bytes!(concat!(env!("ANKUSA_SINKS_DIR"), "/sqs.wasm"));
pub const S3: &[u8] = include_bytes!(concat!(env!("ANKUSA_SINKS_DIR"), "/s3.wasm"));
pub const FILE: &[u8] = include_bytes!(concat!(env!("ANKUSA_SINKS_DIR"), "/file.wasm"));

const SHIPPED: &[(&str, &[u8])] = &[
    ("log", LOG),
    ("http", HTTP),
    ("redis", REDIS),
    ("nats", NATS),
    ("postgres", POSTGRES),
    ("rabbitmq", RABBITMQ),
    ("mqtt", MQTT),
    ("mysql", MYSQL),
    ("kafka", KAFKA),
    ("sqs", SQS),
    ("s3", S3),
    ("file", FILE),
];

/// The bytes of the built-in sink called `name`.
pub fn builtin(name: &str) -> Option<&'static [u8]> {
    SHIPPED.iter().find(|(n, _)| *n == name).map(|(_, bytes)| *bytes)
}

/// Names of every built-in sink.
pub fn names() -> impl Iterator<Item = &'static str> {
    SHIPPED.iter().map(|(n, _)| *n)
}

/// Where this build left every compiled guest, test sinks included
/// (`misbehave.wasm`). For tests and benchmarks of this repository.
pub fn artifact_dir() -> &'static Path {
    Path::new(env!("ANKUSA_SINKS_DIR"))
}
