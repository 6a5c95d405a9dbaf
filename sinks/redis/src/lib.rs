//! The `redis` sink: `XADD` each hook to a stream (durable), or `PUBLISH`
//! its body on a channel (not durable; no subscriber is a failure).
//!
//! One connection per instance, kept between deliveries and reopened after
//! any failure. The server is named by IP address or host name and must be allowed
//! as `tcp://host:port`.
//!
//! - `options`: the sink's options;
//! - `deliver`: the command for a hook, and what its reply means;
//! - `classify`: what a failure means (retry or not, keep the connection);
//! - `client`: just enough RESP2, and the login.

// Built natively only for the fuzz targets, which use `client` and
// `options`: the component's side is unused there.
#![cfg_attr(not(target_family = "wasm"), allow(dead_code, unused_imports))]

mod classify;
pub mod client;
pub mod deliver;
pub mod options;

use ankusa_sdk::protocol::{KeptSink, Protocol};
use ankusa_sdk::{ConfigError, Failure, Hook, export_batch_sink};

use client::{Connection, Reply, RespError};
use options::Options;

struct Redis(Options);

impl Protocol for Redis {
    type Connection = Connection;
    type Reply = Reply;
    type Error = RespError;

    fn configure(json: &str) -> Result<Self, ConfigError> {
        Ok(Redis(Options::parse(json)?))
    }

    fn durable(&self) -> bool {
        self.0.durable()
    }

    fn open(&self) -> Result<Connection, RespError> {
        client::open(&self.0)
    }

    fn exchange(&self, connection: &mut Connection, hook: &Hook) -> Result<Reply, RespError> {
        deliver::exchange(&self.0, connection, hook)
    }

    fn exchange_batch(
        &self,
        connection: &mut Connection,
        hooks: &[Hook],
    ) -> Result<Vec<Result<Reply, RespError>>, RespError> {
        deliver::exchange_batch(&self.0, connection, hooks)
    }

    fn accept(&self, reply: Reply) -> Result<(), Failure> {
        deliver::accept(&self.0.target, reply)
    }

    fn failure(&self, error: RespError) -> Failure {
        classify::failure(error)
    }

    fn keeps(outcome: &Result<Reply, RespError>) -> bool {
        classify::keeps(outcome)
    }

    fn stale(error: &RespError) -> bool {
        classify::stale(error)
    }
}

export_batch_sink!(KeptSink<Redis>);
