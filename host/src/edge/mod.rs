//! The edge: what providers talk to. Routes a request to its source,
//! refuses bad input before reading the body where it can, has the source
//! admit the hook (signature, dedupe key), charges the tenant's rate limit
//! and hands the envelope to the batcher, answering `201` only once the
//! hook is committed.

pub mod batcher;
pub mod direct;
mod ingest;
pub mod rate;
pub mod server;

pub use server::{Edge, EdgeConfig, Mode, router, serve};
