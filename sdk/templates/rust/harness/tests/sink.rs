//! {{name}} in a real host: the component `ankusa sink build` wrote, its
//! network a scripted peer.

use ankusa_harness::{ErrorClass, Harness, OutcomeExt, PeerReply, SinkUnderTest, TestHook};

const COMPONENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../build/{{name}}.wasm");

async fn sink(replies: impl IntoIterator<Item = PeerReply>) -> SinkUnderTest {
    Harness::shared()
        .wasm(COMPONENT)
        .options(serde_json::json!({"url": "https://api.example.com/hooks"}))
        .allow(["https://api.example.com"])
        .peer("https://api.example.com", replies)
        .load()
        .await
        .expect("build/{{name}}.wasm loads (run `ankusa sink build` first)")
}

#[tokio::test]
async fn a_hook_is_posted_with_its_idempotency_key() {
    let sink = sink([PeerReply::status(204)]).await;
    let hook = TestHook::new().body(r#"{"order":42}"#).idempotency_key("hook-1");
    sink.deliver(hook, 1).await.assert_delivered();
    let requests = sink.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].body.as_ref(), br#"{"order":42}"#);
    assert_eq!(requests[0].header("idempotency-key"), Some("hook-1"));
    assert!(sink.logs().iter().any(|line| line.message.contains("attempt 1")));
}

#[tokio::test]
async fn a_503_is_retried_and_a_404_is_not() {
    let sink = sink([PeerReply::status(503), PeerReply::status(404)]).await;
    sink.deliver(TestHook::new(), 1).await.assert_failed(ErrorClass::Transient);
    sink.deliver(TestHook::new(), 2).await.assert_failed(ErrorClass::Permanent);
}
