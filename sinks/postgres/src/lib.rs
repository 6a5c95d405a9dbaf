//! The `postgres` sink: inserts each hook as a row, idempotent on the hook
//! id (durable: `ok` is the server's commit of the insert). It takes hooks
//! a batch at a time: one multi-row insert per batch.
//!
//! The table is created if missing (`create_table`, default on) with one
//! column per hook field and the body as `bytea`. One connection per
//! instance, kept between deliveries and reopened after a failure. Login by
//! trust, password, md5 or SCRAM-SHA-256. The server is named by IP address
//! or host name and must be allowed as `tcp://host:port`.
//!
//! - `options`: the sink's options;
//! - `deliver`: the table and the insert of a hook's row;
//! - `classify`: what a failure means (SQLSTATE classes, keep the connection);
//! - `client`: the frontend/backend protocol and its logins.

// Built natively only for the fuzz targets, which use `client` and
// `options`: the component's side is unused there.
#![cfg_attr(not(target_family = "wasm"), allow(dead_code, unused_imports))]

mod classify;
pub mod client;
pub mod deliver;
pub mod options;

use ankusa_sdk::protocol::{KeptSink, Protocol};
use ankusa_sdk::{ConfigError, Failure, Hook, export_batch_sink};

use client::{Connection, PgError};
use options::Options;

struct Postgres {
    options: Options,
    /// The insert statement, made once from the table's name.
    insert: String,
}

impl Protocol for Postgres {
    type Connection = Connection;
    type Reply = ();
    type Error = PgError;

    fn configure(json: &str) -> Result<Self, ConfigError> {
        let options = Options::parse(json)?;
        let insert = deliver::insert_statement(&options.table);
        Ok(Postgres { options, insert })
    }

    fn durable(&self) -> bool {
        true
    }

    fn open(&self) -> Result<Connection, PgError> {
        deliver::open(&self.options)
    }

    fn exchange(&self, connection: &mut Connection, hook: &Hook) -> Result<(), PgError> {
        deliver::exchange(&self.insert, connection, hook)
    }

    fn exchange_batch(&self, connection: &mut Connection, hooks: &[Hook]) -> Result<Vec<Result<(), PgError>>, PgError> {
        deliver::exchange_batch(&self.options.table, &self.insert, connection, hooks)
    }

    /// The server committed the insert.
    fn accept(&self, (): ()) -> Result<(), Failure> {
        Ok(())
    }

    fn failure(&self, error: PgError) -> Failure {
        classify::failure(error)
    }

    fn keeps(outcome: &Result<(), PgError>) -> bool {
        classify::keeps(outcome)
    }

    fn stale(error: &PgError) -> bool {
        classify::stale(error)
    }
}

export_batch_sink!(KeptSink<Postgres>);
