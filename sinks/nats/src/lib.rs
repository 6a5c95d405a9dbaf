//! The `nats` sink: publishes each hook's body to a JetStream subject and
//! reports `ok` only on the stream's ack (durable). The hook's idempotency
//! key goes in `Nats-Msg-Id`, so the stream stores a retried delivery once.
//!
//! One connection per instance, kept between deliveries and reopened after
//! any failure. The server is named by IP address or host name and must be allowed
//! as `tcp://host:port`.
//!
//! - `options`: the sink's options;
//! - `deliver`: the publish for a hook, and what the stream's ack means;
//! - `classify`: what a failure means (retry or not, keep the connection);
//! - `client`: just enough of the NATS protocol, and the login.

// Built natively only for the fuzz targets, which use `client` and
// `options`: the component's side is unused there.
#![cfg_attr(not(target_family = "wasm"), allow(dead_code, unused_imports))]

mod classify;
pub mod client;
pub mod deliver;
pub mod options;

use ankusa_sdk::bindings::wasi::random::random::get_random_u64;
use ankusa_sdk::protocol::{KeptSink, Protocol};
use ankusa_sdk::{ConfigError, Failure, Hook, export_batch_sink};

use client::{Connection, NatsError, Reply};
use options::Options;

struct Nats(Options);

impl Protocol for Nats {
    type Connection = Connection;
    type Reply = Reply;
    type Error = NatsError;

    fn configure(json: &str) -> Result<Self, ConfigError> {
        Ok(Nats(Options::parse(json)?))
    }

    fn durable(&self) -> bool {
        true
    }

    fn open(&self) -> Result<Connection, NatsError> {
        let options = &self.0;
        Connection::open(&options.addr, &options.credentials, get_random_u64(), options.ack_timeout)
    }

    fn exchange(&self, connection: &mut Connection, hook: &Hook) -> Result<Reply, NatsError> {
        deliver::exchange(&self.0, connection, hook)
    }

    fn exchange_batch(
        &self,
        connection: &mut Connection,
        hooks: &[Hook],
    ) -> Result<Vec<Result<Reply, NatsError>>, NatsError> {
        deliver::exchange_batch(&self.0, connection, hooks)
    }

    fn accept(&self, reply: Reply) -> Result<(), Failure> {
        deliver::acknowledged(&self.0.subject, reply)
    }

    fn failure(&self, error: NatsError) -> Failure {
        classify::failure(error)
    }

    fn keeps(outcome: &Result<Reply, NatsError>) -> bool {
        classify::keeps(outcome)
    }

    fn stale(error: &NatsError) -> bool {
        classify::stale(error)
    }
}

export_batch_sink!(KeptSink<Nats>);
