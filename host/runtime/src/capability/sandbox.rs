//! The base every sink runs in: WASI preview 2 (which Rust's std and the
//! componentize runtimes import even when a sink never prints) with no
//! ambient authority, and the types of the `ankusa:sink/delivery`
//! interface. The context starts empty (no arguments, environment, stdin,
//! directories or sockets); the other capabilities open what they grant.

use std::sync::Arc;

use wasmtime::component::{HasSelf, Linker};

use super::{Capability, InstanceBuilder, SinkCapability, SinkContext};
use crate::bindings::ankusa;
use crate::error::LoadError;
use crate::state::InstanceState;

pub struct Sandbox;

impl Capability for Sandbox {
    fn link(&self, linker: &mut Linker<InstanceState>) -> wasmtime::Result<()> {
        wasmtime_wasi::p2::add_to_linker_async(linker)?;
        ankusa::sink::delivery::add_to_linker::<_, HasSelf<InstanceState>>(linker, |s| s)
    }

    fn for_sink(&self, _sink: &SinkContext) -> Result<Arc<dyn SinkCapability>, LoadError> {
        Ok(Arc::new(Sandbox))
    }
}

impl SinkCapability for Sandbox {
    /// Nothing to grant: a fresh [`InstanceBuilder`] holds no authority.
    fn prepare(&self, _instance: &mut InstanceBuilder) -> wasmtime::Result<()> {
        Ok(())
    }
}

impl ankusa::sink::delivery::Host for InstanceState {}
