//! Where a provider puts its delivery id: a header, or a field of the
//! JSON body. Admission stores it as the hook's dedupe key (the queue
//! hashes keys longer than 200 bytes).

use serde_json::Value;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DedupeRule {
    /// The first value of this header (lower-case name).
    Header(String),
    /// A dot-path into the JSON body (`data.object.id`); strings and
    /// numbers become keys, anything else means no key.
    JsonPath(Vec<String>),
}

impl DedupeRule {
    /// The presets: github, standard_webhooks, svix, shopify, stripe.
    pub fn preset(name: &str) -> Option<DedupeRule> {
        let header = |h: &str| Some(DedupeRule::Header(h.into()));
        match name {
            "github" => header("x-github-delivery"),
            "standard_webhooks" => header("webhook-id"),
            "svix" => header("svix-id"),
            "shopify" => header("x-shopify-webhook-id"),
            "stripe" => Some(DedupeRule::JsonPath(vec!["id".into()])),
            _ => None,
        }
    }

    pub fn header(name: &str) -> DedupeRule {
        DedupeRule::Header(name.to_ascii_lowercase())
    }

    /// A dot-path, `None` when a segment is empty.
    pub fn json_path(path: &str) -> Option<DedupeRule> {
        let segments: Vec<String> = path.split('.').map(str::to_string).collect();
        segments.iter().all(|s| !s.is_empty()).then_some(DedupeRule::JsonPath(segments))
    }

    /// The key of one request, if it has one.
    pub fn extract(&self, headers: &[(String, Vec<u8>)], body: &[u8]) -> Option<String> {
        match self {
            DedupeRule::Header(name) => headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .and_then(|(_, v)| std::str::from_utf8(v).ok())
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_string),
            DedupeRule::JsonPath(path) => {
                let value: Value = serde_json::from_slice(body).ok()?;
                let found = path.iter().try_fold(&value, |v, segment| match v {
                    Value::Object(map) => map.get(segment),
                    Value::Array(items) => segment.parse::<usize>().ok().and_then(|i| items.get(i)),
                    _ => None,
                })?;
                match found {
                    Value::String(s) if !s.is_empty() => Some(s.clone()),
                    Value::Number(n) => Some(n.to_string()),
                    _ => None,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> Vec<(String, Vec<u8>)> {
        pairs.iter().map(|(n, v)| (n.to_string(), v.as_bytes().to_vec())).collect()
    }

    #[test]
    fn presets_read_their_provider_ids() {
        let h = headers(&[("X-GitHub-Delivery", "72d3162e-cc78"), ("webhook-id", "msg_1"), ("svix-id", "msg_2")]);
        let get = |p: &str, body: &[u8]| DedupeRule::preset(p).expect("preset").extract(&h, body);
        assert_eq!(get("github", b"").as_deref(), Some("72d3162e-cc78"));
        assert_eq!(get("standard_webhooks", b"").as_deref(), Some("msg_1"));
        assert_eq!(get("svix", b"").as_deref(), Some("msg_2"));
        assert_eq!(get("shopify", b""), None);
        assert_eq!(get("stripe", br#"{"id":"evt_1","object":"event"}"#).as_deref(), Some("evt_1"));
        assert_eq!(get("stripe", b"not json"), None);
        assert!(DedupeRule::preset("gitlab").is_none());
    }

    #[test]
    fn json_paths_walk_objects_and_arrays() {
        let body = br#"{"data":{"items":[{"id":42},{"id":"b"}]},"empty":""}"#;
        let at = |p: &str| DedupeRule::json_path(p).expect("path").extract(&[], body);
        assert_eq!(at("data.items.0.id").as_deref(), Some("42"));
        assert_eq!(at("data.items.1.id").as_deref(), Some("b"));
        assert_eq!(at("data.items"), None, "not a scalar");
        assert_eq!(at("empty"), None);
        assert_eq!(at("missing.path"), None);
        assert!(DedupeRule::json_path("a..b").is_none());
    }
}
