//! The labels that name a configured sink in logs, errors and metrics.

use std::fmt;

/// Which configured sink something is about: its source and its name there.
/// A transform is named by its own name (in `sink`), its source empty (no
/// source can be called that).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SinkLabel {
    pub source: String,
    pub sink: String,
}

/// The `source` of a transform's label.
const TRANSFORM: &str = "";

impl SinkLabel {
    pub fn new(source: impl Into<String>, sink: impl Into<String>) -> Self {
        SinkLabel { source: source.into(), sink: sink.into() }
    }

    /// Whether this names a transform.
    pub fn is_transform(&self) -> bool {
        self.source == TRANSFORM
    }

    /// The label of the transform `name`.
    pub fn transform(name: impl Into<String>) -> Self {
        SinkLabel { source: TRANSFORM.into(), sink: name.into() }
    }
}

impl fmt::Display for SinkLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.source.as_str() {
            TRANSFORM => write!(f, "transform `{}`", self.sink),
            source => write!(f, "source `{source}`, sink `{}`", self.sink),
        }
    }
}
