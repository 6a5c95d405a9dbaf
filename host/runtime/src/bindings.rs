//! Host-side bindings for the `ankusa:sink@0.1.3` worlds (`wit/sink.wit`).
//!
//! Sinks: generated from `batch-sink-world`, the larger of the two: every
//! sink exports `sink`, and the host looks for `batch` separately, so a
//! component of plain `sink-world` (or one built against 0.1.0) loads too.
//! Transforms: `transform-world`, in [`transform_world`], sharing the
//! delivery types and the log interface with the sinks' bindings.
//! WASI interfaces are mapped onto wasmtime-wasi's and wasmtime-wasi-http's
//! own bindings, so only `ankusa:sink/*` gets new types here.

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "ankusa:sink/batch-sink-world",
    imports: {
        // The host awaits the network here; the guest sees one blocking call.
        "ankusa:sink/http-client.send": async | trappable,
        "ankusa:sink/tcp-client.tls-enabled": trappable,
        "ankusa:sink/tcp-client": async | trappable,
        default: trappable,
    },
    exports: { default: async },
    with: {
        "wasi:io": wasmtime_wasi::p2::bindings::io,
        "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
        "wasi:random": wasmtime_wasi::p2::bindings::random,
        "wasi:http": wasmtime_wasi_http::p2::bindings::http,
        "ankusa:sink/tcp-client.connection": crate::capability::TcpConnection,
    },
});

pub use ankusa::sink::delivery::{ConfigError, ErrorClass, Failure, Hook};
pub use ankusa::sink::log::Level;
pub use exports::ankusa::sink::batch::{Guest as BatchExport, GuestIndices as BatchIndices};
pub use exports::ankusa::sink::sink::{Guest as SinkExport, GuestIndices as SinkIndices};

/// The export name the host looks for, and the package version it speaks.
pub const SINK_INTERFACE: &str = "ankusa:sink/sink";
pub const TRANSFORM_INTERFACE: &str = "ankusa:sink/transform";
pub const WIT_VERSION: &str = "0.1.3";

pub mod transform_world {
    //! `transform-world`: a transform exports `transform` and imports
    //! only the log and clocks the sinks' linker already provides.
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "ankusa:sink/transform-world",
        imports: { default: trappable },
        exports: { default: async },
        with: {
            "ankusa:sink/delivery": super::ankusa::sink::delivery,
            "ankusa:sink/log": super::ankusa::sink::log,
            "wasi:io": wasmtime_wasi::p2::bindings::io,
            "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
        },
    });

    pub use exports::ankusa::sink::transform::{
        Guest as TransformExport, GuestIndices as TransformIndices, Outgoing, Verdict,
    };
}
