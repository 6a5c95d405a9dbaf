//! Loading a source: its settings (checked from a config section or an
//! admin API body) into a running [`Source`], every sink's component
//! loaded with its options, and (under `wal.mode: none`) a durable sink
//! required. Every failure is a problem naming its key.

use std::sync::Arc;

use super::{DedupeRule, ForwardHeaders, OnVerifyFailure, OrderingRule, SinkBinding, Source, Verifier};
use crate::problem::Problem;
use crate::queue::{SinkDurability, SourceDurability, WalMode, check_durable};
use crate::runtime::{LoadError, Runtime, SinkSpec, TransformSpec};

/// What a source loads from.
pub struct SourceSettings {
    pub name: String,
    pub tenant: String,
    pub verifier: Option<Verifier>,
    pub on_verify_failure: OnVerifyFailure,
    pub dedupe: Option<DedupeRule>,
    pub forward_headers: ForwardHeaders,
    pub sinks: Vec<BindingSpec>,
}

/// One sink of a source to load: its index (delivery rows are keyed by it) and
/// what to load.
pub struct BindingSpec {
    pub index: u16,
    pub spec: SinkSpec,
    pub ordering: Option<OrderingRule>,
    /// Its chain of transforms, in order.
    pub transforms: Vec<TransformSpec>,
}

/// Load one source's sinks and check that it can run under `wal`.
pub async fn load(settings: SourceSettings, runtime: &Runtime, wal: WalMode) -> Result<Source, Vec<Problem>> {
    let mut problems = Vec::new();
    let mut sinks = Vec::with_capacity(settings.sinks.len());
    for BindingSpec { index, spec, ordering, transforms } in settings.sinks {
        let mut chain = Vec::with_capacity(transforms.len());
        for transform in transforms {
            match runtime.load_transform(transform).await {
                Ok(loaded) => chain.push(Arc::new(loaded)),
                Err(e) => problems.push(Problem::new(load_error_key(&e), e.to_string())),
            }
        }
        match runtime.load(spec).await {
            Ok(sink) => sinks.push(SinkBinding {
                index,
                sink: Arc::new(sink),
                ordering: ordering.map(Arc::new),
                transforms: chain.into(),
            }),
            Err(e) => problems.push(Problem::new(load_error_key(&e), e.to_string())),
        }
    }
    if problems.is_empty() {
        let durability = SourceDurability {
            source: settings.name.clone(),
            sinks: sinks
                .iter()
                .map(|b| SinkDurability { name: b.sink.label().sink.clone(), durable: b.sink.durable() })
                .collect(),
        };
        if let Err(e) = check_durable(wal, &durability) {
            problems.push(Problem::new(format!("sources.{}.sinks", settings.name), e.to_string()));
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(Source {
        name: settings.name,
        tenant: settings.tenant,
        verifier: settings.verifier,
        on_verify_failure: settings.on_verify_failure,
        dedupe: settings.dedupe,
        sinks,
        forward_headers: Arc::new(settings.forward_headers),
    })
}

/// Load every source, collecting every problem.
pub async fn load_all(
    settings: Vec<SourceSettings>,
    runtime: &Runtime,
    wal: WalMode,
) -> Result<Vec<Source>, Vec<Problem>> {
    let mut problems = Vec::new();
    let mut sources = Vec::with_capacity(settings.len());
    for one in settings {
        match load(one, runtime, wal).await {
            Ok(source) => sources.push(source),
            Err(mut more) => problems.append(&mut more),
        }
    }
    if problems.is_empty() { Ok(sources) } else { Err(problems) }
}

/// The key a sink's (or a transform's) load failure is about.
pub fn load_error_key(error: &LoadError) -> String {
    let label = error.label();
    let section = match label.is_transform() {
        true => format!("transforms.{}", label.sink),
        false => format!("sinks.{}", label.sink),
    };
    match error {
        LoadError::Options { .. } | LoadError::OptionsJson { .. } | LoadError::Init { .. } => {
            format!("{section}.options")
        }
        LoadError::Policy { .. } => format!("{section}.allow"),
        LoadError::Tls { source, .. } => format!("{section}.tls.{}", source.field()),
        LoadError::Limits { .. } => format!("{section}.memory_mib"),
        LoadError::Directory { .. } => format!("{section}.directory"),
        LoadError::Read { .. } | LoadError::Component { .. } | LoadError::UnknownBuiltin { .. } => {
            format!("{section}.component")
        }
    }
}
