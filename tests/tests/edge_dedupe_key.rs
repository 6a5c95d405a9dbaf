//! Dedupe keys from whatever a provider (or a forger) sends: any body and
//! any header bytes give a key or no key, never a panic, and a key written
//! where the rule points is found whatever surrounds it.

use ankusa::source::DedupeRule;
use proptest::prelude::*;

/// A JSON value of bounded depth, with strings, numbers and nesting.
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::Bool),
        any::<i64>().prop_map(serde_json::Value::from),
        "\\PC{0,40}".prop_map(serde_json::Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::Array),
            proptest::collection::btree_map("[a-z]{1,6}", inner, 0..6)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn any_bytes_give_a_key_or_none_without_panicking(
        body in proptest::collection::vec(any::<u8>(), 0..512),
        value in proptest::collection::vec(any::<u8>(), 0..128),
        path in "[a-z0-9]{1,5}(\\.[a-z0-9]{1,5}){0,4}",
    ) {
        let headers = vec![("X-GitHub-Delivery".to_string(), value.clone())];
        let from_header = DedupeRule::preset("github").expect("preset").extract(&headers, &body);
        // A header key is the trimmed UTF-8 value, and never empty.
        let expected = std::str::from_utf8(&value).ok().map(str::trim).filter(|v| !v.is_empty());
        prop_assert_eq!(from_header.as_deref(), expected);
        let rule = DedupeRule::json_path(&path).expect("a path without empty segments");
        if let Some(key) = rule.extract(&[], &body) {
            prop_assert!(!key.is_empty());
        }
    }

    #[test]
    fn a_key_where_the_path_points_is_found_among_any_siblings(
        siblings in proptest::collection::btree_map("[A-Z]{1,6}", json_value(), 0..5),
        key in "\\PC{1,60}",
    ) {
        // Siblings are upper-case, so none of them is the `data` or `id` the path names.
        let mut data: serde_json::Map<String, serde_json::Value> = siblings.clone().into_iter().collect();
        data.insert("id".into(), serde_json::Value::String(key.clone()));
        let mut root: serde_json::Map<String, serde_json::Value> = siblings.into_iter().collect();
        root.insert("data".into(), serde_json::Value::Object(data));
        let body = serde_json::to_vec(&serde_json::Value::Object(root)).expect("serializable");
        let rule = DedupeRule::json_path("data.id").expect("path");
        prop_assert_eq!(rule.extract(&[], &body), Some(key));
    }
}

/// A body nested deeper than the JSON parser's recursion limit is not
/// parsed (no key, and no stack overflow), even where its key is shallow.
#[test]
fn bodies_nested_past_the_parser_limit_have_no_key() {
    let nest = |depth: usize| format!(r#"{{"id":"evt_1","x":{}0{}}}"#, "[".repeat(depth), "]".repeat(depth));
    let stripe = DedupeRule::preset("stripe").expect("preset");
    assert_eq!(stripe.extract(&[], nest(8).as_bytes()).as_deref(), Some("evt_1"));
    assert_eq!(stripe.extract(&[], nest(100_000).as_bytes()), None);
}
