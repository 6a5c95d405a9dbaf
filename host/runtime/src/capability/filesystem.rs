//! The `file` sink's filesystem: one host directory, given in the sink's
//! configuration (`directory:`), preopened read-write as `/`. A sink
//! without one sees no filesystem at all.

use std::path::PathBuf;
use std::sync::Arc;

use wasmtime::component::Linker;
use wasmtime_wasi::FsPerms;

use super::{Capability, InstanceBuilder, SinkCapability, SinkContext};
use crate::error::LoadError;
use crate::state::InstanceState;

pub struct Filesystem;

/// A sink's filesystem settings, as written (`directory`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FilesystemSettings {
    /// A host directory the component sees as `/`, read-write: its only
    /// filesystem (the `file` sink's output). None by default.
    pub directory: Option<PathBuf>,
}

/// One sink's directory, checked when the sink loads.
struct Preopen(Option<PathBuf>);

impl Capability for Filesystem {
    /// `wasi:filesystem` is part of the WASI base the sandbox links.
    fn link(&self, _linker: &mut Linker<InstanceState>) -> wasmtime::Result<()> {
        Ok(())
    }

    fn for_sink(&self, sink: &SinkContext) -> Result<Arc<dyn SinkCapability>, LoadError> {
        if let Some(path) = &sink.filesystem.directory {
            let reason = match std::fs::metadata(path) {
                Ok(meta) if meta.is_dir() => None,
                Ok(_) => Some("not a directory".to_string()),
                Err(e) => Some(e.to_string()),
            };
            if let Some(reason) = reason {
                return Err(LoadError::Directory { label: sink.label.clone(), path: path.clone(), reason });
            }
        }
        Ok(Arc::new(Preopen(sink.filesystem.directory.clone())))
    }
}

impl SinkCapability for Preopen {
    fn prepare(&self, instance: &mut InstanceBuilder) -> wasmtime::Result<()> {
        if let Some(directory) = &self.0 {
            instance.wasi.preopened_dir(directory, "/", FsPerms::ReadWrite)?;
        }
        Ok(())
    }
}
