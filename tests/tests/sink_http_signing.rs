//! Standard Webhooks signing by the http sink, checked by a verifier written
//! independently from the spec.

use ankusa_harness::{Harness, OutcomeExt, PeerReply, TestHook};
use ankusa_tests::networked_http_sink;
use ankusa_tests::receiver::{Receiver, Reply};
use ankusa_tests::standard_webhooks::{expected_signature, verify};
use serde_json::json;

/// The example from the Standard Webhooks specification's test vectors.
const SPEC_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const SPEC_MSG_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
const SPEC_TIMESTAMP: u64 = 1_614_265_330;
const SPEC_PAYLOAD: &str = r#"{"test": 2432232314}"#;
const SPEC_SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

#[test]
fn the_independent_verifier_agrees_with_the_spec_vector() {
    let sig = expected_signature(SPEC_SECRET, SPEC_MSG_ID, &SPEC_TIMESTAMP.to_string(), SPEC_PAYLOAD.as_bytes());
    assert_eq!(sig, SPEC_SIGNATURE);
}

#[tokio::test]
async fn the_sink_signs_the_spec_vector_exactly() {
    let sink = Harness::shared()
        .builtin("http")
        .options(json!({"url": "https://hooks.example.com/in", "secret": SPEC_SECRET}))
        .allow(["https://hooks.example.com"])
        .clock_at(SPEC_TIMESTAMP)
        .peer("https://hooks.example.com", [PeerReply::status(200)])
        .load()
        .await
        .expect("loads");
    let hook = TestHook::new().id(SPEC_MSG_ID).body(SPEC_PAYLOAD);
    sink.deliver(hook, 1).await.assert_delivered();
    let requests = sink.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].header("webhook-id"), Some(SPEC_MSG_ID));
    assert_eq!(requests[0].header("webhook-timestamp"), Some("1614265330"));
    assert_eq!(requests[0].header("webhook-signature"), Some(SPEC_SIGNATURE));
}

#[tokio::test]
async fn a_real_receiver_verifies_the_signature() {
    let receiver = Receiver::start(Reply::status(200)).await;
    let secret = "whsec_dGhpcyBpcyBhIHRlc3Qgc2VjcmV0IGZvciBhbmt1c2E=";
    let sink =
        networked_http_sink(json!({"url": receiver.url("/in"), "secret": secret}), &[receiver.origin()], &[]).await;
    let body = br#"{"event":"order.created","n":1}"#;
    sink.deliver(TestHook::new().body(body.to_vec()), 1).await.assert_delivered();
    let got = &receiver.received()[0];
    let (id, ts, sig) = (
        got.header("webhook-id").expect("webhook-id"),
        got.header("webhook-timestamp").expect("webhook-timestamp"),
        got.header("webhook-signature").expect("webhook-signature"),
    );
    assert!(verify(secret, id, ts, &got.body, sig), "signature {sig} does not verify");
    assert!(!verify(secret, id, ts, b"tampered", sig), "a tampered body must not verify");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs();
    let ts: u64 = ts.parse().expect("numeric timestamp");
    assert!(now.abs_diff(ts) <= 5, "timestamp {ts} is not now ({now})");
}

#[tokio::test]
async fn rotation_sends_one_entry_per_secret() {
    let (new, old) = ("whsec_bmV3ZXN0LXNlY3JldC1rZXktMQ==", "an-old-raw-secret");
    let sink = Harness::shared()
        .builtin("http")
        .options(json!({"url": "https://hooks.example.com/in", "secret": [new, old]}))
        .allow(["https://hooks.example.com"])
        .peer("*", [PeerReply::status(200)])
        .load()
        .await
        .expect("loads");
    sink.deliver(TestHook::new().body("{}"), 1).await.assert_delivered();
    let request = &sink.requests()[0];
    let (id, ts) = (request.header("webhook-id").expect("id"), request.header("webhook-timestamp").expect("ts"));
    let header = request.header("webhook-signature").expect("signature");
    let entries: Vec<&str> = header.split(' ').collect();
    assert_eq!(entries.len(), 2, "{header}");
    assert!(entries.iter().all(|e| e.starts_with("v1,")));
    assert!(verify(new, id, ts, b"{}", entries[0]), "the newest secret signs the first entry");
    assert!(verify(old, id, ts, b"{}", entries[1]), "the old secret signs the second entry");
    assert!(verify(old, id, ts, b"{}", header), "a receiver holding only the old secret accepts");
    assert!(!verify("whsec_b3RoZXI=", id, ts, b"{}", header), "an unrelated secret does not");
}
