//! Socket egress (`wasi:sockets`) for sinks that speak their own protocol
//! over TCP. TCP and name lookups are on so that every connect reaches the
//! gate here, which admits only addresses of the sink's `tcp://` allow
//! entries (named literally, or found by the host's own lookup of an
//! entry's host name) under the address policy, and records each refusal
//! (a connect refused earlier would not be classed `denied`). Binds other
//! than a connect's implicit one, listens and UDP are refused.

use std::sync::Arc;

use wasmtime::component::Linker;
use wasmtime_wasi::sockets::SocketAddrUse;

use super::{Capability, InstanceBuilder, SinkCapability, SinkContext};
use crate::egress::{EgressCounter, EgressPolicy, Resolver};
use crate::error::LoadError;
use crate::state::InstanceState;

pub struct Sockets;

/// One sink's gate: its egress policy, the resolver its host names are
/// checked with, and where connects are counted.
struct SocketGate {
    policy: Arc<EgressPolicy>,
    resolver: Resolver,
    counter: Arc<EgressCounter>,
}

impl Capability for Sockets {
    /// `wasi:sockets` is part of the WASI base the sandbox links.
    fn link(&self, _linker: &mut Linker<InstanceState>) -> wasmtime::Result<()> {
        Ok(())
    }

    fn for_sink(&self, sink: &SinkContext) -> Result<Arc<dyn SinkCapability>, LoadError> {
        Ok(Arc::new(SocketGate {
            policy: sink.egress.policy.clone(),
            resolver: sink.egress.resolver.clone(),
            counter: sink.egress.counter.clone(),
        }))
    }
}

impl SinkCapability for SocketGate {
    fn prepare(&self, instance: &mut InstanceBuilder) -> wasmtime::Result<()> {
        instance.wasi.allow_tcp(true);
        // A guest resolves a server's name itself; the gate resolves it
        // again before admitting the connect.
        instance.wasi.allow_ip_name_lookup(true);
        let (policy, resolver, counter) = (self.policy.clone(), self.resolver.clone(), self.counter.clone());
        let denials = instance.denials.clone();
        instance.wasi.socket_addr_check(move |addr, usage| {
            let (policy, resolver, counter, denials) =
                (policy.clone(), resolver.clone(), counter.clone(), denials.clone());
            Box::pin(async move {
                match usage {
                    // A refused connect is recorded, so the attempt is classed
                    // `denied` whatever the guest makes of the error.
                    SocketAddrUse::TcpConnect => match policy.check_connect(&resolver, addr.ip(), addr.port()).await {
                        Ok(()) => {
                            counter.connecting();
                            true
                        }
                        Err(denied) => {
                            tracing::warn!(%denied, "socket egress denied");
                            counter.refused();
                            denials.record(denied);
                            false
                        }
                    },
                    // The implicit bind before a connect uses the wildcard address.
                    SocketAddrUse::TcpBind => addr.ip().is_unspecified() && addr.port() == 0,
                    _ => false,
                }
            })
        });
        Ok(())
    }
}
