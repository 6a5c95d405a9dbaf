//! The `kafka` sink: produces each hook as one record with `acks=all` and
//! the idempotent producer (durable: `ok` is the ack of every in-sync
//! replica). The record's value is the body, its key a hook field (the id
//! by default, partitioned as the Java client would), its timestamp the
//! time the hook was received, and its headers the hook's metadata.
//!
//! One producer per instance, kept between deliveries: a connection to
//! each partition leader it has written to, its producer id and each
//! partition's sequence number, all dropped after a failure. Brokers are
//! named by IP address or host name, each allowed as `tcp://host:port`
//! (the bootstrap servers and every broker the metadata names); TLS when
//! the operator switches it on.
//!
//! - `options`: the sink's options;
//! - `deliver`: a hook as a record, and its partition;
//! - `classify`: what a failure means;
//! - `client`: the protocol (`Metadata`, `InitProducerId`, `Produce`) and
//!   the record batch.

#![cfg_attr(not(target_family = "wasm"), allow(dead_code, unused_imports))]

mod classify;
pub mod client;
pub mod deliver;
pub mod options;

use std::cell::Cell;

use ankusa_sdk::protocol::{KeptSink, Protocol};
use ankusa_sdk::{ConfigError, Failure, Hook, export_sink};

use client::{KafkaError, Producer};
use options::Options;

struct Kafka {
    options: Options,
    /// The next partition for records without a key.
    turn: Cell<usize>,
}

impl Protocol for Kafka {
    type Connection = Producer;
    type Reply = i64;
    type Error = KafkaError;

    fn configure(json: &str) -> Result<Self, ConfigError> {
        Ok(Kafka { options: Options::parse(json)?, turn: Cell::new(0) })
    }

    fn durable(&self) -> bool {
        true
    }

    fn open(&self) -> Result<Producer, KafkaError> {
        Producer::open(&self.options.brokers, &self.options.topic, self.options.idempotent, self.options.timeout)
    }

    fn exchange(&self, producer: &mut Producer, hook: &Hook) -> Result<i64, KafkaError> {
        deliver::exchange(&self.options, &self.turn, producer, hook)
    }

    /// Every in-sync replica has the record.
    fn accept(&self, _offset: i64) -> Result<(), Failure> {
        Ok(())
    }

    fn failure(&self, error: KafkaError) -> Failure {
        classify::failure(error)
    }

    fn keeps(outcome: &Result<i64, KafkaError>) -> bool {
        classify::keeps(outcome)
    }

    fn stale(error: &KafkaError) -> bool {
        classify::stale(error)
    }
}

export_sink!(KeptSink<Kafka>);
