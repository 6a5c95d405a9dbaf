//! The `mysql` sink: inserts each hook as a row of a MySQL or MariaDB
//! table, idempotent on the hook id (durable: `ok` is the server's commit
//! of the insert, which InnoDB makes durable at its default
//! `innodb_flush_log_at_trx_commit = 1`).
//!
//! The table is created if missing (`create_table`, default on) with one
//! column per hook field and the body as `LONGBLOB`. One connection per
//! instance, kept between deliveries and reopened after a failure, with
//! the insert prepared on it once. Login by `mysql_native_password` or
//! `caching_sha2_password` (its full authentication only over TLS); TLS
//! when the operator switches it on. The server is named by IP address or
//! host name and must be allowed as `tcp://host:port`.
//!
//! - `options`: the sink's options;
//! - `deliver`: the table and the insert of a hook's row;
//! - `classify`: what a failure means (error numbers, keep the connection);
//! - `client`: the wire protocol and its logins.

#![cfg_attr(not(target_family = "wasm"), allow(dead_code, unused_imports))]

mod classify;
pub mod client;
pub mod deliver;
pub mod options;

use ankusa_sdk::protocol::{KeptSink, Protocol};
use ankusa_sdk::{ConfigError, Failure, Hook, export_sink};

use client::MysqlError;
use deliver::Prepared;
use options::Options;

struct Mysql {
    options: Options,
}

impl Protocol for Mysql {
    type Connection = Prepared;
    type Reply = ();
    type Error = MysqlError;

    fn configure(json: &str) -> Result<Self, ConfigError> {
        Ok(Mysql { options: Options::parse(json)? })
    }

    fn durable(&self) -> bool {
        true
    }

    fn open(&self) -> Result<Prepared, MysqlError> {
        deliver::open(&self.options)
    }

    fn exchange(&self, connection: &mut Prepared, hook: &Hook) -> Result<(), MysqlError> {
        deliver::exchange(connection, hook)
    }

    /// The server committed the insert.
    fn accept(&self, (): ()) -> Result<(), Failure> {
        Ok(())
    }

    fn failure(&self, error: MysqlError) -> Failure {
        classify::failure(error)
    }

    fn keeps(outcome: &Result<(), MysqlError>) -> bool {
        classify::keeps(outcome)
    }

    fn stale(error: &MysqlError) -> bool {
        classify::stale(error)
    }
}

export_sink!(KeptSink<Mysql>);
