//! The edge's rate limits (tenants' limits, charged after verification so
//! forgeries cost nothing, and the quarantine pen's per-source bucket) use
//! the node's one rate limiter.

pub use crate::rate::{Gcra, Rate};
