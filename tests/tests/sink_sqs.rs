//! The sqs sink against an SQS API of the test's own (moto in server mode):
//! messages read back, a FIFO queue storing a retried hook once, a body
//! that is not text sent base64-encoded, a missing queue refused for good,
//! the API killed and restarted mid-run, and the egress gate.

use ankusa_harness::{ErrorClass, Harness, OutcomeExt, SinkUnderTest, TestHook};
use ankusa_tests::moto::Moto;
use base64::Engine;
use serde_json::json;

fn scratch() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

async fn sqs(moto: &Moto, queue_url: &str) -> SinkUnderTest {
    Harness::shared()
        .builtin("sqs")
        .options(json!({"queue_url": queue_url, "access_key_id": "AKIDEXAMPLE", "secret_access_key": "secret"}))
        .allow([moto.endpoint()])
        .allow_networks(["127.0.0.0/8"])
        .real_network()
        .load()
        .await
        .expect("the sqs sink loads")
}

#[tokio::test]
async fn sends_each_hook_stores_a_fifo_retry_once_and_encodes_binary_bodies() {
    let moto = Moto::start(&scratch());
    let queue = moto.create_queue("orders").await;
    let sink = sqs(&moto, &queue).await;
    assert!(sink.durable(), "SQS stores a message before it answers");
    sink.deliver(TestHook::new().body("{\"n\": 1}"), 1).await.assert_delivered();
    let binary = vec![0u8, 159, 146, 150];
    sink.deliver(TestHook::new().body(binary.clone()), 1).await.assert_delivered();
    let mut bodies = moto.receive(&queue).await;
    bodies.sort();
    let encoded = base64::engine::general_purpose::STANDARD.encode(&binary);
    let mut expected = vec!["{\"n\": 1}".to_string(), encoded];
    expected.sort();
    assert_eq!(bodies, expected);

    let fifo = moto.create_queue("orders.fifo").await;
    let sink = sqs(&moto, &fifo).await;
    let hook = TestHook::new().id("retried").idempotency_key("retried:0").body("once");
    sink.deliver(hook.clone(), 1).await.assert_delivered();
    sink.deliver(hook, 2).await.assert_delivered();
    assert_eq!(moto.receive(&fifo).await, ["once"], "the deduplication id stored it once");
}

#[tokio::test]
async fn a_missing_queue_is_permanent_and_a_restarted_api_is_transient_then_delivers() {
    let mut moto = Moto::start(&scratch());
    let missing = sqs(&moto, &format!("{}/123456789012/nowhere", moto.endpoint())).await;
    let failure = missing.deliver(TestHook::new(), 1).await.assert_failed(ErrorClass::Permanent).clone();
    assert!(failure.reason.contains("NonExistentQueue"), "{failure}");

    let queue = moto.create_queue("restart").await;
    let sink = sqs(&moto, &queue).await;
    sink.deliver(TestHook::new().body("before"), 1).await.assert_delivered();
    moto.server.stop(); // its queues go with it
    sink.deliver(TestHook::new().body("while down"), 1).await.assert_failed(ErrorClass::Transient);
    moto.server.resume();
    assert_eq!(moto.create_queue("restart").await, queue, "the same queue again");
    sink.deliver(TestHook::new().body("after"), 2).await.assert_delivered();
    assert_eq!(moto.receive(&queue).await, ["after"]);
}

#[tokio::test]
async fn bad_options_are_named_and_an_unlisted_endpoint_is_denied() {
    let refused = async |options: serde_json::Value| {
        Harness::shared().builtin("sqs").options(options).load().await.err().expect("refused").to_string()
    };
    let base =
        json!({"queue_url": "https://sqs.eu-west-1.amazonaws.com/1/q", "access_key_id": "a", "secret_access_key": "s"});
    for (change, field) in [
        (json!({"queue_url": "sqs.eu-west-1.amazonaws.com/1/q"}), "`queue_url`"),
        (json!({"queue_url": "https://sqs.eu-west-1.amazonaws.com/q"}), "`queue_url`"),
        (json!({"secret_access_key": ""}), "`secret_access_key`"),
        (json!({"message_group_id": "g"}), "`message_group_id`"),
        (json!({"region": "eu west"}), "`region`"),
    ] {
        let mut options = base.clone();
        for (k, v) in change.as_object().expect("object") {
            options[k] = v.clone();
        }
        let err = refused(options).await;
        assert!(err.contains(field), "{field}: {err}");
    }
    let sink = Harness::shared()
        .builtin("sqs")
        .options(base)
        .allow(["https://sqs.us-east-1.amazonaws.com"])
        .load()
        .await
        .expect("loads");
    sink.deliver(TestHook::new(), 1).await.assert_failed(ErrorClass::Denied);
}
