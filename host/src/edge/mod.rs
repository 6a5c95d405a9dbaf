//! The edge: what providers talk to. Routes a request to its source,
//! refuses bad input before reading the body where it can, verifies the
//! signature, extracts the dedupe key, charges the tenant's rate limit and
//! hands the envelope to the batcher, answering `201` only once the hook
//! is committed.

pub mod batcher;
pub mod dedupe_key;
pub mod direct;
mod ingest;
pub mod rate;
pub mod server;
pub mod verify;

pub use server::{Edge, EdgeConfig, Mode, router, serve};
