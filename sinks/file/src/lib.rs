//! The `file` sink: appends each hook as one JSON line to a file in the
//! directory the operator gives the sink (its only filesystem, seen as `/`),
//! and with `fsync` (the default) reports `ok` only once the line is on disk.
//!
//! - `options`: the sink's options;
//! - `deliver`: a hook as one JSON line;
//! - `classify`: what a failed write means;
//! - `client`: appending (and rotating) through `wasi:filesystem`.

mod classify;
mod client;
mod deliver;
mod options;

mod bindings {
    //! `wasi:filesystem`, which the sink world leaves out: only this sink
    //! asks for a directory.
    wit_bindgen::generate!({
        path: ["../../wit/deps/io.wit", "../../wit/deps/clocks.wit", "../../wit/deps/filesystem.wit", "wit/world.wit"],
        world: "ankusa:file-sink/filesystem",
        generate_all,
    });
}

use ankusa_sdk::{ConfigError, Failure, Hook, Sink, export_batch_sink};

use options::Options;

struct FileSink {
    options: Options,
}

impl Sink for FileSink {
    fn configure(json: &str) -> Result<Self, ConfigError> {
        Ok(FileSink { options: Options::parse(json)? })
    }

    fn durable(&self) -> bool {
        self.options.fsync
    }

    fn deliver(&mut self, hook: &Hook, _attempt: u32) -> Result<(), Failure> {
        deliver::deliver(&self.options, hook)
    }

    fn deliver_batch(&mut self, hooks: &[Hook], _attempts: &[u32]) -> Vec<Result<(), Failure>> {
        deliver::deliver_batch(&self.options, hooks)
    }
}

export_batch_sink!(FileSink);
