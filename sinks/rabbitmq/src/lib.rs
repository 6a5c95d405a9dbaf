//! The `rabbitmq` sink: publishes each hook's body to an exchange over
//! AMQP 0-9-1 with publisher confirms and `mandatory` set, and reports `ok`
//! only on the broker's confirm of a routed message. A message no queue
//! takes, or one the broker refuses, is a failure.
//!
//! One connection (and one channel) per instance, kept between deliveries.
//! The broker is named by IP address or host name and must be allowed as
//! `tcp://host:port`.
//!
//! - `options`: the sink's options;
//! - `deliver`: the publish for a hook, and what the confirm means;
//! - `classify`: what a failure means (reply codes, keep the connection);
//! - `client`: the connection, its channel and AMQP frames.

// Built natively only for the fuzz targets, which use `client` and
// `options`: the component's side is unused there.
#![cfg_attr(not(target_family = "wasm"), allow(dead_code, unused_imports))]

mod classify;
pub mod client;
pub mod deliver;
pub mod options;

use ankusa_sdk::protocol::{KeptSink, Protocol};
use ankusa_sdk::{ConfigError, Failure, Hook, export_batch_sink};

use client::{AmqpError, Confirm, Connection};
use options::Options;

struct Rabbit(Options);

impl Protocol for Rabbit {
    type Connection = Connection;
    type Reply = Confirm;
    type Error = AmqpError;

    fn configure(json: &str) -> Result<Self, ConfigError> {
        Ok(Rabbit(Options::parse(json)?))
    }

    /// A confirm of a persistent message means the queues it was routed to
    /// hold it on disk (when they are durable queues).
    fn durable(&self) -> bool {
        self.0.persistent
    }

    fn open(&self) -> Result<Connection, AmqpError> {
        Connection::open(&self.0)
    }

    fn exchange(&self, connection: &mut Connection, hook: &Hook) -> Result<Confirm, AmqpError> {
        deliver::exchange(&self.0, connection, hook)
    }

    fn exchange_batch(
        &self,
        connection: &mut Connection,
        hooks: &[Hook],
    ) -> Result<Vec<Result<Confirm, AmqpError>>, AmqpError> {
        deliver::exchange_batch(&self.0, connection, hooks)
    }

    fn accept(&self, confirm: Confirm) -> Result<(), Failure> {
        deliver::confirmed(&self.0, confirm)
    }

    fn failure(&self, error: AmqpError) -> Failure {
        classify::failure(error)
    }

    fn keeps(outcome: &Result<Confirm, AmqpError>) -> bool {
        classify::keeps(outcome)
    }

    fn stale(error: &AmqpError) -> bool {
        classify::stale(error)
    }
}

export_batch_sink!(KeptSink<Rabbit>);
