//! Testing sink components: scripted HTTP peers, a controllable clock,
//! captured logs, and JSON test cases that work for a component written in
//! any language (`ankusa sink test <wasm> <cases.json>`), for sinks and
//! for transforms (`transform_cases`).
//!
//! The sink under test runs in the real runtime — same engine, same pool,
//! same egress policy and timeouts — only the network is replaced by
//! [`ScriptedPeers`]. The Rust harness in `sdk/harness` builds on this.

pub mod cases;
mod hook;
mod peers;
pub mod transform_cases;
mod under_test;

pub use hook::TestHook;
pub use peers::{PeerReply, ScriptedPeers};
pub use under_test::{SinkUnderTest, TestSinkBuilder};
