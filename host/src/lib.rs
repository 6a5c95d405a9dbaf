//! Ankusa: a self-hosted webhook receiver whose delivery sinks are
//! WebAssembly components.
//!
//! Subsystems, each in its own folder, with dependencies pointing one way
//! (edge → queue → store; dispatch → queue + runtime; admin → everything):
//! - [`store`]: durable storage (RocksDB) behind the `Store` trait;
//! - [`edge`]: HTTP ingest: routing, limits, verification, the batcher;
//! - [`intake`]: the intake log, a second durable copy (`wal.mode: dual`);
//! - [`queue`]: hooks and delivery rows, their formats and states;
//! - [`runtime`]: loads sink components and runs deliveries, sandboxed;
//! - [`source`]: sources as the edge and dispatch see them;
//! - [`dispatch`]: delivers due rows through sink components;
//! - [`replay`]: durable jobs that move rows back into delivery;
//! - [`sinktest`]: scripted peers and JSON test cases for sink components;
//! - [`cli`]: the `ankusa` command line.

pub mod cli;
pub mod dispatch;
pub mod edge;
pub mod error_class;
pub mod hook;
pub mod intake;
pub mod queue;
pub mod replay;
pub mod runtime;
pub mod sinktest;
pub mod source;
pub mod store;
