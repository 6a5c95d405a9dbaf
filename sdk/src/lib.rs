//! Write Ankusa delivery sinks in Rust.
//!
//! A sink is a WebAssembly component that receives hooks the host has already
//! made durable and delivers each one somewhere. Implement [`Sink`], export it
//! with [`export_sink!`], and build with
//! `cargo build --target wasm32-wasip2 --release`:
//!
//! ```ignore
//! use ankusa_sdk::{export_sink, options, ConfigError, Failure, Hook, Sink};
//!
//! #[derive(serde::Deserialize)]
//! struct Options { prefix: String }
//!
//! struct Echo(Options);
//!
//! impl Sink for Echo {
//!     fn configure(json: &str) -> Result<Self, ConfigError> {
//!         Ok(Echo(options::parse(json)?))
//!     }
//!     fn durable(&self) -> bool { false }
//!     fn deliver(&mut self, hook: &Hook, _attempt: u32) -> Result<(), Failure> {
//!         ankusa_sdk::log::info(&format!("{} {}", self.0.prefix, hook.id));
//!         Ok(())
//!     }
//! }
//!
//! export_sink!(Echo);
//! ```
//!
//! The host owns retries, backoff and the dead-letter queue. A sink only
//! reports, per attempt, success or a [`Failure`] with its [`ErrorClass`].

pub mod bindings {
    //! Raw bindings generated from `wit/` (the `ankusa:sink@0.1.3`
    //! `sink-world` and the WASI interfaces it imports). Most sinks never
    //! need them directly.
    wit_bindgen::generate!({
        path: "../wit",
        world: "ankusa:sink/sink-world",
        generate_all,
        pub_export_macro: true,
        export_macro_name: "export_sink_world",
        default_bindings_module: "ankusa_sdk::bindings",
    });
}

#[doc(hidden)]
pub mod batch {
    //! The `ankusa:sink/batch` export alone (`batch-export`), sharing its
    //! types with [`bindings`](crate::bindings). Each export macro carries
    //! its own world, so a sink that never exports `batch` has no trace of it.
    wit_bindgen::generate!({
        path: "../wit",
        world: "ankusa:sink/batch-export",
        with: { "ankusa:sink/delivery@0.1.3": crate::bindings::ankusa::sink::delivery },
        pub_export_macro: true,
        export_macro_name: "export_batch",
        default_bindings_module: "ankusa_sdk::batch",
    });
}

#[doc(hidden)]
pub mod transform_bindings {
    //! `transform-world`, sharing the delivery types, the log and the
    //! clocks with [`bindings`](crate::bindings). Its export section rides
    //! in the export macro, so a sink has no trace of it.
    wit_bindgen::generate!({
        path: "../wit",
        world: "ankusa:sink/transform-world",
        with: {
            "ankusa:sink/delivery@0.1.3": crate::bindings::ankusa::sink::delivery,
            "ankusa:sink/log@0.1.3": crate::bindings::ankusa::sink::log,
            "wasi:io/poll@0.2.12": crate::bindings::wasi::io::poll,
            "wasi:clocks/wall-clock@0.2.12": crate::bindings::wasi::clocks::wall_clock,
            "wasi:clocks/monotonic-clock@0.2.12": crate::bindings::wasi::clocks::monotonic_clock,
        },
        pub_export_macro: true,
        export_macro_name: "export_transform_world",
        default_bindings_module: "ankusa_sdk::transform_bindings",
    });
}

pub mod aws;
mod failure;
pub mod http;
pub mod log;
pub mod options;
pub mod protocol;
pub mod signing;
mod sink;
pub mod tcp;
mod transform;

pub use bindings::ankusa::sink::delivery::{ConfigError, ErrorClass, Failure, Hook};
pub use sink::Sink;
pub use transform::Transform;
pub use transform_bindings::exports::ankusa::sink::transform::{Outgoing, Verdict};

#[doc(hidden)]
pub mod __private {
    pub use crate::sink::{configure, deliver, deliver_batch, durable};
    pub use crate::transform::{configure as configure_transform, transform};
}

/// Export a [`Sink`] implementation as the component's `ankusa:sink/sink`.
///
/// Use it once, at the root of a `cdylib` crate.
#[macro_export]
macro_rules! export_sink {
    ($ty:ty) => {
        // Exported only where it is a component: a sink's crate also
        // builds natively (as an rlib for its protocol's fuzz targets),
        // where these names are no symbols a linker takes.
        #[doc(hidden)]
        #[cfg(target_family = "wasm")]
        struct __AnkusaSinkExport;

        #[cfg(target_family = "wasm")]
        impl $crate::bindings::exports::ankusa::sink::sink::Guest for __AnkusaSinkExport {
            fn configure(options: String) -> Result<(), $crate::ConfigError> {
                $crate::__private::configure::<$ty>(&options)
            }
            fn durable() -> bool {
                $crate::__private::durable::<$ty>()
            }
            fn deliver(hook: $crate::Hook, attempt: u32) -> Result<(), $crate::Failure> {
                $crate::__private::deliver::<$ty>(&hook, attempt)
            }
        }

        #[cfg(target_family = "wasm")]
        $crate::bindings::export_sink_world!(__AnkusaSinkExport with_types_in $crate::bindings);
    };
}

/// Export a [`Transform`] implementation as the component's
/// `ankusa:sink/transform` (the `transform-world`). Use it once, at the
/// root of a `cdylib` crate.
#[macro_export]
macro_rules! export_transform {
    ($ty:ty) => {
        #[doc(hidden)]
        #[cfg(target_family = "wasm")]
        struct __AnkusaTransformExport;

        #[cfg(target_family = "wasm")]
        impl $crate::transform_bindings::exports::ankusa::sink::transform::Guest for __AnkusaTransformExport {
            fn configure(options: String) -> Result<(), $crate::ConfigError> {
                $crate::__private::configure_transform::<$ty>(&options)
            }
            fn transform(hook: $crate::Hook) -> Result<$crate::Verdict, $crate::Failure> {
                $crate::__private::transform::<$ty>(hook)
            }
        }

        #[cfg(target_family = "wasm")]
        $crate::transform_bindings::export_transform_world!(
            __AnkusaTransformExport with_types_in $crate::transform_bindings
        );
    };
}

/// Export a [`Sink`] implementation as `ankusa:sink/sink` and
/// `ankusa:sink/batch`: the host then hands it due hooks a batch at a time
/// through [`Sink::deliver_batch`] (up to the sink's configured `batch`
/// bounds). Use it instead of [`export_sink!`], once, at the crate root.
#[macro_export]
macro_rules! export_batch_sink {
    ($ty:ty) => {
        $crate::export_sink!($ty);

        #[cfg(target_family = "wasm")]
        impl $crate::batch::exports::ankusa::sink::batch::Guest for __AnkusaSinkExport {
            fn deliver_batch(hooks: Vec<$crate::Hook>, attempts: Vec<u32>) -> Vec<Result<(), $crate::Failure>> {
                $crate::__private::deliver_batch::<$ty>(&hooks, &attempts)
            }
        }

        #[cfg(target_family = "wasm")]
        $crate::batch::export_batch!(__AnkusaSinkExport with_types_in $crate::batch);
    };
}
