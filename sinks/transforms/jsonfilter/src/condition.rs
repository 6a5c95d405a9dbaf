//! Conditions: parsed from the options once (every error names its place,
//! `keep.all[1].gte`), then tested against each hook.

use std::fmt;

use ankusa_sdk::{ConfigError, Hook};
use serde_json::Value;

pub enum Condition {
    All(Vec<Condition>),
    Any(Vec<Condition>),
    Not(Box<Condition>),
    Test { at: Place, test: Test },
}

/// What a test reads: a JSON pointer into the body, or a header.
pub enum Place {
    Pointer(String),
    Header(String),
}

pub enum Test {
    Equals(Value),
    In(Vec<Value>),
    Exists(bool),
    Prefix(String),
    Compare(Compare, f64),
}

#[derive(Clone, Copy)]
pub enum Compare {
    Gt,
    Gte,
    Lt,
    Lte,
}

const TESTS: &str = "equals, in, exists, prefix, gt, gte, lt, lte";

impl Condition {
    /// The condition `value` states; `path` names it in errors.
    pub fn parse(value: &Value, path: &str) -> Result<Condition, ConfigError> {
        let Value::Object(map) = value else {
            return Err(ConfigError::field(path, "a condition is a map: all, any, not, or pointer/header and a test"));
        };
        let one = |key: &str| map.len() == 1 && map.contains_key(key);
        if one("all") || one("any") {
            let key = if one("all") { "all" } else { "any" };
            let Some(items) = map[key].as_array().filter(|items| !items.is_empty()) else {
                return Err(ConfigError::field(format!("{path}.{key}"), "a non-empty list of conditions"));
            };
            let parsed = items
                .iter()
                .enumerate()
                .map(|(i, item)| Condition::parse(item, &format!("{path}.{key}[{i}]")))
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(if key == "all" { Condition::All(parsed) } else { Condition::Any(parsed) });
        }
        if one("not") {
            return Ok(Condition::Not(Box::new(Condition::parse(&map["not"], &format!("{path}.not"))?)));
        }
        let at = match (map.get("pointer"), map.get("header")) {
            (Some(Value::String(pointer)), None) if pointer.is_empty() || pointer.starts_with('/') => {
                Place::Pointer(pointer.clone())
            }
            (Some(_), None) => {
                return Err(ConfigError::field(format!("{path}.pointer"), "a JSON pointer: \"\" or \"/a/b\""));
            }
            (None, Some(Value::String(header))) if !header.is_empty() => Place::Header(header.clone()),
            (None, Some(_)) => return Err(ConfigError::field(format!("{path}.header"), "a header name")),
            _ => {
                return Err(ConfigError::field(path, "one of `pointer` or `header` with a test, or all / any / not"));
            }
        };
        let tests: Vec<(&String, &Value)> = map.iter().filter(|(k, _)| *k != "pointer" && *k != "header").collect();
        let [(name, operand)] = tests.as_slice() else {
            return Err(ConfigError::field(path, format!("exactly one test ({TESTS})")));
        };
        let at_key = format!("{path}.{name}");
        let number = || operand.as_f64().ok_or_else(|| ConfigError::field(&at_key, "a number"));
        let test = match name.as_str() {
            "equals" => Test::Equals((*operand).clone()),
            "in" => match operand {
                Value::Array(items) => Test::In(items.clone()),
                _ => return Err(ConfigError::field(&at_key, "a list of values")),
            },
            "exists" => match operand {
                Value::Bool(exists) => Test::Exists(*exists),
                _ => return Err(ConfigError::field(&at_key, "true or false")),
            },
            "prefix" => match operand {
                Value::String(prefix) => Test::Prefix(prefix.clone()),
                _ => return Err(ConfigError::field(&at_key, "a string")),
            },
            "gt" => Test::Compare(Compare::Gt, number()?),
            "gte" => Test::Compare(Compare::Gte, number()?),
            "lt" => Test::Compare(Compare::Lt, number()?),
            "lte" => Test::Compare(Compare::Lte, number()?),
            other => return Err(ConfigError::field(&at_key, format!("unknown test `{other}` ({TESTS})"))),
        };
        Ok(Condition::Test { at, test })
    }

    /// Whether any test reads the body.
    pub fn reads_body(&self) -> bool {
        match self {
            Condition::All(items) | Condition::Any(items) => items.iter().any(Condition::reads_body),
            Condition::Not(inner) => inner.reads_body(),
            Condition::Test { at, .. } => matches!(at, Place::Pointer(_)),
        }
    }

    /// Whether the condition holds for a hook whose body parsed as `body`.
    pub fn holds(&self, body: &Value, hook: &Hook) -> bool {
        match self {
            Condition::All(items) => items.iter().all(|c| c.holds(body, hook)),
            Condition::Any(items) => items.iter().any(|c| c.holds(body, hook)),
            Condition::Not(inner) => !inner.holds(body, hook),
            Condition::Test { at: Place::Pointer(pointer), test } => test.holds(body.pointer(pointer)),
            Condition::Test { at: Place::Header(name), test } => {
                let value = hook.header(name).map(|v| Value::String(String::from_utf8_lossy(v).into_owned()));
                test.holds(value.as_ref())
            }
        }
    }
}

impl Test {
    fn holds(&self, found: Option<&Value>) -> bool {
        match (self, found) {
            (Test::Exists(exists), found) => found.is_some() == *exists,
            (_, None) => false,
            (Test::Equals(expected), Some(found)) => same(expected, found),
            (Test::In(expected), Some(found)) => expected.iter().any(|e| same(e, found)),
            (Test::Prefix(prefix), Some(Value::String(text))) => text.starts_with(prefix.as_str()),
            (Test::Prefix(_), Some(_)) => false,
            (Test::Compare(op, bound), Some(found)) => {
                let value = match found {
                    Value::Number(n) => n.as_f64(),
                    Value::String(text) => text.trim().parse::<f64>().ok(),
                    _ => None,
                };
                value.is_some_and(|v| match op {
                    Compare::Gt => v > *bound,
                    Compare::Gte => v >= *bound,
                    Compare::Lt => v < *bound,
                    Compare::Lte => v <= *bound,
                })
            }
        }
    }
}

/// JSON equality, numbers compared by value (`1` equals `1.0`).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

impl fmt::Display for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |f: &mut fmt::Formatter<'_>, name: &str, items: &[Condition]| {
            write!(f, "{name}(")?;
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    write!(f, ", ")?;
                }
                write!(f, "{item}")?;
            }
            write!(f, ")")
        };
        match self {
            Condition::All(items) => list(f, "all", items),
            Condition::Any(items) => list(f, "any", items),
            Condition::Not(inner) => write!(f, "not({inner})"),
            Condition::Test { at, test } => {
                match at {
                    Place::Pointer(pointer) => write!(f, "{pointer}")?,
                    Place::Header(name) => write!(f, "header {name}")?,
                }
                match test {
                    Test::Equals(v) => write!(f, " equals {v}"),
                    Test::In(items) => write!(f, " in {}", Value::Array(items.clone())),
                    Test::Exists(true) => write!(f, " exists"),
                    Test::Exists(false) => write!(f, " is absent"),
                    Test::Prefix(p) => write!(f, " starts with {}", Value::String(p.clone())),
                    Test::Compare(op, n) => {
                        let op = match op {
                            Compare::Gt => ">",
                            Compare::Gte => ">=",
                            Compare::Lt => "<",
                            Compare::Lte => "<=",
                        };
                        write!(f, " {op} {n}")
                    }
                }
            }
        }
    }
}
