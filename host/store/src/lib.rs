//! Durable storage: the [`store`] (the `Store` trait, every key layout,
//! RocksDB) and the [`intake`] logs (the second copy of `dual`, the
//! replicated log of `fleet`). It knows nothing of hooks or rows; the
//! queue above gives the bytes their meaning.

pub mod intake;
pub mod store;

use ankusa_common::metrics;
