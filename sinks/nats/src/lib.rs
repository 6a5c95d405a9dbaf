//! The `nats` sink: publishes each hook's body to a JetStream subject and
//! reports `ok` only on the stream's ack (durable). The hook's idempotency
//! key goes in `Nats-Msg-Id`, so the stream stores a retried delivery once.
//!
//! One connection per instance, kept between deliveries and reopened after
//! any failure. The server is named by IP address and must be allowed as
//! `tcp://ip:port`.

mod deliver;
mod options;
mod protocol;

use ankusa_sdk::{ConfigError, Failure, Hook, Sink, export_sink};

use deliver::Delivery;
use options::Options;

struct NatsSink {
    delivery: Delivery,
}

impl Sink for NatsSink {
    fn configure(json: &str) -> Result<Self, ConfigError> {
        Ok(NatsSink { delivery: Delivery::new(Options::parse(json)?) })
    }

    fn durable(&self) -> bool {
        true
    }

    fn deliver(&mut self, hook: &Hook, _attempt: u32) -> Result<(), Failure> {
        self.delivery.deliver(hook)
    }
}

export_sink!(NatsSink);
