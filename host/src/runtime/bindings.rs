//! Host-side bindings for the `ankusa:sink@0.1.0` world (`wit/sink.wit`).
//!
//! WASI interfaces are mapped onto wasmtime-wasi's and wasmtime-wasi-http's
//! own bindings, so only `ankusa:sink/*` gets new types here.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "ankusa:sink/sink-world",
    imports: { default: trappable },
    exports: { default: async },
    with: {
        "wasi:io": wasmtime_wasi::p2::bindings::io,
        "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
        "wasi:random": wasmtime_wasi::p2::bindings::random,
        "wasi:http": wasmtime_wasi_http::p2::bindings::http,
    },
});

pub use ankusa::sink::delivery::{ConfigError, ErrorClass, Failure, Hook};
pub use ankusa::sink::log::Level;

/// The export name the host looks for, and the package version it speaks.
pub const SINK_INTERFACE: &str = "ankusa:sink/sink";
pub const WIT_VERSION: &str = "0.1.0";
