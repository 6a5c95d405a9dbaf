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
//! - [`config`]: `ankusa.yml`, its defaults and checks;
//! - [`digest`]: SHA-256 of bodies and files;
//! - [`node`]: the running node, started from a config;
//! - [`source`]: sources as the edge and dispatch see them;
//! - [`dispatch`]: delivers due rows through sink components;
//! - [`replay`]: durable jobs that move rows back into delivery;
//! - [`sinktest`]: scripted peers and JSON test cases for sink components;
//! - [`tenant`]: runtime sources, rate limits and erasure of tenants;
//! - [`metrics`]: the Prometheus registry;
//! - [`admin`]: the admin API;
//! - [`cli`]: the `ankusa` command line.

pub mod admin;
pub mod cli;
pub mod config;
pub mod digest;
pub mod dispatch;
pub mod edge;
pub mod error_class;
pub mod hook;
pub mod intake;
pub mod metrics;
pub mod node;
pub mod queue;
pub mod replay;
pub mod runtime;
pub mod sinktest;
pub mod source;
pub mod store;
pub mod tenant;
