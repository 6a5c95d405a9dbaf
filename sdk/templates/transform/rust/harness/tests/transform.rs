//! {{name}} in a real host: the component `ankusa sink build` wrote, run
//! as a transform.

use ankusa_harness::{Applied, ComponentSource, Harness, TestHook, TransformSpec};

const COMPONENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../build/{{name}}.wasm");

#[tokio::test]
async fn a_ping_is_dropped_and_anything_else_tagged() {
    let mut spec = TransformSpec::new("{{name}}", ComponentSource::Path(COMPONENT.into()));
    spec.options = serde_json::json!({"drop_when": "ping"});
    let transform = Harness::shared()
        .runtime()
        .load_transform(spec)
        .await
        .expect("build/{{name}}.wasm loads (run `ankusa sink build` first)");

    let mut ping = TestHook::new().body(r#"{"type":"ping"}"#).build();
    let dropped = transform.apply(&mut ping).await.expect("a verdict");
    assert!(matches!(dropped, Applied::Drop(reason) if reason.contains("ping")));

    let mut order = TestHook::new().body(r#"{"type":"order.paid"}"#).build();
    assert_eq!(transform.apply(&mut order).await, Ok(Applied::Deliver));
    assert_eq!(order.body, br#"{"type":"order.paid"}"#);
    assert!(order.headers.iter().any(|(name, value)| name == "x-transform" && value == b"{{name}}"));
}
