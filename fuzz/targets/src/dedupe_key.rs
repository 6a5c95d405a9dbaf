//! Dedupe-key extraction: any rule, headers and body give a key or none,
//! never a panic, and a key is never empty.

use ankusa::source::dedupe::DedupeRule;
use arbitrary::Arbitrary;

#[derive(Debug, Arbitrary)]
struct Input {
    rule: Rule,
    headers: String,
    body: Vec<u8>,
}

#[derive(Debug, Arbitrary)]
enum Rule {
    Preset(u8),
    Header(String),
    JsonPath(String),
}

const PRESETS: [&str; 5] = ["github", "standard_webhooks", "svix", "shopify", "stripe"];

pub fn run(data: &[u8]) {
    let Some(input) = crate::shared::structured::<Input>(data) else { return };
    let rule = match input.rule {
        Rule::Preset(n) => DedupeRule::preset(PRESETS[n as usize % PRESETS.len()]),
        Rule::Header(name) => Some(DedupeRule::header(&name)),
        Rule::JsonPath(path) => DedupeRule::json_path(&path),
    };
    let Some(rule) = rule else { return };
    let headers = crate::shared::headers(&input.headers);
    if let Some(key) = rule.extract(&headers, &input.body) {
        assert!(!key.is_empty(), "an empty dedupe key from {rule:?}");
    }
}
