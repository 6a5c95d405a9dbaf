//! Dedupe-key extraction: any rule, headers and body give a key or none,
//! never a panic, and a key is never empty.
#![no_main]

use ankusa::source::dedupe::DedupeRule;
use libfuzzer_sys::{arbitrary, fuzz_target};

#[derive(Debug, arbitrary::Arbitrary)]
struct Input {
    rule: Rule,
    headers: String,
    body: Vec<u8>,
}

#[derive(Debug, arbitrary::Arbitrary)]
enum Rule {
    Preset(u8),
    Header(String),
    JsonPath(String),
}

const PRESETS: [&str; 5] = ["github", "standard_webhooks", "svix", "shopify", "stripe"];

fuzz_target!(|input: Input| {
    let rule = match input.rule {
        Rule::Preset(n) => DedupeRule::preset(PRESETS[n as usize % PRESETS.len()]),
        Rule::Header(name) => Some(DedupeRule::header(&name)),
        Rule::JsonPath(path) => DedupeRule::json_path(&path),
    };
    let Some(rule) = rule else { return };
    let headers = ankusa_fuzz::headers(&input.headers);
    if let Some(key) = rule.extract(&headers, &input.body) {
        assert!(!key.is_empty(), "an empty dedupe key from {rule:?}");
    }
});
