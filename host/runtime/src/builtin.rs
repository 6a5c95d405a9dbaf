//! Sinks and transforms shipped inside the binary.
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
pub const JSONFILTER: &[u8] = include_bytes!(concat!(env!("ANKUSA_SINKS_DIR"), "/jsonfilter.wasm"));
pub const RESHAPE: &[u8] = include_bytes!(concat!(env!("ANKUSA_SINKS_DIR"), "/reshape.wasm"));

/// A sink shipped inside the binary.
pub struct Shipped {
    pub name: &'static str,
    pub bytes: &'static [u8],
    /// Deliveries at once unless the sink says (`None`: the node's
    /// `dispatch.sink_concurrency`). The `file` sink appends one delivery
    /// at a time: appends from several instances could interleave lines
    /// longer than one write.
    pub concurrency: Option<usize>,
    /// It writes into a directory it must be given (`directory:`).
    pub needs_directory: bool,
}

const fn shipped(name: &'static str, bytes: &'static [u8]) -> Shipped {
    Shipped { name, bytes, concurrency: None, needs_directory: false }
}

/// Every shipped sink: the one list the configuration, its checks and the
/// documentation's names come from.
pub const SHIPPED: &[Shipped] = &[
    shipped("log", LOG),
    shipped("http", HTTP),
    shipped("redis", REDIS),
    shipped("nats", NATS),
    shipped("postgres", POSTGRES),
    shipped("rabbitmq", RABBITMQ),
    shipped("mqtt", MQTT),
    shipped("mysql", MYSQL),
    shipped("kafka", KAFKA),
    shipped("sqs", SQS),
    shipped("s3", S3),
    Shipped { name: "file", bytes: FILE, concurrency: Some(1), needs_directory: true },
];

/// The shipped sink called `name`.
pub fn find(name: &str) -> Option<&'static Shipped> {
    SHIPPED.iter().find(|s| s.name == name)
}

/// The bytes of the built-in sink called `name`.
pub fn builtin(name: &str) -> Option<&'static [u8]> {
    find(name).map(|s| s.bytes)
}

/// Names of every built-in sink.
pub fn names() -> impl Iterator<Item = &'static str> {
    SHIPPED.iter().map(|s| s.name)
}

/// Every shipped transform, by name: keep or drop on JSON conditions
/// (`jsonfilter`), change the body and headers (`reshape`).
pub const TRANSFORMS: &[(&str, &[u8])] = &[("jsonfilter", JSONFILTER), ("reshape", RESHAPE)];

/// The bytes of the shipped transform called `name`.
pub fn transform(name: &str) -> Option<&'static [u8]> {
    TRANSFORMS.iter().find(|(n, _)| *n == name).map(|(_, bytes)| *bytes)
}

/// Names of every shipped transform.
pub fn transform_names() -> impl Iterator<Item = &'static str> {
    TRANSFORMS.iter().map(|(name, _)| *name)
}

/// Where this build left every compiled guest, test sinks included
/// (`misbehave.wasm`). For tests and benchmarks of this repository.
pub fn artifact_dir() -> &'static Path {
    Path::new(env!("ANKUSA_SINKS_DIR"))
}
