//! Moving values in and out of a JSON document by pointer (RFC 6901).

use serde_json::Value;

/// The tokens of a pointer (`/a~1b/c` is `a/b`, `c`).
fn tokens(pointer: &str) -> Vec<String> {
    pointer.split('/').skip(1).map(|t| t.replace("~1", "/").replace("~0", "~")).collect()
}

/// Remove and return the value at `pointer`, if there is one.
pub fn take(doc: &mut Value, pointer: &str) -> Option<Value> {
    let mut tokens = tokens(pointer);
    let last = tokens.pop()?;
    let mut at = doc;
    for token in &tokens {
        at = match at {
            Value::Object(map) => map.get_mut(token)?,
            Value::Array(items) => items.get_mut(token.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    match at {
        Value::Object(map) => map.remove(&last),
        Value::Array(items) => {
            let i = last.parse::<usize>().ok().filter(|i| *i < items.len())?;
            Some(items.remove(i))
        }
        _ => None,
    }
}

/// A new container for the token after it: an array where that token
/// appends (`-`) or indexes (`0`), an object otherwise.
fn container_for(next: &str) -> Value {
    match next == "-" || next.parse::<usize>().is_ok() {
        true => Value::Array(Vec::new()),
        false => Value::Object(Default::default()),
    }
}

/// Put `value` at `pointer`, making the containers on the way that are
/// missing (and replacing a scalar in the way with one): an array where
/// the next token is `-` or an index, an object otherwise. In an array, a
/// token is an index to replace, or `-` (or past the end) to append.
pub fn set(doc: &mut Value, pointer: &str, value: Value) {
    let tokens = tokens(pointer);
    let Some((last, path)) = tokens.split_last() else {
        *doc = value;
        return;
    };
    let mut at = doc;
    for (i, token) in path.iter().enumerate() {
        let next = tokens.get(i + 1).map_or("", String::as_str);
        at = match at {
            Value::Array(items) => match token.parse::<usize>().ok().filter(|i| *i < items.len()) {
                Some(i) => &mut items[i],
                None => {
                    let end = items.len();
                    items.push(container_for(next));
                    &mut items[end]
                }
            },
            other => {
                if !other.is_object() {
                    *other = Value::Object(Default::default());
                }
                match other {
                    Value::Object(map) => map.entry(token.clone()).or_insert_with(|| container_for(next)),
                    _ => return,
                }
            }
        };
    }
    match at {
        Value::Array(items) => match last.parse::<usize>().ok().filter(|i| *i < items.len()) {
            Some(i) => items[i] = value,
            None => items.push(value),
        },
        other => {
            if !other.is_object() {
                *other = Value::Object(Default::default());
            }
            if let Value::Object(map) = other {
                map.insert(last.clone(), value);
            }
        }
    }
}
