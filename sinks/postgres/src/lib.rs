//! The `postgres` sink: inserts each hook as a row, idempotent on the hook
//! id (durable: `ok` is the server's commit of the insert).
//!
//! The table is created if missing (`create_table`, default on) with one
//! column per hook field and the body as `bytea`. One connection per
//! instance, kept between deliveries and reopened after a failure. Login by
//! trust, password, md5 or SCRAM-SHA-256. The server is named by IP address
//! and must be allowed as `tcp://ip:port`.

mod deliver;
mod md5_login;
mod options;
mod scram;
mod wire;

use ankusa_sdk::{ConfigError, Failure, Hook, Sink, export_sink};

use deliver::Delivery;
use options::Options;

struct PostgresSink {
    delivery: Delivery,
}

impl Sink for PostgresSink {
    fn configure(json: &str) -> Result<Self, ConfigError> {
        Ok(PostgresSink { delivery: Delivery::new(Options::parse(json)?) })
    }

    fn durable(&self) -> bool {
        true
    }

    fn deliver(&mut self, hook: &Hook, _attempt: u32) -> Result<(), Failure> {
        self.delivery.deliver(hook)
    }
}

export_sink!(PostgresSink);
