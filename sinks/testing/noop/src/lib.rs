//! Accepts every hook and does nothing: what a delivery costs the runtime
//! when the sink itself costs nothing.

use ankusa_sdk::{ConfigError, Failure, Hook, Sink, export_sink};

struct Noop;

impl Sink for Noop {
    fn configure(_options: &str) -> Result<Self, ConfigError> {
        Ok(Noop)
    }

    fn durable(&self) -> bool {
        false
    }

    fn deliver(&mut self, _hook: &Hook, _attempt: u32) -> Result<(), Failure> {
        Ok(())
    }
}

export_sink!(Noop);
