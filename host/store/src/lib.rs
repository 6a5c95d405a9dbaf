//! Durable storage: the [`store`] (the `Store` trait, every key layout,
//! RocksDB), the [`intake`] logs (the second copy of `dual`, the
//! replicated log of `fleet`) and the job [`records`]. It knows nothing of hooks or rows; the
//! queue above gives the bytes their meaning.

pub mod intake;
pub mod records;
pub mod store;

use ankusa_common::metrics;
