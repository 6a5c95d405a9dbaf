//! A compiled component checked against the sink world, ready to
//! instantiate many times (`InstancePre` made once per component).

use wasmtime::Engine;
use wasmtime::component::{Component, InstancePre, Linker};

use super::bindings::{BatchIndices, SINK_INTERFACE, SinkIndices, WIT_VERSION};
use super::cache::Compiled;
use super::error::ComponentError;
use super::state::InstanceState;

/// What a component imports and exports, for `ankusa sink inspect`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ComponentInfo {
    pub sha256: String,
    pub world: String,
    pub imports: Vec<String>,
    pub exports: Vec<String>,
}

#[derive(Clone)]
pub struct SinkComponent {
    pub pre: InstancePre<InstanceState>,
    /// Where `ankusa:sink/sink` is among the exports.
    pub sink: SinkIndices,
    /// Where `ankusa:sink/batch` is, if the component exports it.
    pub batch: Option<BatchIndices>,
}

/// The WIT interfaces (`ns:pkg/name@version`) among a component's imports
/// or exports. Plain names are left out: the sink worlds have none, and
/// some toolchains add their own (componentize-py exports `exports`).
fn interface_names<'a, T>(items: impl Iterator<Item = (&'a str, T)>) -> Vec<String> {
    items.filter(|(name, _)| name.contains(':')).map(|(name, _)| name.to_string()).collect()
}

pub fn describe(engine: &Engine, compiled: &Compiled) -> ComponentInfo {
    let ty = compiled.component.component_type();
    let exports = interface_names(ty.exports(engine));
    let batches = exports.iter().any(|name| name.starts_with(BATCH_INTERFACE));
    let world = if batches { "batch-sink-world" } else { "sink-world" };
    ComponentInfo {
        sha256: compiled.sha256.clone(),
        world: format!("ankusa:sink/{world}@{WIT_VERSION}"),
        imports: interface_names(ty.imports(engine)),
        exports,
    }
}

/// The optional export of a sink that takes hooks a batch at a time.
const BATCH_INTERFACE: &str = "ankusa:sink/batch@";

/// Is `found` (a semver) compatible with the version this host speaks?
/// Same major; for 0.x, same minor too.
fn compatible(found: &str) -> bool {
    let parts = |v: &str| -> Vec<u64> { v.split(['.', '-', '+']).take(2).filter_map(|p| p.parse().ok()).collect() };
    let (ours, theirs) = (parts(WIT_VERSION), parts(found));
    match (ours.as_slice(), theirs.as_slice()) {
        ([0, minor], [0, their_minor]) => minor == their_minor,
        ([major, _], [their_major, _]) => major == their_major,
        _ => false,
    }
}

/// Check the component exports our sink interface at a compatible version,
/// that the host can satisfy its imports, and build its `InstancePre`.
pub fn prepare(
    engine: &Engine,
    linker: &Linker<InstanceState>,
    compiled: &Compiled,
) -> Result<SinkComponent, ComponentError> {
    let component: &Component = &compiled.component;
    let exports = interface_names(component.component_type().exports(engine));
    let prefix = format!("{SINK_INTERFACE}@");
    match exports.iter().find_map(|name| name.strip_prefix(&prefix)) {
        None => {
            let exports = if exports.is_empty() { "nothing".to_string() } else { exports.join(", ") };
            return Err(ComponentError::NotASink { exports, speaks: WIT_VERSION });
        }
        Some(found) if !compatible(found) => {
            return Err(ComponentError::WrongVersion { found: found.to_string(), speaks: WIT_VERSION });
        }
        Some(_) => {}
    }
    let pre = linker.instantiate_pre(component).map_err(|e| ComponentError::WrongWorld(format!("{e:#}")))?;
    let sink = SinkIndices::new(&pre).map_err(|e| ComponentError::WrongWorld(format!("{e:#}")))?;
    // Optional: a component without it delivers one hook per call.
    let batch = BatchIndices::new(&pre).ok();
    Ok(SinkComponent { pre, sink, batch })
}

#[cfg(test)]
mod tests {
    use super::compatible;

    #[test]
    fn only_the_same_zero_minor_is_compatible() {
        assert!(compatible("0.1.0"));
        assert!(compatible("0.1.7"));
        assert!(!compatible("0.2.0"));
        assert!(!compatible("1.0.0"));
        assert!(!compatible("garbage"));
    }
}
