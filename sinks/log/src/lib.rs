//! The `log` sink: writes one line per delivery to the host's log.
//!
//! Not durable: a log line is not a copy anything can be recovered from.
//!
//! - `options`: the sink's options;
//! - `deliver`: a hook as one log line (it cannot fail, so nothing to
//!   classify).

mod deliver;
mod options;

use ankusa_sdk::{ConfigError, Failure, Hook, Sink, export_sink};

use options::Options;

struct LogSink {
    options: Options,
}

impl Sink for LogSink {
    fn configure(json: &str) -> Result<Self, ConfigError> {
        Ok(LogSink { options: Options::parse(json)? })
    }

    fn durable(&self) -> bool {
        false
    }

    fn deliver(&mut self, hook: &Hook, attempt: u32) -> Result<(), Failure> {
        deliver::log_line(&self.options, hook, attempt);
        Ok(())
    }
}

export_sink!(LogSink);
