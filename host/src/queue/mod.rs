//! The durable queue: hooks and their delivery rows in the store.
//!
//! Owns the stored formats of envelopes ([`Envelope`]) and delivery rows
//! ([`DeliveryRow`]). A delivery row is in exactly one state — due,
//! inflight or dead — and has exactly the index entries of that state;
//! every transition is one store batch, so no row is ever in two states or
//! lost between them.
//!
//! Callers: the edge (enqueue), dispatch (row transitions), admin (DLQ,
//! stats). Depends only on the store.

pub mod codec;
pub mod envelope;
pub mod rows;

pub use envelope::{Envelope, Verification};
pub use rows::{DeliveryRow, RowState};
