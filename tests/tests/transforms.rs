//! Transform components in the runtime: the shipped `jsonfilter` and
//! `reshape` on real hooks, what a misbehaving transform comes to (a
//! `fault` or `timeout`, the runtime unharmed), and the checks that keep
//! sinks and transforms apart.

use std::time::Duration;

use ankusa::error_class::ErrorClass;
use ankusa::runtime::{Applied, ComponentSource, Hook, LoadError, Transform, TransformSpec};
use ankusa_harness::Harness;
use ankusa_tests::guest_wasm;
use serde_json::{Value, json};

async fn load(component: ComponentSource, options: Value) -> Result<Transform, LoadError> {
    let mut spec = TransformSpec::new("t", component);
    spec.options = options;
    spec.limits.attempt_timeout = Duration::from_millis(500);
    spec.limits.memory_bytes = 32 << 20;
    Harness::shared().runtime().load_transform(spec).await
}

async fn shipped(name: &str, options: Value) -> Transform {
    load(ComponentSource::Builtin(name.into()), options).await.expect("the shipped transform loads")
}

async fn misbehave(options: Value) -> Transform {
    load(ComponentSource::Path(guest_wasm("transform-misbehave")), options).await.expect("loads")
}

fn hook(body: &str, headers: &[(&str, &str)]) -> Hook {
    Hook {
        id: "0190-hook".into(),
        seq: 7,
        source: "shop".into(),
        tenant: "default".into(),
        received_at: 1,
        content_type: Some("application/json".into()),
        headers: headers.iter().map(|(n, v)| (n.to_string(), v.as_bytes().to_vec())).collect(),
        body: body.as_bytes().to_vec(),
        sha256: ankusa::digest::sha256_hex(body.as_bytes()),
        dedupe_key: None,
        idempotency_key: "k".into(),
        replay_id: None,
    }
}

/// What `transform` makes of a hook with `body`: delivered (as what), or
/// dropped (why).
async fn verdict(transform: &Transform, body: &str, headers: &[(&str, &str)]) -> Result<String, String> {
    let mut h = hook(body, headers);
    match transform.apply(&mut h).await.expect("no failure") {
        Applied::Deliver => Ok(String::from_utf8(h.body).expect("utf8")),
        Applied::Drop(reason) => Err(reason),
    }
}

#[tokio::test]
async fn jsonfilter_keeps_what_its_conditions_hold_for() {
    let filter = shipped(
        "jsonfilter",
        json!({"keep": {"all": [
            {"pointer": "/type", "prefix": "invoice."},
            {"any": [{"pointer": "/amount", "gte": 1000}, {"pointer": "/vip", "equals": true}]},
            {"not": {"pointer": "/test", "exists": true}},
            {"header": "x-region", "in": ["eu", "us"]},
        ]}}),
    )
    .await;
    let eu = [("X-Region", "eu")];
    assert!(verdict(&filter, r#"{"type":"invoice.paid","amount":1000}"#, &eu).await.is_ok());
    assert!(verdict(&filter, r#"{"type":"invoice.paid","amount":5,"vip":true}"#, &eu).await.is_ok());
    assert!(verdict(&filter, r#"{"type":"invoice.paid","amount":"2500"}"#, &eu).await.is_ok(), "a numeric string");
    for (body, headers, why) in [
        (r#"{"type":"charge.paid","amount":9000}"#, &eu[..], "wrong prefix"),
        (r#"{"type":"invoice.paid","amount":999}"#, &eu[..], "too small"),
        (r#"{"type":"invoice.paid","amount":5000,"test":false}"#, &eu[..], "a test hook"),
        (r#"{"type":"invoice.paid","amount":5000}"#, &[("x-region", "apac")][..], "another region"),
        (r#"{"type":"invoice.paid","amount":5000}"#, &[][..], "no region header"),
    ] {
        let reason = verdict(&filter, body, headers).await.expect_err(why);
        assert!(reason.starts_with("keep: all("), "{why}: {reason}");
    }
    let not_json = verdict(&filter, "<xml/>", &eu).await.expect_err("not JSON is dropped");
    assert!(not_json.contains("not JSON"), "{not_json}");
}

#[tokio::test]
async fn jsonfilter_drop_names_its_reason_and_passes_what_is_not_json_when_told() {
    let filter = shipped(
        "jsonfilter",
        json!({"drop": {"pointer": "/livemode", "equals": false}, "reason": "test mode", "not_json": "deliver"}),
    )
    .await;
    assert_eq!(verdict(&filter, r#"{"livemode":false}"#, &[]).await, Err("test mode".into()));
    assert_eq!(verdict(&filter, r#"{"livemode":true}"#, &[]).await, Ok(r#"{"livemode":true}"#.into()));
    assert_eq!(verdict(&filter, "plain", &[]).await, Ok("plain".into()), "not JSON, delivered unchanged");

    let failing = shipped("jsonfilter", json!({"keep": {"pointer": "/a", "exists": true}, "not_json": "fail"})).await;
    let failure = failing.apply(&mut hook("plain", &[])).await.expect_err("not JSON fails");
    assert_eq!(failure.class, ErrorClass::Permanent, "{failure}");
}

#[tokio::test]
async fn jsonfilter_options_are_checked_at_load_naming_the_field() {
    for (options, field) in [
        (json!({}), None),
        (json!({"keep": {"pointer": "/a", "equals": 1}, "drop": {"pointer": "/a", "equals": 1}}), Some("keep")),
        (json!({"keep": {"all": [{"pointer": "/a", "gte": "x"}]}}), Some("keep.all[0].gte")),
        (json!({"keep": {"pointer": "a", "equals": 1}}), Some("keep.pointer")),
        (json!({"keep": {"pointer": "/a", "equal": 1}}), Some("keep.equal")),
        (json!({"keep": {"pointer": "/a"}}), Some("keep")),
        (json!({"keep": {"pointer": "/a", "exists": true}, "reasn": "x"}), Some("reasn")),
    ] {
        match load(ComponentSource::Builtin("jsonfilter".into()), options.clone()).await {
            Err(LoadError::Options { field: found, message, .. }) => {
                assert_eq!(found.as_deref(), field, "{options}: {message}");
            }
            Err(other) => panic!("{options}: {other}"),
            Ok(_) => panic!("{options} loaded"),
        }
    }
}

#[tokio::test]
async fn reshape_changes_the_body_and_headers_byte_for_byte() {
    let reshape = shipped(
        "reshape",
        json!({
            "pick": ["/id", "/type", "/data/object/amount", "/data/object/currency"],
            "rename": [{"from": "/data/object/amount", "to": "/amount"}],
            "delete": ["/data/object/currency"],
            "set": [{"pointer": "/via", "value": "ankusa"}, {"pointer": "/tags/-", "value": "a"}],
            "headers_from": {"x-event-type": "/type"},
            "set_headers": {"x-shape": "slim"},
            "remove_headers": ["Stripe-Signature"],
            "content_type": "application/vnd.slim+json",
        }),
    )
    .await;
    let body = r#"{"id":"evt_1","type":"invoice.paid","livemode":true,"data":{"object":{"amount":1200,"currency":"eur","lines":[1,2]}}}"#;
    let mut h = hook(body, &[("Stripe-Signature", "t=1,v1=x"), ("X-Shape", "fat"), ("User-Agent", "Stripe/1.0")]);
    assert_eq!(reshape.apply(&mut h).await, Ok(Applied::Deliver));
    let expected =
        r#"{"amount":1200,"data":{"object":{}},"id":"evt_1","tags":["a"],"type":"invoice.paid","via":"ankusa"}"#;
    assert_eq!(String::from_utf8(h.body.clone()).expect("utf8"), expected);
    assert_eq!(h.sha256, ankusa::digest::sha256_hex(expected.as_bytes()), "the digest follows the body");
    assert_eq!(h.content_type.as_deref(), Some("application/vnd.slim+json"));
    let headers: Vec<(String, String)> =
        h.headers.iter().map(|(n, v)| (n.clone(), String::from_utf8_lossy(v).into_owned())).collect();
    assert_eq!(
        headers,
        [
            ("User-Agent".to_string(), "Stripe/1.0".to_string()),
            ("x-shape".to_string(), "slim".to_string()),
            ("x-event-type".to_string(), "invoice.paid".to_string()),
        ]
    );

    // A body that is not JSON: dead-lettered as permanent, unless told.
    let failure = reshape.apply(&mut hook("<xml/>", &[])).await.expect_err("not JSON");
    assert_eq!(failure.class, ErrorClass::Permanent);
    let headers_only = shipped("reshape", json!({"set_headers": {"x-a": "1"}})).await;
    let mut plain = hook("<xml/>", &[]);
    assert_eq!(headers_only.apply(&mut plain).await, Ok(Applied::Deliver), "headers alone never read the body");
    assert_eq!(plain.body, b"<xml/>");
}

#[tokio::test]
async fn a_misbehaving_transform_is_a_fault_or_a_timeout_and_the_next_call_works() {
    let t = misbehave(json!({"mode": "pass", "tag": "!"})).await;
    for (mode, class, says) in [
        ("trap", ErrorClass::Fault, "trap"),
        ("loop", ErrorClass::Timeout, "deadline"),
        ("alloc", ErrorClass::Fault, "memory limit"),
        ("bad-header", ErrorClass::Fault, "invalid name"),
        ("host-header", ErrorClass::Fault, "x-ankusa-"),
        ("transient", ErrorClass::Transient, "retry"),
        ("permanent", ErrorClass::Permanent, "refused"),
    ] {
        let mut h = hook("{}", &[("x-misbehave", mode)]);
        let failure = t.apply(&mut h).await.expect_err(mode);
        assert_eq!(failure.class, class, "{mode}: {failure}");
        assert!(failure.reason.contains(says), "{mode}: {failure}");
        assert_eq!(h.body, b"{}", "{mode}: a failed call leaves the hook as it was");
        // The next call gets a working instance.
        let mut next = hook("{}", &[("x-misbehave", "tag")]);
        assert_eq!(t.apply(&mut next).await, Ok(Applied::Deliver), "after {mode}");
        assert_eq!(next.body, b"{}!");
    }
    let pool = t.instances();
    // Only the trap, the loop and the allocation cost an instance; a bad
    // verdict or a failure is an answer, and the instance stays warm.
    assert_eq!((pool.traps, pool.timeouts, pool.memory_faults, pool.retired), (1, 1, 1, 3), "{pool:?}");
    assert_eq!(verdict(&t, "{}", &[("x-misbehave", "drop")]).await, Err("dropped 0190-hook".into()));
}

#[tokio::test]
async fn a_sink_is_not_a_transform_nor_a_transform_a_sink() {
    let as_transform = load(ComponentSource::Builtin("http".into()), json!({})).await;
    let message = as_transform.err().expect("the http sink is no transform").to_string();
    assert!(message.contains("unknown built-in") || message.contains("not a transform"), "{message}");
    let as_transform = load(ComponentSource::Path(guest_wasm("noop")), json!({})).await;
    let message = as_transform.err().expect("noop is no transform").to_string();
    assert!(message.contains("does not export `ankusa:sink/transform@"), "{message}");
    assert!(message.starts_with("transform `t`"), "the error names the transform: {message}");

    let spec = ankusa::runtime::SinkSpec::new(
        ankusa::runtime::SinkLabel::new("s", "out"),
        ComponentSource::Path(guest_wasm("jsonfilter")),
    );
    let message = Harness::shared().runtime().load(spec).await.err().expect("a transform is no sink").to_string();
    assert!(message.contains("does not export `ankusa:sink/sink@"), "{message}");

    let bytes = std::fs::read(guest_wasm("reshape")).expect("reshape");
    let info = Harness::shared().runtime().inspect(&bytes).expect("inspect a transform");
    assert_eq!(info.world, format!("ankusa:sink/transform-world@{}", ankusa::runtime::WIT_VERSION));
    assert!(
        info.imports.iter().all(|i| !i.contains("http") && !i.contains("tcp-client") && !i.contains("sockets")),
        "{:?}",
        info.imports
    );
}
