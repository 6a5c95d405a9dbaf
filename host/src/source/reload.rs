//! Hot reload: every sink (and every transform of a binding) whose
//! component file changed since it was loaded is loaded again and swapped
//! into its source. Deliveries already running finish on the old instance;
//! the next ones use the new. A component that fails to load leaves the
//! old one running.

use std::sync::Arc;

use super::LiveDirectory;
use crate::runtime::{ComponentSource, LoadError, Runtime, SinkSpec, Transform, TransformSpec};

/// What a sink reload did.
#[derive(Clone, Debug, Default, serde::Serialize, utoipa::ToSchema)]
pub struct ReloadReport {
    /// Sinks (or transforms) now running a new component: (source, sink,
    /// transform, old sha256, new sha256).
    pub swapped: Vec<Swapped>,
    /// Sinks and transforms whose component had not changed.
    pub unchanged: usize,
    /// Those whose new component failed to load (the old one keeps running).
    pub failed: Vec<ReloadFailure>,
}

#[derive(Clone, Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Swapped {
    pub source: String,
    pub sink: String,
    /// Set when it is a transform of the binding that was swapped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transform: Option<String>,
    pub from: String,
    pub to: String,
}

#[derive(Clone, Debug, serde::Serialize, utoipa::ToSchema)]
pub struct ReloadFailure {
    pub source: String,
    pub sink: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transform: Option<String>,
    pub reason: String,
}

/// What each configured component loads as: `sink(source, sink)` and
/// `transform(name)` (`None`: not configured, so kept as it is).
pub struct Specs<S, T> {
    pub sink: S,
    pub transform: T,
}

/// The sha256 `component` has now, if it is not the `loaded` one: a file
/// is read again, a built-in never changes.
fn changed(component: &ComponentSource, loaded: &str) -> Option<Result<(), String>> {
    let current = match component {
        ComponentSource::Path(path) => std::fs::read(path).map(|b| crate::digest::sha256_hex(&b)),
        ComponentSource::Bytes { bytes, .. } => Ok(crate::digest::sha256_hex(bytes)),
        ComponentSource::Builtin(_) => Ok(loaded.to_string()),
    };
    match current {
        Ok(sha) if sha == loaded => None,
        Ok(_) => Some(Ok(())),
        Err(e) => Some(Err(format!("cannot read the component: {e}"))),
    }
}

/// A component loaded again where `change` says its file changed: `None`
/// when it did not.
async fn reload<T>(
    change: Option<Result<(), String>>,
    load: impl AsyncFnOnce() -> Result<T, LoadError>,
) -> Option<Result<T, String>> {
    match change? {
        Err(reason) => Some(Err(reason)),
        Ok(()) => Some(load().await.map_err(|e| e.to_string())),
    }
}

/// Reload the changed sinks and transforms of every source in `sources`.
pub async fn reload_sinks(
    sources: &LiveDirectory,
    runtime: &Runtime,
    specs: Specs<impl Fn(&str, &str) -> Option<SinkSpec>, impl Fn(&str) -> Option<TransformSpec>>,
) -> ReloadReport {
    let mut report = ReloadReport::default();
    for (source, origin) in sources.all() {
        let mut bindings = Vec::with_capacity(source.sinks.len());
        let mut changed_any = false;
        for binding in &source.sinks {
            let name = binding.sink.label().sink.clone();
            let mut next = binding.clone();
            let mut note = |transform: Option<&str>, from: &str, fresh: Result<String, String>| match fresh {
                Ok(to) => report.swapped.push(Swapped {
                    source: source.name.clone(),
                    sink: name.clone(),
                    transform: transform.map(str::to_string),
                    from: from.to_string(),
                    to,
                }),
                Err(reason) => {
                    tracing::error!(source = %source.name, sink = %name, transform, "reload failed, keeping the loaded component: {reason}");
                    report.failed.push(ReloadFailure {
                        source: source.name.clone(),
                        sink: name.clone(),
                        transform: transform.map(str::to_string),
                        reason,
                    });
                }
            };
            let mut unchanged = 0;
            let mut chain: Vec<Arc<Transform>> = Vec::with_capacity(binding.transforms.len());
            for transform in binding.transforms.iter() {
                let (name, loaded) = (Some(transform.name()), transform.sha256());
                let fresh = match (specs.transform)(transform.name()) {
                    Some(spec) => {
                        reload(changed(&spec.component, loaded), async || runtime.load_transform(spec).await).await
                    }
                    None => None,
                };
                match fresh {
                    None => {
                        unchanged += 1;
                        chain.push(transform.clone());
                    }
                    Some(Ok(fresh)) => {
                        note(name, loaded, Ok(fresh.sha256().to_string()));
                        chain.push(Arc::new(fresh));
                        changed_any = true;
                    }
                    Some(Err(reason)) => {
                        note(name, loaded, Err(reason));
                        chain.push(transform.clone());
                    }
                }
            }
            next.transforms = chain.into();
            let loaded = binding.sink.sha256();
            let fresh = match (specs.sink)(&source.name, &name) {
                Some(spec) => reload(changed(&spec.component, loaded), async || runtime.load(spec).await).await,
                None => None,
            };
            match fresh {
                None => unchanged += 1,
                Some(Ok(sink)) => {
                    note(None, loaded, Ok(sink.sha256().to_string()));
                    next.sink = Arc::new(sink);
                    changed_any = true;
                }
                Some(Err(reason)) => note(None, loaded, Err(reason)),
            }
            report.unchanged += unchanged;
            bindings.push(next);
        }
        if changed_any {
            let mut swapped = (*source).clone();
            swapped.sinks = bindings;
            sources.insert(swapped, origin);
        }
    }
    for s in &report.swapped {
        let (from, to) = (&s.from[..12.min(s.from.len())], &s.to[..12.min(s.to.len())]);
        match &s.transform {
            Some(t) => {
                tracing::info!(source = %s.source, sink = %s.sink, transform = %t, from, to, "transform reloaded")
            }
            None => tracing::info!(source = %s.source, sink = %s.sink, from, to, "sink reloaded"),
        }
    }
    report
}
