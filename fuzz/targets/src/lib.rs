//! The fuzz targets over every parser that takes outside bytes. Each is a
//! function over raw bytes that panics when the property it checks fails;
//! `fuzz/fuzz_targets/` wraps each for libFuzzer, and the test suite
//! replays every corpus and regression input through the same function.

pub mod mutate;
pub mod shared;

pub mod admin_bodies;
pub mod config;
pub mod dedupe_key;
pub mod dlq_cursor;
pub mod http_framing;
pub mod intake_frames;
pub mod kafka_replies;
pub mod mysql_replies;
pub mod nats_replies;
pub mod postgres_replies;
pub mod rabbitmq_replies;
pub mod redis_replies;
pub mod stored_records;
pub mod verify;

/// A target: its name (the folder of its corpus) and its body.
pub struct Target {
    pub name: &'static str,
    pub run: fn(&[u8]),
}

/// Every target, by the name `cargo fuzz` and the corpus folders use.
pub const TARGETS: &[Target] = &[
    Target { name: "admin_bodies", run: admin_bodies::run },
    Target { name: "config", run: config::run },
    Target { name: "dedupe_key", run: dedupe_key::run },
    Target { name: "dlq_cursor", run: dlq_cursor::run },
    Target { name: "http_framing", run: http_framing::run },
    Target { name: "intake_frames", run: intake_frames::run },
    Target { name: "kafka_replies", run: kafka_replies::run },
    Target { name: "mysql_replies", run: mysql_replies::run },
    Target { name: "nats_replies", run: nats_replies::run },
    Target { name: "postgres_replies", run: postgres_replies::run },
    Target { name: "rabbitmq_replies", run: rabbitmq_replies::run },
    Target { name: "redis_replies", run: redis_replies::run },
    Target { name: "stored_records", run: stored_records::run },
    Target { name: "verify", run: verify::run },
];
