//! Errors of the sink runtime. Each names what failed and why; loading
//! errors also name the source and sink, so boot refusals are actionable.

use std::path::PathBuf;

use thiserror::Error;

use super::egress::PolicyError;
use super::labels::SinkLabel;

#[derive(Debug, Error)]
pub enum RuntimeError {
    #[error("wasm engine: {0}")]
    Engine(String),
    #[error("TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
}

/// Why a component cannot be used as a sink.
#[derive(Debug, Error)]
pub enum ComponentError {
    #[error("not a WebAssembly component: {0}")]
    NotWasm(String),
    #[error(
        "a core WebAssembly module, not a component (build for wasm32-wasip2, or wrap it with `wasm-tools component new`)"
    )]
    CoreModule,
    #[error("cannot compile: {0}")]
    Compile(String),
    #[error(
        "built for ankusa:sink@{found}, but this host speaks ankusa:sink@{speaks}; rebuild it against this version of the WIT"
    )]
    WrongVersion { found: String, speaks: &'static str },
    #[error("does not export `ankusa:sink/sink@{speaks}`, so it is not a sink (it exports: {exports})")]
    NotASink { exports: String, speaks: &'static str },
    #[error("does not export `ankusa:sink/transform@{speaks}`, so it is not a transform (it exports: {exports})")]
    NotATransform { exports: String, speaks: &'static str },
    #[error("imports `{0}`: a transform may not reach the network (transform-world imports only log and clocks)")]
    TransformNetwork(String),
    #[error("does not fit the ankusa:sink world: {0}")]
    WrongWorld(String),
}

/// Why a configured sink could not be loaded.
#[derive(Debug, Error)]
pub enum LoadError {
    #[error("{label}: cannot read component {}: {source}", path.display())]
    Read { label: SinkLabel, path: PathBuf, source: std::io::Error },
    #[error("{label}: component {origin} {source}")]
    Component { label: SinkLabel, origin: String, source: ComponentError },
    #[error("{label}: unknown built-in `{name}` (built in: {available})")]
    UnknownBuiltin { label: SinkLabel, name: String, available: String },
    #[error("{label}: {source}")]
    Policy { label: SinkLabel, source: PolicyError },
    #[error("{label}: {source}")]
    Tls { label: SinkLabel, source: crate::tls::TlsConfigError },
    #[error("{label}: options rejected{}: {message}", field.as_ref().map(|f| format!(" at `{f}`")).unwrap_or_default())]
    Options { label: SinkLabel, field: Option<String>, message: String },
    #[error("{label}: options are not valid JSON: {0}", .source)]
    OptionsJson { label: SinkLabel, source: serde_json::Error },
    #[error("{label}: instance failed to start: {reason}")]
    Init { label: SinkLabel, reason: String },
    #[error("{label}: {reason}")]
    Limits { label: SinkLabel, reason: String },
    #[error("{label}: directory {}: {reason}", path.display())]
    Directory { label: SinkLabel, path: PathBuf, reason: String },
}

impl LoadError {
    /// The sink (or transform) that failed to load.
    pub fn label(&self) -> &SinkLabel {
        match self {
            LoadError::Read { label, .. }
            | LoadError::Component { label, .. }
            | LoadError::UnknownBuiltin { label, .. }
            | LoadError::Policy { label, .. }
            | LoadError::Tls { label, .. }
            | LoadError::Options { label, .. }
            | LoadError::OptionsJson { label, .. }
            | LoadError::Init { label, .. }
            | LoadError::Limits { label, .. }
            | LoadError::Directory { label, .. } => label,
        }
    }
}
