//! Per-key ordering of one binding (`sources.S.sinks: [{sink, ordering}]`):
//! which part of a hook is its ordering key, and what a dead hook does to
//! the hooks of its key behind it. The queue keeps the lines
//! (`queue::lines`); this says which line a hook joins.

use serde::{Deserialize, Serialize};

use crate::problem::Checker;
use crate::queue::{Envelope, Line};

/// `ordering:` of a binding.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OrderingSection {
    /// What orders hooks: `header:NAME` (a request header's value),
    /// `json:/pointer` (a JSON pointer into the body), `source` or `tenant`
    /// (every hook of the binding in one line). A hook without the header
    /// or the field is delivered out of line.
    pub key: String,
    #[serde(default)]
    pub on_dead: OnDead,
}

/// What a dead hook does to the hooks of its key behind it.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum OnDead {
    /// It goes to the DLQ and the next hook of its key is delivered,
    /// carrying the dead hook's id (`x-ankusa-previous-dead`).
    #[default]
    Skip,
    /// Its key stops until it is replayed (and delivered first) or an
    /// operator releases the key.
    Hold,
}

/// A loaded ordering rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrderingRule {
    pub key: OrderingKey,
    pub on_dead: OnDead,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OrderingKey {
    /// A request header, by its lower-case name.
    Header(String),
    /// An RFC 6901 JSON pointer into the body.
    Json(String),
    /// One line for the whole binding.
    Whole,
}

/// Keys longer than this are kept as their digest (a line's key is part
/// of every index key of its rows; `digest::capped_key`).
const MAX_KEY_BYTES: usize = 128;

impl OrderingSection {
    /// The rule, or a problem named under `c`.
    pub fn rule(&self, c: &mut Checker) -> Option<OrderingRule> {
        let key = match self.key.split_once(':') {
            Some(("header", name)) if http::HeaderName::try_from(name).is_ok() => {
                OrderingKey::Header(name.to_ascii_lowercase())
            }
            Some(("json", pointer)) if pointer.is_empty() || pointer.starts_with('/') => {
                OrderingKey::Json(pointer.to_string())
            }
            None if self.key == "source" || self.key == "tenant" => OrderingKey::Whole,
            _ => {
                c.add(
                    "key",
                    format!(
                        "`{}` is not an ordering key: `header:NAME`, `json:/pointer`, `source` or `tenant`",
                        self.key
                    ),
                );
                return None;
            }
        };
        Some(OrderingRule { key, on_dead: self.on_dead })
    }
}

impl OrderingRule {
    /// As the operator wrote it, and its `on_dead`: `header:x-shop-id, hold`.
    pub fn describe(&self) -> String {
        let key = match &self.key {
            OrderingKey::Header(name) => format!("header:{name}"),
            OrderingKey::Json(pointer) => format!("json:{pointer}"),
            OrderingKey::Whole => "source".to_string(),
        };
        let on_dead = match self.on_dead {
            OnDead::Skip => "skip",
            OnDead::Hold => "hold",
        };
        format!("{key}, {on_dead}")
    }

    /// The line `envelope` joins, if it has the key.
    pub fn line_of(&self, envelope: &Envelope) -> Option<Line> {
        let key = match &self.key {
            OrderingKey::Whole => String::new(),
            OrderingKey::Header(name) => envelope
                .headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, value)| String::from_utf8_lossy(value).into_owned())?,
            OrderingKey::Json(pointer) => {
                let body: serde_json::Value = serde_json::from_slice(&envelope.body).ok()?;
                match body.pointer(pointer)? {
                    serde_json::Value::Null => return None,
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                }
            }
        };
        let key = crate::digest::capped_key(&key, MAX_KEY_BYTES).into_owned();
        Some(Line { key, hold: self.on_dead == OnDead::Hold })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::Problem;

    fn rule(key: &str, on_dead: OnDead) -> Result<OrderingRule, Vec<Problem>> {
        let mut problems = Vec::new();
        let section = OrderingSection { key: key.into(), on_dead };
        let rule = section.rule(&mut Checker::new(&mut problems, "sources.shop.sinks[0].ordering"));
        rule.ok_or(problems)
    }

    fn hook(headers: &[(&str, &str)], body: &str) -> Envelope {
        let mut envelope = Envelope::new("h".into(), "shop".into(), "acme".into(), 1, body.as_bytes().to_vec());
        envelope.headers = headers.iter().map(|(n, v)| (n.to_string(), v.as_bytes().to_vec())).collect();
        envelope
    }

    #[test]
    fn each_kind_of_key_names_a_line_and_a_hook_without_it_none() {
        let by_header = rule("header:X-Shop-Id", OnDead::Skip).expect("header");
        let line = by_header.line_of(&hook(&[("x-shop-id", "s-9")], "{}"));
        assert_eq!(line, Some(Line { key: "s-9".into(), hold: false }));
        assert_eq!(by_header.line_of(&hook(&[], "{}")), None);

        let by_json = rule("json:/customer/id", OnDead::Hold).expect("json");
        let line = |body: &str| by_json.line_of(&hook(&[], body)).map(|l| l.key);
        assert_eq!(line(r#"{"customer":{"id":"c-1"}}"#), Some("c-1".into()));
        assert_eq!(line(r#"{"customer":{"id":42}}"#), Some("42".into()));
        assert_eq!(line(r#"{"customer":{"id":null}}"#), None);
        assert_eq!(line(r#"{"customer":{}}"#), None);
        assert_eq!(line("not json"), None);
        assert!(by_json.line_of(&hook(&[], r#"{"customer":{"id":1}}"#)).is_some_and(|l| l.hold));

        let whole = rule("source", OnDead::Skip).expect("source");
        assert_eq!(whole.line_of(&hook(&[], "x")).map(|l| l.key), Some(String::new()));
        assert_eq!(rule("tenant", OnDead::Skip).map(|r| r.key), Ok(OrderingKey::Whole));

        let long = "k".repeat(MAX_KEY_BYTES + 1);
        let key = by_header.line_of(&hook(&[("x-shop-id", &long)], "{}")).expect("a line").key;
        assert!(key.starts_with("sha256:") && key.len() <= MAX_KEY_BYTES, "{key}");
    }

    #[test]
    fn a_key_of_no_known_kind_is_named() {
        for bad in ["header", "json:customer", "header:bad name", "body", ""] {
            let problems = rule(bad, OnDead::Skip).expect_err(bad);
            assert_eq!(problems[0].key, "sources.shop.sinks[0].ordering.key", "{bad}");
        }
    }
}
