//! A problem with a configuration, named by its key: what `check-config`,
//! a refused start and the admin API's source writes all report, listing
//! every one they find.

/// One thing wrong with a configuration, at a key (`sources.github.sinks[0]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The key's path; empty for the file as a whole.
    pub key: String,
    pub message: String,
}

impl Problem {
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Problem {
        Problem { key: key.into(), message: message.into() }
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.key.is_empty() { f.write_str(&self.message) } else { write!(f, "{}: {}", self.key, self.message) }
    }
}
