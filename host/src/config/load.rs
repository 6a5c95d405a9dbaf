//! From text to a checked [`Config`], collecting every problem it can.

use std::collections::BTreeMap;
use std::path::Path;

use serde_norway::Value;
use thiserror::Error;

use super::{Config, interpolate, validate};
use crate::dispatch::DispatchConfig;
use crate::fleet::FleetSettings;
use crate::problem::Problem;
use crate::settings::as_millis;

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read the config file {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{origin}: {} problem(s)\n{}", .problems.len(), list(.problems))]
    Invalid {
        origin: String,
        problems: Vec<Problem>,
        /// The file as far as it typed (each bad key at its default), for
        /// checks that go on past these problems (`check-config` loads its
        /// sinks); `None` when it did not type at all.
        partial: Option<Box<Config>>,
    },
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
        partial: None,
    })?;
    from_tree(tree, origin, env)
}

/// The embedded default ([`Config::demo`]) with the environment's
/// overrides applied.
pub fn load_default(env: &BTreeMap<String, String>) -> Result<Config, ConfigError> {
    let tree = serde_norway::to_value(Config::demo()).unwrap_or(Value::Null);
    from_tree(tree, "the default configuration", env)
}

/// Every problem a configuration tree has, not just the first: a value
/// that cannot be resolved or typed is reported and taken out of the tree
/// (its default applies), and checking goes on with the rest. Checks of the
/// whole configuration run once it types, leaving out keys already named.
fn from_tree(mut tree: Value, origin: &str, env: &BTreeMap<String, String>) -> Result<Config, ConfigError> {
    /// Type errors reported at most; past them the rest is not checked.
    const MAX_TYPE_ERRORS: usize = 100;
    if tree.is_null() {
        tree = Value::Mapping(Default::default());
    }
    let mut problems = interpolate::resolve(&mut tree, env);
    problems.extend(interpolate::apply_overrides(&mut tree, env));
    fleet_attempt_timeout(&mut tree);
    let mut removed = Vec::new();
    // Last first: taking a sequence item out moves the ones after it.
    for problem in problems.iter().rev() {
        if !problem.key.is_empty() && take_out(&mut tree, &problem.key) {
            removed.push(problem.key.clone());
        }
    }
    let mut typed = None;
    for _ in 0..MAX_TYPE_ERRORS {
        match serde_path_to_error::deserialize::<_, Config>(tree.clone()) {
            Ok(config) => {
                typed = Some(config);
                break;
            }
            Err(e) => {
                let problem = typing_problem(&e);
                let taken = !problem.key.is_empty() && take_out(&mut tree, &problem.key);
                if !covered(&removed, &problem.key) {
                    problems.push(problem.clone());
                }
                if !taken {
                    break;
                }
                removed.push(problem.key);
            }
        }
    }
    if let Some(config) = &typed {
        problems.extend(validate::check(config).into_iter().filter(|p| !covered(&removed, &p.key)));
    }
    match typed {
        Some(config) if problems.is_empty() => Ok(config),
        partial => Err(ConfigError::Invalid { origin: origin.to_string(), problems, partial: partial.map(Box::new) }),
    }
}

/// Whether `key` is `removed`'s key or inside one of them.
fn covered(removed: &[String], key: &str) -> bool {
    removed.iter().any(|r| {
        key == r || key.strip_prefix(r.as_str()).is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
    })
}

/// `wal.mode: fleet`: an attempt left without a timeout gets half the
/// lease (at most the usual default). An attempt must end before a peer
/// could take its hook over, even one whose guest never yields (only its
/// timeout stops it); one set longer is refused by `validate`.
fn fleet_attempt_timeout(tree: &mut Value) {
    let at = |tree: &Value, section: &str, key: &str| tree.get(section).and_then(|s| s.get(key)).cloned();
    if at(tree, "wal", "mode").and_then(|m| m.as_str().map(str::to_string)).as_deref() != Some("fleet")
        || at(tree, "dispatch", "attempt_timeout_ms").is_some()
    {
        return;
    }
    let lease = at(tree, "fleet", "lease_ttl_ms")
        .and_then(|v| v.as_u64())
        .unwrap_or_else(|| as_millis(FleetSettings::default().lease_ttl));
    let timeout = as_millis(DispatchConfig::default().attempt_timeout).min(lease / 2).max(1);
    let Value::Mapping(root) = tree else { return };
    let dispatch = root.entry("dispatch".into()).or_insert_with(|| Value::Mapping(Default::default()));
    if let Value::Mapping(dispatch) = dispatch {
        dispatch.insert("attempt_timeout_ms".into(), timeout.into());
    }
}

/// Take the value at `path` (`a.b[2].c`) out of `tree`. `false` if there is
/// no such value.
fn take_out(tree: &mut Value, path: &str) -> bool {
    let mut segments = Vec::new();
    for part in path.split('.') {
        let (name, mut indexes) = match part.find('[') {
            Some(at) => (&part[..at], &part[at..]),
            None => (part, ""),
        };
        if !name.is_empty() {
            segments.push(Segment::Key(name));
        }
        while let Some(rest) = indexes.strip_prefix('[') {
            let Some((index, after)) = rest.split_once(']') else { return false };
            let Ok(index) = index.parse() else { return false };
            segments.push(Segment::Index(index));
            indexes = after;
        }
    }
    let Some((last, parents)) = segments.split_last() else { return false };
    let mut node = tree;
    for segment in parents {
        let next = match (segment, node) {
            (Segment::Key(key), Value::Mapping(map)) => map.get_mut(*key),
            (Segment::Index(i), Value::Sequence(items)) => items.get_mut(*i),
            _ => None,
        };
        match next {
            Some(next) => node = next,
            None => return false,
        }
    }
    match (last, node) {
        (Segment::Key(key), Value::Mapping(map)) => map.remove(*key).is_some(),
        (Segment::Index(i), Value::Sequence(items)) if *i < items.len() => {
            items.remove(*i);
            true
        }
        _ => false,
    }
}

enum Segment<'a> {
    Key(&'a str),
    Index(usize),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(yaml: &str, env: &[(&str, &str)]) -> Vec<String> {
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        match load_str(yaml, "test", &env) {
            Ok(_) => Vec::new(),
            Err(e) => e.problems().iter().map(|p| p.key.clone()).collect(),
        }
    }

    #[test]
    fn unknown_keys_unset_variables_and_bad_values_are_all_listed() {
        let yaml = "dispatch:\n  concurrency: 0\n  surprise: 1\nhttp:\n  max_body_bytes: ${BODY}\nbogus: true\n\
                    batcher: {partitions: many}\n";
        let mut keys = problems(yaml, &[]);
        keys.sort();
        assert_eq!(
            keys,
            ["batcher.partitions", "bogus", "dispatch.concurrency", "dispatch.surprise", "http.max_body_bytes"]
        );
    }

    #[test]
    fn a_value_taken_out_is_not_reported_twice() {
        // The unset variable's key is reported once, not again as a type
        // error or by the checks that run on its default.
        let keys = problems("dispatch:\n  concurrency: ${CONC}\n", &[]);
        assert_eq!(keys, ["dispatch.concurrency"]);
    }

    #[test]
    fn a_fleet_attempt_ends_within_half_a_lease() {
        let fleet = "wal: {mode: fleet}\nfleet: {nats: [\"nats://127.0.0.1:4222\"], node_id: a, lease_ttl_ms: 4000}\n";
        let env = BTreeMap::new();
        let unset = load_str(fleet, "test", &env).expect("a fleet config without an attempt timeout");
        assert_eq!(unset.dispatch.attempt_timeout, std::time::Duration::from_millis(2000), "half the lease");
        let long = format!("{fleet}dispatch: {{attempt_timeout_ms: 2001}}\n");
        assert_eq!(problems(&long, &[]), ["dispatch.attempt_timeout_ms"]);
        let within = format!("{fleet}dispatch: {{attempt_timeout_ms: 2000}}\n");
        assert!(problems(&within, &[]).is_empty());
        // Outside a fleet the usual default stands.
        let disk = load_str("wal: {mode: disk}\n", "test", &env).expect("disk");
        assert_eq!(disk.dispatch.attempt_timeout, std::time::Duration::from_secs(30));
    }

    #[test]
    fn take_out_reaches_into_sequences() {
        let mut tree: Value = serde_norway::from_str("a:\n  b: [1, {c: 2, d: 3}]\n").expect("yaml");
        assert!(take_out(&mut tree, "a.b[1].c"));
        assert!(!take_out(&mut tree, "a.b[1].c"));
        assert!(take_out(&mut tree, "a.b[0]"));
        assert_eq!(serde_norway::to_string(&tree).expect("yaml"), "a:\n  b:\n  - d: 3\n");
        assert!(!take_out(&mut tree, "a.b[5]"));
        assert!(!take_out(&mut tree, "nothing.here"));
    }
}
