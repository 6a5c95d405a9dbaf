//! The `rabbitmq` sink: publishes each hook's body to an exchange over
//! AMQP 0-9-1 with publisher confirms and `mandatory` set, and reports `ok`
//! only on the broker's confirm of a routed message. A message no queue
//! takes, or one the broker refuses, is a failure.
//!
//! One connection (and one channel) per instance, kept between deliveries.
//! The broker is named by IP address and must be allowed as `tcp://ip:port`.

mod connection;
mod deliver;
mod options;
mod wire;

use ankusa_sdk::{ConfigError, Failure, Hook, Sink, export_sink};

use deliver::Delivery;
use options::Options;

struct RabbitSink {
    delivery: Delivery,
}

impl Sink for RabbitSink {
    fn configure(json: &str) -> Result<Self, ConfigError> {
        Ok(RabbitSink { delivery: Delivery::new(Options::parse(json)?) })
    }

    /// A confirm of a persistent message means the queues it was routed to
    /// hold it on disk (when they are durable queues).
    fn durable(&self) -> bool {
        self.delivery.options().persistent
    }

    fn deliver(&mut self, hook: &Hook, _attempt: u32) -> Result<(), Failure> {
        self.delivery.deliver(hook)
    }
}

export_sink!(RabbitSink);
