//! Tenants: the sources they mint at runtime and the rate limits set for
//! them (both kept as records in the store), and erasing everything a
//! tenant has on the node.

mod erase;
mod limits;
mod sources;

pub use erase::{Erase, EraseCounts, ErasePhase, Erasures};
pub use limits::{StoredRate, put_limit, stored_limits};
pub use sources::{SourceRecords, delete_source, put_source, stored_sources};

/// The tenant of a source that names none (the queue's, which files rows
/// of hooks without one under it).
pub use crate::queue::DEFAULT_TENANT;
