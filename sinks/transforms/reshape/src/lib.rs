//! `reshape`: change a hook's JSON body and headers before its sink gets
//! it: keep only some fields (`pick`), move them (`rename`), drop them
//! (`delete`), set them (`set`); set headers (from values or from the
//! body), remove headers, set the content type.
//!
//! ```yaml
//! transforms:
//!   slim:
//!     component: reshape
//!     options:
//!       pick: [/id, /type, /data/object/amount]
//!       rename: [{from: /data/object/amount, to: /amount}]
//!       set: [{pointer: /via, value: ankusa}]
//!       headers_from: {x-event-type: /type}
//!       remove_headers: [stripe-signature]
//! ```
//!
//! The body steps run in that order (pick, rename, delete, set) and the
//! result is written as compact JSON, object keys sorted. `headers_from`
//! reads the body as it came in. A body that is not JSON fails the attempt
//! as permanent (dead-lettered) unless `not_json: deliver` passes it on
//! with only the header steps applied.

mod pointer;

use std::collections::BTreeMap;

use ankusa_sdk::{ConfigError, Failure, Hook, Outgoing, Transform, Verdict, export_transform, options};
use serde::Deserialize;
use serde_json::Value;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Rename {
    from: String,
    to: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Set {
    pointer: String,
    value: Value,
}

#[derive(Deserialize, Default, PartialEq, Eq, Clone, Copy)]
#[serde(rename_all = "snake_case")]
enum NotJson {
    #[default]
    Fail,
    Deliver,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct Options {
    pick: Option<Vec<String>>,
    rename: Vec<Rename>,
    delete: Vec<String>,
    set: Vec<Set>,
    set_headers: BTreeMap<String, String>,
    headers_from: BTreeMap<String, String>,
    remove_headers: Vec<String>,
    content_type: Option<String>,
    not_json: NotJson,
}

struct Reshape {
    options: Options,
    /// Whether any step reads or changes the body.
    reads_body: bool,
    changes_body: bool,
}

impl Options {
    /// Every pointer, with the option that holds it.
    fn pointers(&self) -> Vec<(String, &str)> {
        let mut all = Vec::new();
        for (i, p) in self.pick.iter().flatten().enumerate() {
            all.push((format!("pick[{i}]"), p.as_str()));
        }
        for (i, r) in self.rename.iter().enumerate() {
            all.push((format!("rename[{i}].from"), r.from.as_str()));
            all.push((format!("rename[{i}].to"), r.to.as_str()));
        }
        for (i, p) in self.delete.iter().enumerate() {
            all.push((format!("delete[{i}]"), p.as_str()));
        }
        for (i, s) in self.set.iter().enumerate() {
            all.push((format!("set[{i}].pointer"), s.pointer.as_str()));
        }
        for (name, p) in &self.headers_from {
            all.push((format!("headers_from.{name}"), p.as_str()));
        }
        all
    }
}

impl Transform for Reshape {
    fn configure(json: &str) -> Result<Self, ConfigError> {
        let options: Options = options::parse(json)?;
        for (field, pointer) in options.pointers() {
            if !pointer.starts_with('/') {
                return Err(ConfigError::field(field, format!("{pointer:?} is not a JSON pointer (\"/a/b\")")));
            }
        }
        let changes_body = options.pick.is_some()
            || !options.rename.is_empty()
            || !options.delete.is_empty()
            || !options.set.is_empty();
        let reads_body = changes_body || !options.headers_from.is_empty();
        Ok(Reshape { options, reads_body, changes_body })
    }

    fn transform(&mut self, hook: Hook) -> Result<Verdict, Failure> {
        let o = &self.options;
        let mut out = Outgoing::unchanged();
        out.content_type = o.content_type.clone();
        out.remove_headers = o.remove_headers.clone();
        out.set_headers =
            o.set_headers.iter().map(|(name, value)| (name.clone(), value.clone().into_bytes())).collect();
        if !self.reads_body {
            return Ok(Verdict::Deliver(out));
        }
        let body: Value = match serde_json::from_slice(&hook.body) {
            Ok(body) => body,
            Err(_) if o.not_json == NotJson::Deliver => return Ok(Verdict::Deliver(out)),
            Err(e) => return Err(Failure::permanent(format!("reshape: the body is not JSON: {e}"))),
        };
        for (name, at) in &o.headers_from {
            let value = match body.pointer(at) {
                Some(Value::String(text)) => text.clone(),
                Some(Value::Null) | None => continue,
                Some(other) => other.to_string(),
            };
            out.set_headers.push((name.clone(), value.into_bytes()));
        }
        if self.changes_body {
            let reshaped = self.reshape(body);
            let bytes = serde_json::to_vec(&reshaped)
                .map_err(|e| Failure::permanent(format!("reshape: cannot write the body: {e}")))?;
            out.body = Some(bytes);
        }
        Ok(Verdict::Deliver(out))
    }
}

impl Reshape {
    fn reshape(&self, mut body: Value) -> Value {
        let o = &self.options;
        if let Some(pick) = &o.pick {
            let mut picked = Value::Object(Default::default());
            for at in pick {
                if let Some(value) = body.pointer(at) {
                    pointer::set(&mut picked, at, value.clone());
                }
            }
            body = picked;
        }
        for Rename { from, to } in &o.rename {
            if let Some(value) = pointer::take(&mut body, from) {
                pointer::set(&mut body, to, value);
            }
        }
        for at in &o.delete {
            pointer::take(&mut body, at);
        }
        for Set { pointer: at, value } in &o.set {
            pointer::set(&mut body, at, value.clone());
        }
        body
    }
}

export_transform!(Reshape);
