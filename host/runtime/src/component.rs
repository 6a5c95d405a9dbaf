//! A compiled component checked against the sink world, ready to
//! instantiate many times (`InstancePre` made once per component).

use wasmtime::Engine;
use wasmtime::component::{Component, InstancePre, Linker};

use super::bindings::transform_world::TransformIndices;
use super::bindings::{BatchIndices, SINK_INTERFACE, SinkIndices, TRANSFORM_INTERFACE, WIT_VERSION};
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

/// A compiled component checked against the transform world.
#[derive(Clone)]
pub struct TransformComponent {
    pub pre: InstancePre<InstanceState>,
    pub transform: TransformIndices,
}

pub fn describe(engine: &Engine, compiled: &Compiled) -> ComponentInfo {
    let ty = compiled.component.component_type();
    let exports = interface_names(ty.exports(engine));
    let batches = exports.iter().any(|name| name.starts_with(BATCH_INTERFACE));
    let transforms = exports.iter().any(|name| name.starts_with(&format!("{TRANSFORM_INTERFACE}@")));
    let world = match (transforms, batches) {
        (true, _) => "transform-world",
        (false, true) => "batch-sink-world",
        (false, false) => "sink-world",
    };
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

/// Check the component exports `interface` at a compatible version;
/// `missing` is the error when it does not.
fn check_export(
    engine: &Engine,
    component: &Component,
    interface: &str,
    missing: impl FnOnce(String) -> ComponentError,
) -> Result<(), ComponentError> {
    let exports = interface_names(component.component_type().exports(engine));
    let prefix = format!("{interface}@");
    match exports.iter().find_map(|name| name.strip_prefix(&prefix)) {
        None => {
            let exports = if exports.is_empty() { "nothing".to_string() } else { exports.join(", ") };
            Err(missing(exports))
        }
        Some(found) if !compatible(found) => {
            Err(ComponentError::WrongVersion { found: found.to_string(), speaks: WIT_VERSION })
        }
        Some(_) => Ok(()),
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
    check_export(engine, component, SINK_INTERFACE, |exports| ComponentError::NotASink {
        exports,
        speaks: WIT_VERSION,
    })?;
    let pre = linker.instantiate_pre(component).map_err(|e| ComponentError::WrongWorld(format!("{e:#}")))?;
    let sink = SinkIndices::new(&pre).map_err(|e| ComponentError::WrongWorld(format!("{e:#}")))?;
    // Optional: a component without it delivers one hook per call.
    let batch = BatchIndices::new(&pre).ok();
    Ok(SinkComponent { pre, sink, batch })
}

/// The imports of the sink world that reach the network: a transform
/// has none of them. (A component's toolchain may import `wasi:sockets`,
/// `wasi:filesystem` or `wasi:http/types` for its runtime; a transform's
/// instances get no address they may reach and no directory, so those
/// only fail, and types send nothing.)
const NETWORK_IMPORTS: &[&str] =
    &["ankusa:sink/http-client@", "ankusa:sink/tcp-client@", "wasi:http/outgoing-handler@"];

/// Check the component is a transform: it exports our transform
/// interface at a compatible version and imports nothing of the network.
pub fn prepare_transform(
    engine: &Engine,
    linker: &Linker<InstanceState>,
    compiled: &Compiled,
) -> Result<TransformComponent, ComponentError> {
    let component: &Component = &compiled.component;
    check_export(engine, component, TRANSFORM_INTERFACE, |exports| ComponentError::NotATransform {
        exports,
        speaks: WIT_VERSION,
    })?;
    let imports = interface_names(component.component_type().imports(engine));
    if let Some(network) = imports.iter().find(|name| NETWORK_IMPORTS.iter().any(|n| name.starts_with(n))) {
        return Err(ComponentError::TransformNetwork(network.clone()));
    }
    let pre = linker.instantiate_pre(component).map_err(|e| ComponentError::WrongWorld(format!("{e:#}")))?;
    let transform = TransformIndices::new(&pre).map_err(|e| ComponentError::WrongWorld(format!("{e:#}")))?;
    Ok(TransformComponent { pre, transform })
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
