//! The `redis` sink: `XADD` each hook to a stream (durable), or `PUBLISH`
//! its body on a channel (not durable; no subscriber is a failure).
//!
//! One connection per instance, kept between deliveries and reopened after
//! any failure. The server is named by IP address and must be allowed as
//! `tcp://ip:port`.

mod deliver;
mod options;
mod resp;

use ankusa_sdk::{ConfigError, Failure, Hook, Sink, export_sink};

use deliver::Delivery;
use options::Options;

struct RedisSink {
    delivery: Delivery,
}

impl Sink for RedisSink {
    fn configure(json: &str) -> Result<Self, ConfigError> {
        Ok(RedisSink { delivery: Delivery::new(Options::parse(json)?) })
    }

    fn durable(&self) -> bool {
        self.delivery.options().durable()
    }

    fn deliver(&mut self, hook: &Hook, _attempt: u32) -> Result<(), Failure> {
        self.delivery.deliver(hook)
    }
}

export_sink!(RedisSink);
