//! From text to a checked [`Config`], collecting every problem it can.

use std::collections::BTreeMap;
use std::path::Path;

use serde_norway::Value;
use thiserror::Error;

use super::{Config, interpolate, validate};

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

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read the config file {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{origin}: {} problem(s)\n{}", .problems.len(), list(.problems))]
    Invalid { origin: String, problems: Vec<Problem> },
}

impl ConfigError {
    pub fn problems(&self) -> &[Problem] {
        match self {
            ConfigError::Read { .. } => &[],
            ConfigError::Invalid { problems, .. } => problems,
        }
    }
}

fn list(problems: &[Problem]) -> String {
    problems.iter().map(|p| format!("  - {p}")).collect::<Vec<_>>().join("\n")
}

/// Read and check the file at `path`; `env` is the environment it is
/// interpolated from and overridden by.
pub fn load(path: &Path, env: &BTreeMap<String, String>) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| ConfigError::Read { path: path.display().to_string(), source })?;
    load_str(&text, &path.display().to_string(), env)
}

/// Check configuration text; `origin` names it in the error.
pub fn load_str(text: &str, origin: &str, env: &BTreeMap<String, String>) -> Result<Config, ConfigError> {
    let tree: Value = serde_norway::from_str(text).map_err(|e| ConfigError::Invalid {
        origin: origin.to_string(),
        problems: vec![Problem::new("", e.to_string())],
    })?;
    from_tree(tree, origin, env)
}

/// The embedded default ([`Config::demo`]) with the environment's
/// overrides applied.
pub fn load_default(env: &BTreeMap<String, String>) -> Result<Config, ConfigError> {
    let tree = serde_norway::to_value(Config::demo()).unwrap_or(Value::Null);
    from_tree(tree, "the default configuration", env)
}

fn from_tree(mut tree: Value, origin: &str, env: &BTreeMap<String, String>) -> Result<Config, ConfigError> {
    let invalid = |problems| ConfigError::Invalid { origin: origin.to_string(), problems };
    if tree.is_null() {
        tree = Value::Mapping(Default::default());
    }
    let mut problems = interpolate::resolve(&mut tree, env);
    problems.extend(interpolate::apply_overrides(&mut tree, env));
    if !problems.is_empty() {
        return Err(invalid(problems));
    }
    let config: Config = serde_path_to_error::deserialize(tree).map_err(|e| invalid(vec![typing_problem(&e)]))?;
    let problems = validate::check(&config);
    if problems.is_empty() { Ok(config) } else { Err(invalid(problems)) }
}

/// A type error at its path; an unknown key is named itself, not only
/// the map that holds it.
fn typing_problem(e: &serde_path_to_error::Error<serde_norway::Error>) -> Problem {
    let path = e.path().to_string();
    let path = if path == "." { String::new() } else { path };
    let message = e.inner().to_string();
    let unknown = message.strip_prefix("unknown field `").and_then(|rest| rest.split('`').next()).map(str::to_string);
    match unknown {
        // The path may or may not end at the unknown key itself.
        Some(field) if path.is_empty() || path == field => Problem::new(field, message),
        Some(field) if path.ends_with(&format!(".{field}")) => Problem::new(path, message),
        Some(field) => Problem::new(format!("{path}.{field}"), message),
        None => Problem::new(path, message),
    }
}
