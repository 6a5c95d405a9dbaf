//! The `mqtt` sink: publishes each hook's body to an MQTT 3.1.1 topic with
//! QoS 1 and reports `ok` on the broker's PUBACK. `durable` is true only
//! with `persistent_session` (a session the broker keeps: with a clean
//! session, what the broker holds for a subscriber that is away is
//! dropped with the session).
//!
//! One connection per instance, kept between deliveries and reopened after
//! any failure. The broker is named by IP address or host name and must be
//! allowed as `tcp://host:port`.
//!
//! - `options`: the sink's options;
//! - `classify`: what a failure means (retry or not, keep the connection);
//! - `client`: just enough of MQTT 3.1.1 (CONNECT, PUBLISH at QoS 1, PUBACK).

// Built natively too (the tests use `client` and `options`): the
// component's side is unused there.
#![cfg_attr(not(target_family = "wasm"), allow(dead_code, unused_imports))]

mod classify;
pub mod client;
pub mod options;

use ankusa_sdk::protocol::{KeptSink, Protocol};
use ankusa_sdk::{ConfigError, Failure, Hook, export_sink};

use client::{Connection, MqttError, PubAck};
use options::Options;

struct Mqtt(Options);

impl Protocol for Mqtt {
    type Connection = Connection;
    type Reply = PubAck;
    type Error = MqttError;

    fn configure(json: &str) -> Result<Self, ConfigError> {
        Ok(Mqtt(Options::parse(json)?))
    }

    fn durable(&self) -> bool {
        self.0.persistent_session
    }

    fn open(&self) -> Result<Connection, MqttError> {
        Connection::open(&self.0)
    }

    fn exchange(&self, connection: &mut Connection, hook: &Hook) -> Result<PubAck, MqttError> {
        connection.publish(&self.0.topic, &hook.body, self.0.retain)
    }

    fn accept(&self, _reply: PubAck) -> Result<(), Failure> {
        Ok(())
    }

    fn failure(&self, error: MqttError) -> Failure {
        classify::failure(error)
    }

    fn keeps(outcome: &Result<PubAck, MqttError>) -> bool {
        outcome.is_ok()
    }

    fn stale(error: &MqttError) -> bool {
        matches!(error, MqttError::Io(_))
    }
}

export_sink!(KeptSink<Mqtt>);
