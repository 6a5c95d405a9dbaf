//! `jsonfilter`: keep or drop each hook on conditions over its JSON body
//! (by JSON pointer) and its headers.
//!
//! ```yaml
//! transforms:
//!   paid-only:
//!     component: jsonfilter
//!     options:
//!       keep: {all: [{pointer: /type, prefix: "invoice."}, {pointer: /data/amount, gte: 1000}]}
//! ```
//!
//! Exactly one of `keep` (deliver the hooks it holds for) or `drop`
//! (deliver the others). `reason` names a dropped hook's reason (default:
//! the condition that decided). A body that is not JSON is dropped unless
//! `not_json: deliver` (or `fail`: a permanent failure, dead-lettered).

mod condition;

use ankusa_sdk::{ConfigError, Failure, Hook, Outgoing, Transform, Verdict, export_transform};
use serde_json::Value;

use condition::Condition;

/// What a body that is not JSON comes to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum NotJson {
    Drop,
    Deliver,
    Fail,
}

struct JsonFilter {
    condition: Condition,
    /// `keep`: deliver when the condition holds; `drop`: when it does not.
    keep: bool,
    reason: Option<String>,
    not_json: NotJson,
    /// Whether any condition reads the body (a filter on headers alone
    /// never parses it).
    reads_body: bool,
}

impl Transform for JsonFilter {
    fn configure(options: &str) -> Result<Self, ConfigError> {
        let options: Value =
            serde_json::from_str(options).map_err(|e| ConfigError::new(format!("options are not JSON: {e}")))?;
        let Value::Object(map) = options else { return Err(ConfigError::new("options must be a map")) };
        let mut keep = None;
        let mut reason = None;
        let mut not_json = NotJson::Drop;
        for (key, value) in &map {
            match key.as_str() {
                "keep" | "drop" if keep.is_some() => {
                    return Err(ConfigError::field(key, "give one of `keep` or `drop`, not both"));
                }
                "keep" | "drop" => keep = Some((key == "keep", Condition::parse(value, key)?)),
                "reason" => match value {
                    Value::String(text) => reason = Some(text.clone()),
                    _ => return Err(ConfigError::field("reason", "a string")),
                },
                "not_json" => {
                    not_json = match value.as_str() {
                        Some("drop") => NotJson::Drop,
                        Some("deliver") => NotJson::Deliver,
                        Some("fail") => NotJson::Fail,
                        _ => return Err(ConfigError::field("not_json", "one of `drop`, `deliver`, `fail`")),
                    }
                }
                other => {
                    return Err(ConfigError::field(
                        other,
                        format!("unknown option `{other}` (keep, drop, reason, not_json)"),
                    ));
                }
            }
        }
        let Some((keep, condition)) = keep else {
            return Err(ConfigError::new("give `keep` (deliver what it holds for) or `drop` (deliver the rest)"));
        };
        let reads_body = condition.reads_body();
        Ok(JsonFilter { condition, keep, reason, not_json, reads_body })
    }

    fn transform(&mut self, hook: Hook) -> Result<Verdict, Failure> {
        let body = if self.reads_body {
            match serde_json::from_slice::<Value>(&hook.body) {
                Ok(body) => Some(body),
                Err(e) => {
                    return match self.not_json {
                        NotJson::Drop => Ok(Verdict::Drop(format!("the body is not JSON: {e}"))),
                        NotJson::Deliver => Ok(Verdict::Deliver(Outgoing::unchanged())),
                        NotJson::Fail => Err(Failure::permanent(format!("the body is not JSON: {e}"))),
                    };
                }
            }
        } else {
            None
        };
        let holds = self.condition.holds(body.as_ref().unwrap_or(&Value::Null), &hook);
        if holds == self.keep {
            return Ok(Verdict::Deliver(Outgoing::unchanged()));
        }
        let reason = match &self.reason {
            Some(reason) => reason.clone(),
            None if self.keep => format!("keep: {} does not hold", self.condition),
            None => format!("drop: {} holds", self.condition),
        };
        Ok(Verdict::Drop(reason))
    }
}

export_transform!(JsonFilter);
