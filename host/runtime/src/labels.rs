//! The labels that name a configured sink in logs, errors and metrics.

use std::fmt;

/// Which configured sink something is about: its source and its name there.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SinkLabel {
    pub source: String,
    pub sink: String,
}

impl SinkLabel {
    pub fn new(source: impl Into<String>, sink: impl Into<String>) -> Self {
        SinkLabel { source: source.into(), sink: sink.into() }
    }
}

impl fmt::Display for SinkLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "source `{}`, sink `{}`", self.source, self.sink)
    }
}
