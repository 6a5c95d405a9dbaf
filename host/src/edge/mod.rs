//! The edge: what providers talk to. Routes a request to its source,
//! refuses bad input before reading the body where it can, has the source
//! admit the hook (signature, dedupe key), charges the tenant's rate limit
//! and hands the envelope to the batcher, answering `201` only once the
//! hook is committed.

pub mod batcher;
pub mod direct;
pub mod framing;
mod ingest;
pub mod rate;
pub mod server;
mod settings;
mod state;

pub use framing::DEFAULT_MAX_LINE;
pub use ingest::readiness;
pub use server::{Edge, Limits, Mode, Refusal, router, serve, serve_router};
pub use settings::{
    DEFAULT_MAX_HEADER_BYTES, EdgeConfig, HttpSettings, MIN_MAX_HEADER_BYTES, QuarantineSettings, RateLimits,
};
