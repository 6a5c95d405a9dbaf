//! The queue's tests, one binary: each module one area of the queue. They
//! link the queue and the store only, not the node or the component
//! runtime (`cargo test -p ankusa-queue`).

mod archive;
mod common;
mod dlq;
mod enqueue;
mod filtered;
mod lines;
mod model;
mod rows;
mod settle;
mod tenants;
