//! Hot reload: every sink whose component file changed since it was
//! loaded is loaded again and swapped into its source. Deliveries already
//! running finish on the old instance; the next ones use the new. A
//! component that fails to load leaves the old one running.

use std::sync::Arc;

use super::{LiveDirectory, SinkBinding};
use crate::runtime::{ComponentSource, Runtime, SinkSpec};

/// What a sink reload did.
#[derive(Clone, Debug, Default, serde::Serialize, utoipa::ToSchema)]
pub struct ReloadReport {
    /// Sinks now running a new component: (source, sink, old sha256, new sha256).
    pub swapped: Vec<Swapped>,
    /// Sinks whose component had not changed.
    pub unchanged: usize,
    /// Sinks whose new component failed to load (the old one keeps running).
    pub failed: Vec<ReloadFailure>,
}

#[derive(Clone, Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Swapped {
    pub source: String,
    pub sink: String,
    pub from: String,
    pub to: String,
}

#[derive(Clone, Debug, serde::Serialize, utoipa::ToSchema)]
pub struct ReloadFailure {
    pub source: String,
    pub sink: String,
    pub reason: String,
}

/// Reload the changed sinks of every source in `sources`; `spec_of(source,
/// sink)` says what each configured sink loads (`None`: not configured, so
/// kept as it is).
pub async fn reload_sinks(
    sources: &LiveDirectory,
    runtime: &Runtime,
    spec_of: impl Fn(&str, &str) -> Option<SinkSpec>,
) -> ReloadReport {
    let mut report = ReloadReport::default();
    for (source, origin) in sources.all() {
        let mut bindings = Vec::with_capacity(source.sinks.len());
        let mut changed = false;
        for binding in &source.sinks {
            let name = binding.sink.label().sink.clone();
            let Some(spec) = spec_of(&source.name, &name) else {
                bindings.push(binding.clone());
                continue;
            };
            let current = match &spec.component {
                ComponentSource::Path(path) => std::fs::read(path).map(|b| crate::digest::sha256_hex(&b)),
                ComponentSource::Bytes { bytes, .. } => Ok(crate::digest::sha256_hex(bytes)),
                ComponentSource::Builtin(_) => Ok(binding.sink.sha256().to_string()),
            };
            let fresh = match current {
                Ok(sha) if sha == binding.sink.sha256() => None,
                Ok(_) => Some(runtime.load(spec).await.map_err(|e| e.to_string())),
                Err(e) => Some(Err(format!("cannot read the component: {e}"))),
            };
            match fresh {
                None => {
                    report.unchanged += 1;
                    bindings.push(binding.clone());
                }
                Some(Ok(sink)) => {
                    report.swapped.push(Swapped {
                        source: source.name.clone(),
                        sink: name,
                        from: binding.sink.sha256().to_string(),
                        to: sink.sha256().to_string(),
                    });
                    bindings.push(SinkBinding { sink: Arc::new(sink), ..binding.clone() });
                    changed = true;
                }
                Some(Err(reason)) => {
                    tracing::error!(source = %source.name, sink = %name, "reload failed, keeping the loaded component: {reason}");
                    report.failed.push(ReloadFailure { source: source.name.clone(), sink: name, reason });
                    bindings.push(binding.clone());
                }
            }
        }
        if changed {
            let mut swapped = (*source).clone();
            swapped.sinks = bindings;
            sources.insert(swapped, origin);
        }
    }
    for s in &report.swapped {
        tracing::info!(source = %s.source, sink = %s.sink, from = %&s.from[..12], to = %&s.to[..12], "sink reloaded");
    }
    report
}
