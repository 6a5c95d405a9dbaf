//! `${VAR}` / `${VAR:-default}` in values, and `ANKUSA_SECTION__KEY`
//! overrides, both applied to the YAML tree so a problem names its key.
//!
//! A value that is exactly one reference takes the type its text reads as
//! (`port: ${PORT}` is a number); a reference inside longer text is
//! spliced in as text. `$${` writes a literal `${`.

use std::collections::BTreeMap;

use serde_norway::{Mapping, Value};

use super::Problem;

/// Environment variables that override keys: `ANKUSA_` then the key's
/// path with `__` between segments (`ANKUSA_DISPATCH__CONCURRENCY=64`).
const OVERRIDE_PREFIX: &str = "ANKUSA_";
const OVERRIDE_SEPARATOR: &str = "__";

/// Replace every reference in `tree`'s values; every unresolved or
/// malformed one is a problem.
pub fn resolve(tree: &mut Value, env: &BTreeMap<String, String>) -> Vec<Problem> {
    let mut problems = Vec::new();
    walk(tree, &mut String::new(), env, &mut problems);
    problems
}

fn walk(value: &mut Value, path: &mut String, env: &BTreeMap<String, String>, problems: &mut Vec<Problem>) {
    match value {
        Value::String(text) if text.contains('$') => match substitute(text, env) {
            Ok(Substituted { text: new, whole }) => {
                *value = if whole { typed_scalar(&new) } else { Value::String(new) };
            }
            Err(message) => problems.push(Problem::new(path.clone(), message)),
        },
        Value::Sequence(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                walk(item, path, env, problems);
                path.truncate(len);
            }
        }
        Value::Mapping(map) => {
            for (key, item) in map.iter_mut() {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(&key_text(key));
                walk(item, path, env, problems);
                path.truncate(len);
            }
        }
        Value::Tagged(tagged) => walk(&mut tagged.value, path, env, problems),
        _ => {}
    }
}

fn key_text(key: &Value) -> String {
    match key {
        Value::String(s) => s.clone(),
        other => serde_norway::to_string(other).map(|s| s.trim_end().to_string()).unwrap_or_default(),
    }
}

struct Substituted {
    text: String,
    /// The value was one reference and nothing else.
    whole: bool,
}

fn substitute(text: &str, env: &BTreeMap<String, String>) -> Result<Substituted, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut references = 0;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(escaped) = after.strip_prefix("${") {
            out.push_str("${");
            rest = escaped;
            continue;
        }
        let Some(inner) = after.strip_prefix('{') else {
            out.push('$');
            rest = after;
            continue;
        };
        let Some(end) = inner.find('}') else {
            return Err(format!("`${{` without a closing `}}` in {text:?}"));
        };
        let reference = &inner[..end];
        let (name, default) = match reference.split_once(":-") {
            Some((name, default)) => (name, Some(default)),
            None => (reference, None),
        };
        if !valid_name(name) {
            return Err(format!(
                "`${{{reference}}}` is not a variable reference (use ${{NAME}} or ${{NAME:-default}})"
            ));
        }
        match (env.get(name), default) {
            (Some(v), _) => out.push_str(v),
            (None, Some(d)) => out.push_str(d),
            (None, None) => {
                return Err(format!("${{{name}}} is not set (give it a value or write ${{{name}:-default}})"));
            }
        }
        references += 1;
        rest = &inner[end + 1..];
    }
    out.push_str(rest);
    let whole = references == 1 && text.starts_with("${") && text.ends_with('}') && text.matches("${").count() == 1;
    Ok(Substituted { text: out, whole })
}

fn valid_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// The value text reads as in YAML when it is a number or a boolean, else
/// the text itself.
fn typed_scalar(text: &str) -> Value {
    match serde_norway::from_str::<Value>(text) {
        Ok(v @ (Value::Number(_) | Value::Bool(_))) => v,
        _ => Value::String(text.to_string()),
    }
}

/// Apply every `ANKUSA_A__B=value` in `env` to `tree` (creating sections
/// as needed).
pub fn apply_overrides(tree: &mut Value, env: &BTreeMap<String, String>) -> Vec<Problem> {
    let mut problems = Vec::new();
    for (name, value) in env {
        let Some(path) = name.strip_prefix(OVERRIDE_PREFIX) else { continue };
        if !path.contains(OVERRIDE_SEPARATOR) {
            continue;
        }
        let segments: Vec<String> = path.split(OVERRIDE_SEPARATOR).map(str::to_ascii_lowercase).collect();
        if segments.iter().any(String::is_empty) {
            problems.push(Problem::new("", format!("{name}: an empty key segment")));
            continue;
        }
        if let Err(at) = set_path(tree, &segments, typed_scalar(value)) {
            problems.push(Problem::new(segments[..=at].join("."), format!("{name} cannot be applied: not a section")));
        }
    }
    problems
}

/// Set `tree.a.b.c`; `Err(i)` when segment `i`'s parent is not a mapping.
fn set_path(tree: &mut Value, segments: &[String], value: Value) -> Result<(), usize> {
    let mut node = tree;
    for (i, segment) in segments.iter().enumerate() {
        if node.is_null() {
            *node = Value::Mapping(Mapping::new());
        }
        let Value::Mapping(map) = node else { return Err(i.saturating_sub(1)) };
        let key = Value::String(segment.clone());
        if i + 1 == segments.len() {
            map.insert(key, value);
            return Ok(());
        }
        node = map.entry(key).or_insert(Value::Null);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn references_resolve_with_defaults_escapes_and_types() {
        let env = env(&[("PORT", "8080"), ("HOST", "example.com")]);
        let mut tree: Value = serde_norway::from_str(
            "a: ${PORT}\nb: https://${HOST}:${PORT}/x\nc: ${MISSING:-fallback}\nd: $${LITERAL}\ne: cost $5",
        )
        .unwrap();
        assert!(resolve(&mut tree, &env).is_empty());
        assert_eq!(tree["a"], Value::Number(8080.into()));
        assert_eq!(tree["b"], Value::String("https://example.com:8080/x".into()));
        assert_eq!(tree["c"], Value::String("fallback".into()));
        assert_eq!(tree["d"], Value::String("${LITERAL}".into()));
        assert_eq!(tree["e"], Value::String("cost $5".into()));
    }

    #[test]
    fn unresolved_and_malformed_references_name_their_keys() {
        let mut tree: Value = serde_norway::from_str(
            "sources:\n  gh:\n    verify:\n      secret: [\"${GH_SECRET}\", ok]\nx: ${1BAD}\ny: ${OPEN",
        )
        .unwrap();
        let problems = resolve(&mut tree, &BTreeMap::new());
        let keys: Vec<&str> = problems.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(keys, ["sources.gh.verify.secret[0]", "x", "y"]);
        assert!(problems[0].message.contains("GH_SECRET"));
    }

    #[test]
    fn overrides_set_nested_keys_and_refuse_scalars() {
        let mut tree: Value = serde_norway::from_str("dispatch:\n  concurrency: 4\nwal: disk").unwrap();
        let env = env(&[
            ("ANKUSA_DISPATCH__CONCURRENCY", "64"),
            ("ANKUSA_HTTP__LISTEN", "127.0.0.1:9"),
            ("ANKUSA_WAL__MODE", "dual"),
            ("ANKUSA_LOG", "debug"),
        ]);
        let problems = apply_overrides(&mut tree, &env);
        assert_eq!(tree["dispatch"]["concurrency"], Value::Number(64.into()));
        assert_eq!(tree["http"]["listen"], Value::String("127.0.0.1:9".into()));
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].key, "wal");
        assert!(tree.get("log").is_none(), "ANKUSA_LOG is not an override");
    }
}
