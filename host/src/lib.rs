//! Ankusa: a self-hosted webhook receiver whose delivery sinks are
//! WebAssembly components.
//!
//! Subsystems, each in its own folder, with dependencies pointing one way
//! (see `ARCHITECTURE.md`):
//! - [`store`]: durable storage behind the `Store` trait (RocksDB), and
//!   every key layout;
//! - [`intake`]: the intake logs: a second durable copy of each group
//!   behind `IntakeLog` (`wal.mode: dual`), and the replicated log of hooks
//!   behind `HookLog` (`wal.mode: fleet`);
//! - [`queue`]: hooks and delivery rows, their formats and states, the
//!   commit path, the DLQ, job records;
//! - [`runtime`] (the `ankusa-runtime` crate): loads sink components and
//!   runs deliveries, sandboxed, one module per capability;
//! - [`source`]: sources: verification, admission, dedupe keys, forwarded
//!   headers, loading and reload;
//! - [`edge`]: HTTP ingest: routing, limits, the batcher;
//! - [`dispatch`]: delivers due rows through sink components;
//! - [`fleet`]: `wal.mode: fleet` on NATS JetStream: the replicated
//!   intake, leases and takeovers;
//! - [`replay`]: durable jobs that move rows back into delivery;
//! - [`tenant`]: runtime sources, rate limits and erasure of tenants;
//! - [`config`]: `ankusa.yml`, composed from each subsystem's settings;
//! - [`settings`]: what those settings share (secrets, durations);
//! - [`problem`]: a configuration problem, named by its key;
//! - [`node`]: the running node, started from a config;
//! - [`admin`]: the admin API; [`cli`]: the `ankusa` command line;
//! - [`sinktest`]: scripted peers and JSON test cases for sink components;
//! - [`authoring`]: what a sink author gets from the binary (the WIT);
//! - [`metrics`], [`digest`], [`error_class`]: shared leaves.

pub mod admin;
pub mod authoring;
pub mod cli;
pub mod config;
pub mod dispatch;
pub mod edge;
pub mod fleet;
pub mod node;
pub mod replay;
pub mod source;
pub mod telemetry;
pub mod tenant;

// The component runtime is a crate of its own (`ankusa-runtime`, all a
// sink author's tests build); named here as the node's own module.
pub use ankusa_runtime as runtime;
pub use ankusa_runtime::sinktest;

// The storage, the queue and what every crate shares are crates of their
// own too (`ankusa-store`, `ankusa-queue`, `ankusa-common`), so the layers
// below the node cannot reach up into it.
pub use ankusa_common::{digest, error_class, metrics, problem, rate, settings};
pub use ankusa_queue::queue;
pub use ankusa_store::{intake, records, store};
