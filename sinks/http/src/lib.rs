//! The `http` sink: forwards the raw body to `url`, signed with Standard
//! Webhooks when a `secret` is set.
//!
//! Durable: a 2xx from the destination is its promise to keep the hook.
//!
//! - `options`: the sink's options;
//! - `deliver`: the request for a hook, sent with the SDK's HTTP client;
//! - `classify`: what the destination's status means.

mod classify;
mod deliver;
mod options;

use ankusa_sdk::{ConfigError, Failure, Hook, Sink, export_sink};

use options::Options;

struct HttpSink {
    options: Options,
}

impl Sink for HttpSink {
    fn configure(json: &str) -> Result<Self, ConfigError> {
        Ok(HttpSink { options: Options::parse(json)? })
    }

    fn durable(&self) -> bool {
        true
    }

    fn deliver(&mut self, hook: &Hook, attempt: u32) -> Result<(), Failure> {
        deliver::deliver(&self.options, hook, attempt)
    }
}

export_sink!(HttpSink);
