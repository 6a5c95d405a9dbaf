//! What a sink component may use, one module per capability, each in the
//! same three steps (the shape of Spin's factors):
//!
//! 1. [`Capability::link`]: add its imports to the linker every sink is
//!    checked against, once per engine;
//! 2. [`Capability::for_sink`]: build the state every instance of one sink
//!    shares (a pooled client, a log channel, the sink's directory, its TLS), when
//!    the sink loads;
//! 3. [`SinkCapability::prepare`]: set up one new instance (its WASI
//!    context, its own state in [`Extensions`]).
//!
//! The engine and the instance factory loop over [`ALL`]; adding a
//! capability is one new module and one entry there. The egress policy the
//! network capabilities consume lives beside this, in `runtime::egress`.

pub mod clocks;
pub mod connector;
mod filesystem;
pub mod http;
pub mod log;
mod sandbox;
mod sockets;
mod tcp_client;

pub use filesystem::FilesystemSettings;
pub use tcp_client::Connection as TcpConnection;

use std::sync::Arc;

use wasmtime::component::Linker;
use wasmtime_wasi::WasiCtxBuilder;

use super::egress::Egress;
use super::error::LoadError;
use super::labels::SinkLabel;
use super::state::{AttemptTrace, Caller, DenialRecord, Extensions, InstanceState};

/// One capability of the sink host.
pub trait Capability: Sync {
    /// Add this capability's imports to the linker.
    fn link(&self, linker: &mut Linker<InstanceState>) -> wasmtime::Result<()>;
    /// Build the state one sink's instances share; a sink this capability
    /// cannot serve as configured fails to load.
    fn for_sink(&self, sink: &SinkContext) -> Result<Arc<dyn SinkCapability>, LoadError>;
}

/// A capability's state for one sink.
pub trait SinkCapability: Send + Sync {
    /// Set up a new instance of the sink.
    fn prepare(&self, instance: &mut InstanceBuilder) -> wasmtime::Result<()>;
}

/// Every capability, in the order each instance is set up.
pub const ALL: &[&dyn Capability] = &[
    &sandbox::Sandbox,
    &log::Log,
    &clocks::Clocks,
    &filesystem::Filesystem,
    &http::HttpEgressCapability,
    &sockets::Sockets,
    &tcp_client::TcpClient,
];

/// What a capability sees of the sink being loaded.
pub struct SinkContext {
    pub label: SinkLabel,
    /// The host directory the sink sees as `/`, if it has one.
    pub filesystem: FilesystemSettings,
    /// A controllable clock instead of the host's (plugin tests).
    pub clock: Option<Arc<clocks::ManualClock>>,
    pub http_limits: http::HttpLimits,
    /// Where HTTP requests go: the network, or scripted peers (tests).
    pub upstream: http::Upstream,
    /// Where the sink may connect, how its names resolve, and the count of
    /// its connects and refusals (HTTP and sockets both consume it).
    pub egress: Egress,
    /// The sink's log channel, shared with its pool and the harness.
    pub log: Arc<log::LogChannel>,
    /// The sink's TLS: trust roots, client certificate, server name.
    pub tls: Arc<crate::tls::SinkTls>,
}

/// A new instance being set up.
pub struct InstanceBuilder {
    pub wasi: WasiCtxBuilder,
    pub extensions: Extensions,
    /// Where the network capabilities record a refused connection, so the
    /// attempt is classed `denied` whatever the guest makes of the error.
    pub denials: DenialRecord,
    /// The running attempt's `traceparent`, for its HTTP requests.
    pub trace: AttemptTrace,
    /// The source the running call is for, for its log lines.
    pub caller: Caller,
}

impl InstanceBuilder {
    pub(super) fn new() -> InstanceBuilder {
        InstanceBuilder {
            wasi: WasiCtxBuilder::new(),
            extensions: Extensions::default(),
            denials: DenialRecord::default(),
            trace: AttemptTrace::default(),
            caller: Caller::default(),
        }
    }
}
